"""Roofline-style step time of one engine iteration (../shared/reference/sim-model.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.presets import Preset


@dataclass(frozen=True)
class StepCost:
    """Duration of one step and how the GPU was busy during it."""

    duration_s: float
    memory_busy_s: float  # weights + KV streaming
    compute_busy_s: float  # linear layers + prefill attention
    weight_bytes: float
    kv_bytes: float


class StepTimeModel:
    """T = s * [T_fix + smoothmax(T_w, T_lin) + T_kv + T_pf + T_ar + h0 + h1 * n] * (1 + penalty)."""

    def __init__(self, preset: Preset, *, tensor_parallel: int = 1, time_scale: float = 1.0,
                 kv_dtype_bytes: float = 2.0, weight_scale: float = 1.0) -> None:
        hw, m = preset.hardware, preset.model
        self.preset = preset
        self.tp = tensor_parallel
        self.scale = time_scale
        bw = hw.bandwidth * hw.eta_bw
        flops = hw.flops * hw.eta_f
        self.weight_bytes_per_gpu = m.weight_bytes * weight_scale / tensor_parallel
        self.t_weights = self.weight_bytes_per_gpu / bw
        self.t_linear_per_token = 2.0 * m.params / (tensor_parallel * flops)
        self.kv_bytes_per_token_gpu = m.kv_bytes_per_token * (kv_dtype_bytes / 2.0) / tensor_parallel
        self.t_kv_per_token = self.kv_bytes_per_token_gpu / bw
        self.t_attn_coeff = 4.0 * m.layers * m.heads * m.head_dim / (tensor_parallel * flops)
        if tensor_parallel > 1:
            ring = 2.0 * (tensor_parallel - 1) / tensor_parallel
            self.t_ar_fixed = 2 * m.layers * hw.allreduce_alpha_s
            self.t_ar_per_token = 2 * m.layers * ring * m.hidden * 2.0 / hw.link_bandwidth
        else:
            self.t_ar_fixed = 0.0
            self.t_ar_per_token = 0.0

    def cost(self, decode_contexts: int, num_decodes: int, chunks: list[tuple[int, int]],
             *, penalty: float = 0.0, extra_s: float = 0.0) -> StepCost:
        """Cost of a step with `num_decodes` decodes (context summed) and prefill chunks (new, prior).

        `penalty` slows the whole step by a ratio (allocator fragmentation); `extra_s` adds a one-off
        delay (kernel warm-up after a start).
        """
        p = self.preset
        n_tokens = num_decodes + sum(n for n, _ in chunks)
        t_w = self.t_weights
        t_lin = self.t_linear_per_token * n_tokens
        # Smooth max keeps Vidur's knee without a kink: (a^4 + b^4)^(1/4).
        t_mat = (t_w**4 + t_lin**4) ** 0.25
        t_kv = self.t_kv_per_token * decode_contexts
        t_pf = self.t_attn_coeff * sum(n * (prior + n / 2.0) for n, prior in chunks)
        t_ar = (self.t_ar_fixed + self.t_ar_per_token * n_tokens) if n_tokens else 0.0
        host = p.host_overhead_s + p.per_request_overhead_s * (num_decodes + len(chunks))
        total = ((p.fixed_overhead_s + t_mat + t_kv + t_pf + t_ar + host) * (1.0 + penalty) + extra_s) * self.scale
        return StepCost(
            duration_s=total,
            memory_busy_s=(t_w + t_kv) * self.scale,
            compute_busy_s=(t_lin + t_pf) * self.scale,
            weight_bytes=self.weight_bytes_per_gpu,
            kv_bytes=self.kv_bytes_per_token_gpu * decode_contexts,
        )
