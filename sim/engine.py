"""The simulated vLLM engine core: requests in, steps on a clock, tokens and metrics out.

The engine never reads a clock: every call passes `now`. A driver (`sim.realtime` for HTTP,
`sim.harness` for virtual time) calls `schedule(now)` to get the next step and its duration, then
`complete(step, now + duration)`.

This module is the core itself (`EngineCore`: its state, the step loop, admin calls, faults and the
GPU view, which share that state and read best together) and re-exports its types:
`sim.engine_types` (`EngineConfig`, `EngineStartError`, `Step`, the busy window) and
`sim.engine_startup` (memory sizing, the argument checks that fail start-up, cache_config_info labels).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from sim.engine_startup import cache_config_labels, check_engine_args, kv_dtype_bytes, weight_scale
from sim.engine_types import BusyWindow, EngineConfig, EngineStartError, Step
from sim.faults import FaultPlan
from sim.gpu import GIB, GpuLedger, GpuMemoryError, GpuReading, MemoryLedger, gpu_uuid
from sim.kvcache import KVCache
from sim.presets import Preset
from sim.profiles import VersionProfile
from sim.request import SimRequest, Status
from sim.scheduler import Scheduler, SchedulerConfig
from sim.startup import StartupPlan, graph_covers, plan_startup
from sim.stats import MetricsState, new_metrics_state
from sim.steptime import StepCost, StepTimeModel

__all__ = ["FATAL_XIDS", "EngineConfig", "EngineCore", "EngineStartError", "Step"]

FATAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95})


class EngineCore:
    """Scheduler + KV cache + step-time model + metrics for one engine."""

    def __init__(self, config: EngineConfig, preset: Preset, profile: VersionProfile, *, now: float,
                 ledger: GpuLedger | None = None, owner: str = "engine", faults: FaultPlan | None = None,
                 ready: bool = False) -> None:
        """The process starts at `now` and serves after its modelled start-up (`self.startup`); with `ready`
        it started that long before `now` and serves from `now` (an engine already up)."""
        self.config = config
        self.preset = preset
        self.profile = profile
        self.owner = owner
        self.faults = faults or FaultPlan()
        self.ledger: GpuLedger = ledger if ledger is not None else MemoryLedger()
        self.rng = random.Random(config.seed)
        hw = preset.hardware
        self.step_model = StepTimeModel(
            preset, tensor_parallel=config.tensor_parallel_size, time_scale=config.time_scale,
            kv_dtype_bytes=kv_dtype_bytes(config.kv_cache_dtype),
            weight_scale=weight_scale(config.quantization),
        )
        self.footprint_bytes = config.gpu_memory_utilization * hw.hbm_bytes
        kv_bytes = self.footprint_bytes - self.step_model.weight_bytes_per_gpu - preset.activation_reserve_bytes
        self.kv_cache_bytes = max(0.0, kv_bytes)
        per_block = config.block_size * self.step_model.kv_bytes_per_token_gpu
        blocks = int(self.kv_cache_bytes // per_block) if per_block else 0
        if config.num_gpu_blocks_override:
            blocks = config.num_gpu_blocks_override
        self.num_gpu_blocks = blocks
        self.kv = KVCache(blocks, config.block_size, prefix_caching=config.enable_prefix_caching)
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_model_len=config.max_model_len,
                chunked_prefill=config.enable_chunked_prefill,
                policy=config.scheduling_policy,
                long_prefill_token_threshold=config.long_prefill_token_threshold,
            ),
            self.kv,
        )
        unscaled = max(config.time_scale, 1e-12)
        self.startup: StartupPlan = plan_startup(
            config, preset, profile, weight_bytes=self.step_model.weight_bytes_per_gpu * config.tensor_parallel_size,
            kv_cache_bytes=self.kv_cache_bytes,
            profile_step_s=self.step_model.cost(0, 0, [(config.max_num_batched_tokens, 0)]).duration_s / unscaled)
        self.graph_sizes = self.startup.graph_sizes
        self.started_at = now - self.startup.total_s if ready else now  # process start
        self.ready_at = now if ready else now + self.startup.total_s  # listening, serving
        now = self.ready_at
        self.metrics: MetricsState = new_metrics_state(profile, config.max_model_len, now)
        self.metrics.process.start_time = self.started_at
        self.metrics.cache_config = cache_config_labels(config, profile.name, self.num_gpu_blocks)
        self.requests: dict[str, SimRequest] = {}
        self.dead = False
        self.death_reason = ""
        self.sleep_level = 0
        self.last_defrag = now
        self.xid_last = 0
        self.ecc_dbe = 0
        self.busy = BusyWindow()
        self.busy_s_total = 0.0  # seconds spent stepping since start (a GPU's utilisation over any window)
        self.seen_batch_classes: set[int] = set()  # batch classes that ran eagerly since the start
        self.step_count = 0
        self.last_progress = now
        self._ledger_bytes = 0.0
        # Optional hook called with (end time, cost) after every step (benchmarks record step history).
        self.step_observer: Callable[[float, StepCost], None] | None = None

    # ----- start-up -----------------------------------------------------------------------------

    def validate(self) -> None:
        """vLLM's argument checks that fail start-up."""
        check_engine_args(self.config, kv_cache_bytes=self.kv_cache_bytes, num_gpu_blocks=self.num_gpu_blocks,
                          kv_bytes_per_token_gpu=self.step_model.kv_bytes_per_token_gpu)

    def claim_gpus(self) -> None:
        """Reserve gpu_memory_utilization of every GPU, or fail like vLLM's worker does."""
        hw = self.preset.hardware
        if self.faults.cuda_oom_at_start:
            raise EngineStartError(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total "
                f"capacity of {hw.hbm_bytes / GIB:.2f} GiB of which 1.02 GiB is free."
            )
        try:
            self.ledger.claim(self.owner, self.config.gpus, self.footprint_bytes, hw.hbm_bytes)
            self._ledger_bytes = self.footprint_bytes
        except GpuMemoryError as exc:
            raise EngineStartError(
                f"ValueError: Free memory on device ({exc.free_bytes / GIB:.2f}/{exc.total_bytes / GIB:.2f} GiB) "
                f"on startup is less than desired GPU memory utilization "
                f"({self.config.gpu_memory_utilization}, {self.footprint_bytes / GIB:.2f} GiB). Decrease GPU "
                "memory utilization or reduce GPU memory used by other processes."
            ) from None

    def release_gpus(self) -> None:
        self.ledger.release(self.owner)
        self._ledger_bytes = 0.0

    def sync_ledger(self, now: float) -> None:
        """Tell the ledger what this engine holds now (after sleep, wake or fragmentation growth)."""
        if self.dead:
            return
        used = self.fb_used_bytes(now)
        if abs(used - self._ledger_bytes) > 1 * 1024**2:
            self.ledger.update(self.owner, used)
            self._ledger_bytes = used

    # ----- requests -----------------------------------------------------------------------------

    def sample_output_len(self) -> int:
        """Tokens until EOS for a request that does not ignore EOS (lognormal, seeded)."""
        p = self.preset
        return max(1, round(self.rng.lognormvariate(math.log(p.output_median), p.output_sigma)))

    def frontend_delay(self, prompt_tokens: int) -> float:
        """Tokenisation and API-server time before the request reaches the engine core."""
        return (self.preset.frontend_delay_s + prompt_tokens * 1e-6) * self.config.time_scale

    def add_request(self, req: SimRequest, now: float) -> None:
        """Queue a request that reached the engine core at `now`."""
        self.requests[req.request_id] = req
        req.queued_time = now
        self.scheduler.add(req)
        self.metrics.params_n.observe(1)
        self.metrics.params_max_tokens.observe(req.max_tokens)
        self.metrics.process.cpu_seconds += self.preset.cpu_per_request_s
        self._update_gauges()

    def abort_request(self, request_id: str, now: float) -> None:
        """Client went away: free the request and count it as aborted."""
        req = self.requests.get(request_id)
        if req is None or req.status is Status.FINISHED:
            return
        self._finish(req, now, "abort")

    def has_work(self) -> bool:
        return bool(self.scheduler.running or self.scheduler.waiting)

    @property
    def serving(self) -> bool:
        """Steps can run: alive, awake and not hung."""
        return not self.dead and self.sleep_level == 0 and not self.faults.hung

    # ----- steps --------------------------------------------------------------------------------

    def schedule(self, now: float) -> Step | None:
        """Form the next batch and its duration, or None when there is nothing to do."""
        if not self.serving or not self.has_work():
            return None
        batch = self.scheduler.schedule()
        self.metrics.preemptions += len(batch.preempted)
        if not batch.items:
            self._update_gauges()
            return None
        decode_ctx = 0
        decodes = 0
        chunks: list[tuple[int, int]] = []
        for req, n in batch.items:
            if req.num_computed >= req.num_prompt and n == 1:
                decodes += 1
                decode_ctx += req.num_computed
            else:
                chunks.append((n, req.num_computed))
        for req in batch.admitted:
            # vLLM's SCHEDULED event: only the first counts ("ignore preemptions" in
            # vllm/v1/metrics/stats.py; V0's maybe_set_first_scheduled_time), so queue, prefill and
            # inference intervals include any time spent preempted.
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
            if req.prefix_hit_tokens < 0:
                req.prefix_hit_tokens = req.num_computed
            self.metrics.record_prefix_lookup(req.num_tokens, req.num_computed, self.config.block_size)
        eager = not graph_covers(self.graph_sizes, v1=self.profile.v1, num_tokens=batch.num_tokens,
                                 num_requests=len(batch.items), decode_only=not chunks)
        cost = self.step_model.cost(decode_ctx, decodes, chunks, penalty=self.memory_growth_ratio(now),
                                    extra_s=self._cold_start_delay(len(batch.items)) if eager else 0.0)
        self._update_gauges()
        return Step(batch, cost, now)

    def _cold_start_delay(self, batch_size: int) -> float:
        """The seed's cold start, paid by a step no captured CUDA graph replays (`--enforce-eager`, -O0, a step
        above the largest capture size, V0 prefill): the first such step at each batch-size class (next power of
        two) after a start pays cold_start_penalty_s x (class/4)^0.83 (1.2 s at batch 4, 3.8 s at 16)."""
        if self.preset.cold_start_penalty_s <= 0:
            return 0.0
        cls = 1 << max(0, (batch_size - 1).bit_length())
        if cls in self.seen_batch_classes:
            return 0.0
        self.seen_batch_classes.add(cls)
        return self.preset.cold_start_penalty_s * (cls / 4) ** 0.83

    def complete(self, step: Step, now: float) -> None:
        """Apply a finished step at time `now` (its end): emit tokens, finish requests, record metrics."""
        self.step_count += 1
        self.busy.add(now, step.cost)
        self.busy_s_total += step.cost.duration_s
        if self.step_observer is not None:
            self.step_observer(now, step.cost)
        m = self.metrics
        m.iteration_tokens.observe(step.batch.num_tokens)
        m.process.cpu_seconds += 2e-4
        if self.dead:
            return
        for req, n in step.batch.items:
            if req.status is not Status.RUNNING:
                continue  # finished or aborted during the step
            req.num_computed += n
            self.kv.commit_full_blocks(req, req.num_computed)
            if req.num_computed < req.num_tokens:
                continue  # a prefill chunk that did not finish the prompt
            self._emit_token(req, now)
        self.last_progress = now
        self._update_gauges()

    def _emit_token(self, req: SimRequest, now: float) -> None:
        m = self.metrics
        first = req.output_count == 0
        req.output_count += 1
        m.generation_tokens += 1
        if first:
            req.first_token_time = now
            m.prompt_tokens += req.num_prompt
            cached = max(0, req.prefix_hit_tokens)
            m.prompt_tokens_cached += cached
            m.prompt_tokens_computed += req.num_prompt - cached
            m.ttft.observe(now - req.arrival_time)
        else:
            m.itl.observe(now - req.last_token_time)
        req.last_token_time = now
        reason: str | None = None
        if req.output_count >= req.max_tokens or req.num_tokens >= self.config.max_model_len:
            reason = "length"
        elif req.output_count >= req.target_output:
            reason = "stop"
        if reason is not None:
            self._finish(req, now, reason, new_tokens=1)
        elif req.listener is not None:
            req.listener(req, 1, now)

    def _finish(self, req: SimRequest, now: float, reason: str, error: str | None = None,
                new_tokens: int = 0) -> None:
        m = self.metrics
        self.scheduler.remove(req)
        self.requests.pop(req.request_id, None)
        req.finish_reason = reason
        req.error = error
        if reason in ("stop", "length", "abort", "error"):
            m.request_success[reason] += 1
        if reason in ("stop", "length"):
            self._observe_intervals(req, now)
            m.prompt_tokens_hist.observe(req.num_prompt)
            m.generation_tokens_hist.observe(req.output_count)
            m.max_num_generation_tokens.observe(req.output_count)
            m.prefill_kv_computed.observe(req.num_prompt - max(0, req.prefix_hit_tokens))
            m.num_preemptions_hist.observe(req.num_preemptions)
            if req.output_count > 1:
                m.request_tpot.observe((now - req.first_token_time) / (req.output_count - 1))
        if req.listener is not None:
            req.listener(req, new_tokens, now)
        self._update_gauges()

    def _observe_intervals(self, req: SimRequest, now: float) -> None:
        """e2e, queue, prefill, decode and inference as vLLM computes them for a finished request.

        V1 (vllm/v1/metrics/stats.py, update_from_finished_request): queued = first SCHEDULED -
        QUEUED (engine core), prefill = first token - first SCHEDULED, decode = last token - first
        token, inference = last token - first SCHEDULED, so prefill + decode = inference. V0
        (vllm/engine/llm_engine.py, _get_stats) measures the queue from the request's arrival.
        """
        m = self.metrics
        scheduled = req.first_scheduled_time if req.first_scheduled_time is not None else now
        queued_from = req.queued_time if self.profile.v1 else req.arrival_time
        last = req.last_token_time or now
        m.e2e.observe(now - req.arrival_time)
        m.queue.observe(max(0.0, scheduled - queued_from))
        m.prefill.observe(max(0.0, req.first_token_time - scheduled))
        m.decode.observe(max(0.0, last - req.first_token_time))
        m.inference.observe(max(0.0, last - scheduled))

    def _update_gauges(self) -> None:
        m = self.metrics
        m.running = len(self.scheduler.running)
        m.waiting = len(self.scheduler.waiting)
        m.kv_usage = self.kv.usage()

    # ----- admin and faults ---------------------------------------------------------------------

    def kill(self, now: float, reason: str) -> None:
        """The engine core dies: every in-flight request fails."""
        if self.dead:
            return
        self.dead = True
        self.death_reason = reason
        for req in list(self.requests.values()):
            self._finish(req, now, "error", error="EngineCore encountered an issue. See stack trace (above) "
                                                   "for the root cause.")
        self.release_gpus()

    def reset_prefix_cache(self) -> bool:
        return self.kv.reset_prefix_cache()

    def sleep(self, level: int, now: float) -> float:
        """Stop scheduling and drop KV (and weights at level 2); returns GiB freed."""
        if self.sleep_level:
            return 0.0
        self.scheduler.preempt_all()
        self.kv.reset_prefix_cache()
        self.sleep_level = max(1, level)
        self.metrics.sleep_level = self.sleep_level
        before = self._ledger_bytes
        self.sync_ledger(now)
        return max(0.0, before - self._ledger_bytes) / GIB

    def wake_up(self, now: float) -> None:
        """Resume; with sleep mode the allocator was emptied, so fragmentation is gone."""
        if not self.sleep_level:
            return
        self.sleep_level = 0
        self.metrics.sleep_level = 0
        if self.config.enable_sleep_mode:
            self.last_defrag = now
        self.sync_ledger(now)

    def memory_growth_ratio(self, now: float) -> float:
        """Memory held beyond the post-warm-up footprint, as a ratio of it (fragmentation)."""
        rate = self.faults.fragmentation_per_hour
        if rate <= 0 or self.dead:
            return 0.0
        return min(0.6, rate * max(0.0, now - self.last_defrag) / 3600.0)

    def fb_used_bytes(self, now: float) -> float:
        """Framebuffer this engine holds on each of its GPUs."""
        if self.dead:
            return 0.0
        if self.sleep_level and self.config.enable_sleep_mode:
            return 0.6 * GIB  # CUDA context only: weights offloaded (level 1) or dropped (2), KV discarded
        return self.footprint_bytes * (1.0 + self.memory_growth_ratio(now))

    def gpu_readings(self, now: float) -> list[GpuReading]:
        """What dcgm-exporter would report for this engine's GPUs."""
        hw = self.preset.hardware
        util, mem, comp = self.busy.ratios(now)
        if not self.serving:
            util = mem = comp = 0.0
        own = self.fb_used_bytes(now)
        out = []
        for gpu in self.config.gpus:
            others = max(0.0, self.ledger.used(gpu) - self._ledger_bytes)
            out.append(GpuReading(
                index=gpu, name=hw.name, uuid=gpu_uuid(gpu), total_bytes=hw.hbm_bytes,
                used_bytes=min(hw.hbm_bytes, own + others), gpu_util=util, dram_active=mem,
                tensor_active=comp, power_w=60.0 + (hw.power_max_w - 60.0) * util,
                temperature_c=32.0 + 40.0 * util, xid_last=self.xid_last, ecc_dbe_total=self.ecc_dbe,
            ))
        return out

    def inject_xid(self, code: int, now: float) -> bool:
        """Record an Xid; fatal classes kill the engine. Returns whether it was fatal."""
        self.xid_last = code
        if code == 48:
            self.ecc_dbe += 1
        self.ledger.record_xid(self.config.gpus, code)  # the driver's record outlives the engine
        if code in FATAL_XIDS:
            self.kill(now, f"xid {code}")
            return True
        return False

    def check_memory(self, now: float) -> bool:
        """Fragmentation past the GPU's capacity ends in a runtime CUDA OOM (engine death)."""
        if self.dead or not self.faults.fragmentation_per_hour:
            return False
        hw = self.preset.hardware
        if self.fb_used_bytes(now) > hw.hbm_bytes * 0.995:
            self.kill(now, "cuda oom")
            return True
        return False
