"""An engine with its logs and faults: what both drivers (HTTP real time, in-process virtual time) run.

`EngineRuntime` owns the periodic work that is not a step: the stats log line every 10 s (5 s on
V0) with vLLM's idle suppression, timed faults, and memory bookkeeping. It writes log lines to a
sink and never reads a clock.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sim.engine import EngineCore, EngineStartError
from sim.faults import TimedFault
from sim.gpu import GIB
from sim.logfmt import LogFormatter, StartupInfo, is_zero_interval, should_log_stats, torch_oom_message

LogSink = Callable[[list[str]], None]

BASE_ROUTES: list[tuple[str, str]] = [
    ("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/health", "GET"), ("/load", "GET"),
    ("/ping", "POST"), ("/ping", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
    ("/v1/models", "GET"), ("/version", "GET"), ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"), ("/metrics", "GET"),
]
DEV_ROUTES: list[tuple[str, str]] = [
    ("/server_info", "GET"), ("/reset_prefix_cache", "POST"), ("/sleep", "POST"), ("/wake_up", "POST"),
    ("/is_sleeping", "GET"),
]
PAUSE_ROUTES: list[tuple[str, str]] = [("/pause", "POST"), ("/resume", "POST"), ("/is_paused", "GET")]


class EngineRuntime:
    """EngineCore + LogFormatter + faults + periodic stats."""

    def __init__(self, core: EngineCore, sink: LogSink, *, host: str = "0.0.0.0", port: int = 8000,
                 dev_mode: bool = False, non_default_args: dict[str, object] | None = None,
                 api_pid: int | None = None, stats_interval_s: float | None = None,
                 core_pid: int | None = None, core_process: bool = False) -> None:
        self.core = core
        self.sink = sink
        self.host = host
        self.port = port
        self.dev_mode = dev_mode
        self.non_default_args = non_default_args or {}
        pid = api_pid if api_pid is not None else os.getpid()
        # core_pid: the EngineCore process's pid, or the API server's when the engine runs in it (the harness's
        # made-up pids default to the next one).
        self.fmt = LogFormatter(core.profile, api_pid=pid, core_pid=core_pid if core_pid is not None else pid + 1)
        self.core_process = core_process  # the API server writes its own half of a death
        self.started_at = core.ready_at  # serving from here: faults and stats count from it
        self.stats_interval_s = stats_interval_s or core.profile.stats_interval_s
        self.next_stats = core.ready_at + self.stats_interval_s
        self._last_prompt = 0
        self._last_gen = 0
        self._last_preemptions = 0
        self._prev_zero = True
        self.paused = False

    # ----- start-up -----------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str]]:
        routes = list(BASE_ROUTES)
        if self.dev_mode:
            routes += [r for r in DEV_ROUTES if r[0] != "/server_info" or self.core.profile.name != "0.6"]
        if self.core.profile.pause_endpoints:
            routes += PAUSE_ROUTES
        return routes

    def startup_info(self) -> StartupInfo:
        core, c, p, plan = self.core, self.core.config, self.core.preset, self.core.startup
        return StartupInfo(
            model=c.model, served_model_name=c.served_model_name if c.served_model_name != c.model else None,
            host=self.host, port=self.port, max_model_len=c.max_model_len, max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=c.max_num_batched_tokens, gpu_memory_utilization=c.gpu_memory_utilization,
            tensor_parallel_size=c.tensor_parallel_size, enable_prefix_caching=c.enable_prefix_caching,
            enable_chunked_prefill=c.enable_chunked_prefill, kv_cache_dtype=c.kv_cache_dtype,
            quantization=c.quantization, scheduling_policy=c.scheduling_policy,
            non_default_args=self.non_default_args, num_gpu_blocks=core.num_gpu_blocks,
            block_size=c.block_size, kv_cache_tokens=core.num_gpu_blocks * c.block_size,
            weights_gib=core.step_model.weight_bytes_per_gpu / GIB, kv_cache_gib=core.kv_cache_bytes / GIB,
            api_seconds=plan.api_s, load_seconds=plan.weights_s, profile_seconds=plan.profile_s,
            kv_seconds=plan.kv_s, serve_seconds=plan.serve_s, compile_seconds=plan.compile_s or None,
            graph_seconds=plan.graphs_s if plan.graph_sizes else None, enforce_eager=c.enforce_eager,
            graph_sizes=plan.graph_sizes, compilation_level=c.compilation_level,
            dev_mode=self.dev_mode,
            routes=self.routes(), architecture=p.model.architecture,
            gpu_total_gib=p.hardware.hbm_bytes / GIB * 0.99,
        )

    def start(self, now: float) -> list[tuple[float, list[str]]]:
        """Validate and take the GPUs at process start (`now`); EngineStartError carries the failure lines, which
        go to the sink at once. Returns the start-up lines as (time, lines) from the process start to the server
        listening (core.ready_at), for the driver to write as each time comes."""
        try:
            self.core.validate()
            self.core.claim_gpus()
        except EngineStartError as exc:
            c, hw = self.core.config, self.core.preset.hardware
            text = str(exc)
            if text.startswith("ValueError: Free memory on device"):
                used = self.core.ledger.used(c.gpus[0])
                lines = self.fmt.startup_oom(now, (hw.hbm_bytes - used) / GIB, hw.hbm_bytes / GIB,
                                             c.gpu_memory_utilization, self.core.footprint_bytes / GIB)
            else:
                lines = self.fmt.startup_failure(now, text)
            self.sink(lines)
            raise EngineStartError(text, lines) from None
        return self.fmt.startup_timed(self.core.started_at, self.startup_info())

    # ----- periodic work ------------------------------------------------------------------------

    def next_deadline(self) -> float:
        """When `tick` next has something to do."""
        nxt = self.next_stats
        fault_at = self.core.faults.next_at()
        if fault_at is not None:
            nxt = min(nxt, self.started_at + fault_at)
        return nxt

    def tick(self, now: float) -> None:
        """Fire due faults and the stats line; keep the GPU ledger current."""
        for fault in self.core.faults.due(now - self.started_at):
            self.apply_fault(fault, now)
        if self.core.check_memory(now):
            self._log_oom_death(now)
        while now >= self.next_stats:
            self._log_stats(self.next_stats)
            self.next_stats += self.stats_interval_s
            self.core.sync_ledger(now)

    def _log_stats(self, now: float) -> None:
        core, m = self.core, self.core.metrics
        if core.config.disable_log_stats or core.dead:
            return
        interval = self.stats_interval_s
        prompt_count = m.prompt_tokens_computed if core.profile.prompt_tokens_cached else m.prompt_tokens
        prompt_tps = (prompt_count - self._last_prompt) / interval
        gen_tps = (m.generation_tokens - self._last_gen) / interval
        preemptions = m.preemptions - self._last_preemptions
        self._last_prompt, self._last_gen, self._last_preemptions = prompt_count, m.generation_tokens, m.preemptions
        zero = is_zero_interval(prompt_tps, gen_tps)
        show = should_log_stats(self._prev_zero, zero)
        self._prev_zero = zero
        if not show:
            return
        hit_rate: float | None = m.prefix_hit_rate_recent() if core.config.enable_prefix_caching else None
        if core.profile.prefix_hit_only_with_queries and not m.recent_prefix:
            hit_rate = None
        device = "CPU" if core.preset.hardware.name == "cpu" else "GPU"
        self.sink(self.fmt.stats(now, prompt_tps=prompt_tps, gen_tps=gen_tps, running=m.running,
                                 waiting=m.waiting, kv_usage=m.kv_usage, prefix_hit_rate=hit_rate,
                                 preemptions_in_interval=preemptions, device=device))

    # ----- faults and admin ---------------------------------------------------------------------

    def apply_fault(self, fault: TimedFault, now: float) -> None:
        """Make a fault happen now."""
        core = self.core
        if fault.kind == "engine-death":
            self.kill(now, "RuntimeError: CUDA error: an illegal memory access was encountered")
        elif fault.kind == "hang":
            core.faults.hung = True
        elif fault.kind == "fragmentation":
            core.faults.fragmentation_per_hour = fault.arg
            core.last_defrag = now
        elif fault.kind == "slow-metrics":
            core.faults.slow_metrics_s = fault.arg
        elif fault.kind == "xid":
            running, waiting, kv = core.metrics.running, core.metrics.waiting, core.metrics.kv_usage
            if core.inject_xid(int(fault.arg), now):
                self.sink(self._death_lines(now, "RuntimeError: CUDA error: unspecified launch failure",
                                            running, waiting, kv))
        elif fault.kind == "cuda-oom-start":
            core.faults.cuda_oom_at_start = True

    def kill(self, now: float, cause: str | None) -> None:
        """Engine-core death with its log lines."""
        core = self.core
        if core.dead:
            return
        running, waiting, kv = core.metrics.running, core.metrics.waiting, core.metrics.kv_usage
        core.kill(now, cause or "killed")
        self.sink(self._death_lines(now, cause, running, waiting, kv))

    def _death_lines(self, now: float, cause: str | None, running: int, waiting: int, kv: float) -> list[str]:
        if self.core_process:
            return self.fmt.engine_death_core(now, cause=cause, running=running, waiting=waiting, kv_usage=kv)
        return self.fmt.engine_death(now, cause=cause, running=running, waiting=waiting, kv_usage=kv)

    def _log_oom_death(self, now: float) -> None:
        core = self.core
        hw = core.preset.hardware
        total = hw.hbm_bytes / GIB
        growth = core.footprint_bytes * 0.6 / GIB
        sizes: dict[str, Any] = {"tried_gib": 1.16, "total_gib": total * 0.99, "free_gib": 0.6,
                                 "in_use_gib": total * 0.98, "allocated_gib": core.footprint_bytes / GIB * 0.9,
                                 "reserved_unallocated_gib": growth}
        if self.core_process:  # the API server writes its own half (sim.core_mp)
            self.sink(self.fmt.engine_death_core(now, cause=torch_oom_message(**sizes)))
        else:
            self.sink(self.fmt.cuda_oom_runtime(now, **sizes))

    def sleep(self, level: int, now: float) -> float:
        freed = self.core.sleep(level, now)
        self.sink(self.fmt.sleep(now, level, freed, still_in_use_gib=self.core.fb_used_bytes(now) / GIB))
        return freed

    def wake_up(self, now: float) -> None:
        self.core.wake_up(now)
        self.sink(self.fmt.wake_up(now))

    def access(self, now: float, client: str, method: str, path: str, status: int) -> None:
        self.sink(self.fmt.access(now, client, method, path, status))
