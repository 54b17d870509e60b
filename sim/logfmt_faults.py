"""Failure output: engine-death tracebacks, CUDA OOM, start-up failures (memory, KV cache too
small), NCCL watchdog timeouts, V0 preemption warnings and dev-mode request error stacks.

Also the text of torch.OutOfMemoryError (`torch_oom_message`) and PyTorch's size format.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.logfmt_lines import CORE, WORKER, LineFormatter

GIB = 1024**3
_SITE = "/usr/local/lib/python3.12/dist-packages/vllm"  # paths in printed tracebacks


def torch_format_size(num_bytes: float) -> str:
    """PyTorch's c10 format_size: bytes/KiB/MiB/GiB with two decimals."""
    if num_bytes <= 1024:
        return f"{int(num_bytes)} bytes"
    if num_bytes <= 1048576:
        return f"{num_bytes / 1024:.2f} KiB"
    if num_bytes <= 1073741824:
        return f"{num_bytes / 1048576:.2f} MiB"
    return f"{num_bytes / 1073741824:.2f} GiB"


def torch_oom_message(
    *,
    tried_gib: float,
    total_gib: float,
    free_gib: float,
    in_use_gib: float,
    allocated_gib: float,
    reserved_unallocated_gib: float,
    private_pools_gib: float = 0.0,
    gpu: int = 0,
) -> str:
    """The text of torch.OutOfMemoryError, ending with the fragmentation hint."""
    pools = (
        f", with {torch_format_size(private_pools_gib * GIB)} allocated in private pools (e.g., CUDA Graphs),"
        if private_pools_gib > 0
        else ","
    )
    return (
        "torch.OutOfMemoryError: CUDA out of memory. "
        f"Tried to allocate {torch_format_size(tried_gib * GIB)}. "
        f"GPU {gpu} has a total capacity of {torch_format_size(total_gib * GIB)} of which "
        f"{torch_format_size(free_gib * GIB)} is free. Including non-PyTorch memory, this process has "
        f"{torch_format_size(in_use_gib * GIB)} memory in use. Of the allocated memory "
        f"{torch_format_size(allocated_gib * GIB)} is allocated by PyTorch{pools} and "
        f"{torch_format_size(reserved_unallocated_gib * GIB)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )



# Where start-up raises each exception (vllm/v1/worker/gpu_worker.py, gpu_model_runner.py), so the
# traceback's last frames match the exception line that ends it.
_INIT_DEVICE_FRAMES = [("v1/worker/gpu_worker.py", 184, "init_device", "raise ValueError(")]
_LOAD_MODEL_FRAMES = [
    ("v1/engine/core.py", 83, "__init__", "self.model_executor = executor_class(vllm_config)"),
    ("executor/executor_base.py", 54, "__init__", "self._init_executor()"),
    ("executor/uniproc_executor.py", 55, "_init_executor", 'self.collective_rpc("load_model")'),
    ("v1/worker/gpu_worker.py", 211, "load_model", "self.model_runner.load_model()"),
    ("v1/worker/gpu_model_runner.py", 1790, "load_model", "self.model = model_loader.load_model("),
]


def _raising_frames(final: str) -> list[tuple[str, int, str, str]]:
    """The innermost frames for a start-up failure ending in `final`."""
    return _LOAD_MODEL_FRAMES if final.startswith("torch.OutOfMemoryError") else _INIT_DEVICE_FRAMES

class FaultLines(LineFormatter):
    """Failure and warning lines of one vLLM release; a mixin of `LogFormatter`."""

    def _core_traceback(
        self, now: float, tag: str, first: str, frames: list[tuple[str, int, str, str]], final: str
    ) -> list[str]:
        """An EngineCore logger.exception record: message, traceback frames, final exception line."""
        body = [first, "Traceback (most recent call last):"]
        for file, line, func, code in frames:
            body.append(f'  File "{_SITE}/{file}", line {line}, in {func}')
            body.append(f"    {code}")
        body.append(final)
        return self.emit(now, "\n".join(body), level="ERROR", where=CORE, tag=tag)

    def _dead_error_api(self, now: float) -> list[str]:
        body = "\n".join(
            [
                "AsyncLLM output_handler failed.",
                "Traceback (most recent call last):",
                f'  File "{_SITE}/v1/engine/async_llm.py", line 439, in output_handler',
                "    outputs = await engine_core.get_output_async()",
                f'  File "{_SITE}/v1/engine/core_client.py", line 846, in get_output_async',
                "    raise self._format_exception(outputs) from None",
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                "See stack trace (above) for the root cause.",
            ]
        )
        return self.emit(now, body, level="ERROR", tag="output_handler")

    def engine_death(
        self,
        now: float,
        *,
        cause: str | None = "RuntimeError: CUDA error: an illegal memory access was encountered",
        in_flight: Sequence[tuple[str, str, str]] = (),
        running: int = 0,
        waiting: int = 0,
        kv_usage: float = 0.0,
    ) -> list[str]:
        """The lines of an engine death, ending with the server shutting down.

        `in_flight` holds (client, method, path) of requests whose 500 these lines should include (a
        log made without an HTTP server); a live server writes each of its own as its handler answers,
        and none when nothing was in flight.

        `cause` is the exception line raised inside the engine (an exception traceback is printed);
        `cause=None` means the process vanished (SIGKILL, OOM killer, segfault): no traceback,
        only the client's monitor message where the release has one (0.8-0.12 `died unexpectedly`,
        nothing on 0.20, `[shutdown] MPClient: engine core exited unexpectedly` on 0.26+).
        V0 gets the MQLLMEngine sequence (`Engine loop has died`, `MQLLMEngine is already dead`).
        """
        p = self.profile
        out: list[str] = []
        if not p.v1:
            if cause is not None:
                out += self.emit(
                    now,
                    f"{cause.split(': ', 1)[-1]}\nTraceback (most recent call last):\n"
                    f'  File "{_SITE}/engine/multiprocessing/'
                    'engine.py", line 230, in run_engine_loop\n    request_outputs = self.engine_step()\n'
                    f"{cause}",
                    level="ERROR",
                    where=CORE,
                    tag="v0_error",
                )
            out += self.emit(
                now + 1.0,
                "\n".join(
                    [
                        "RuntimeError('Engine loop has died')",
                        "Traceback (most recent call last):",
                        f'  File "{_SITE}/engine/multiprocessing/client.py", line 150, in run_heartbeat_loop',
                        "    await self._check_success(",
                        f'  File "{_SITE}/engine/multiprocessing/client.py", line 314, in _check_success',
                        "    raise response",
                        "RuntimeError: Engine loop has died",
                    ]
                ),
                level="ERROR",
                tag="v0_client",
            )
            out += [line for request in in_flight for line in self.access(now + 1.0, *request, 500)]
            out += self.emit(
                now + 3.0,
                "MQLLMEngine is already dead, terminating server process",
                level="CRITICAL",
                tag="v0_launcher",
            )
            out += self.uvicorn("Shutting down")
            return out
        return self.engine_death_core(now, cause=cause, running=running, waiting=waiting, kv_usage=kv_usage) + \
            self.engine_death_client(now, cause=cause, in_flight=in_flight)

    def engine_death_core(
        self, now: float, *, cause: str | None, running: int = 0, waiting: int = 0, kv_usage: float = 0.0
    ) -> list[str]:
        """V1: what the EngineCore process writes as it dies of `cause` (nothing when it vanished)."""
        p = self.profile
        out: list[str] = []
        if cause is not None:
            if p.name != "0.8":
                out += self.emit(
                    now,
                    f"Dumping input data for V1 LLM engine (v{p.version}) with config: model='{self.model}'",
                    level="ERROR",
                    where=CORE,
                    tag="dump_cfg",
                )
                out += self.emit(
                    now,
                    f"Dumping scheduler stats: SchedulerStats(num_running_reqs={running}, "
                    f"num_waiting_reqs={waiting}, kv_cache_usage={kv_usage})",
                    level="ERROR",
                    where=CORE,
                    tag="dump_stats",
                )
            out += self._core_traceback(
                now,
                "core_fatal",
                "EngineCore encountered a fatal error.",
                [
                    ("v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
                    ("v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
                    (
                        "v1/engine/core.py",
                        754,
                        "_process_engine_step",
                        "outputs, model_executed = self.step_fn()",
                    ),
                    (
                        "v1/engine/core.py",
                        284,
                        "step",
                        "model_output = self.execute_model_with_error_logging(",
                    ),
                ],
                cause,
            )
        return out

    def engine_death_client(
        self,
        now: float,
        *,
        cause: str | None,
        in_flight: Sequence[tuple[str, str, str]] = (),
    ) -> list[str]:
        """V1: what the API server writes when its EngineCore died (`cause=None`: the process vanished).

        `in_flight`: (client, method, path) of requests whose 500 these lines include (see `engine_death`);
        a live API server writes none here: each in-flight handler's own access line is its 500.
        """
        p = self.profile
        out: list[str] = []
        if cause is None:
            name = self.core_proc_name
            if p.name in ("0.8", "0.10", "0.11", "0.12"):
                out += self.emit(
                    now,
                    f"Engine core proc {name} died unexpectedly, shutting down client.",
                    level="ERROR",
                    tag="monitor",
                )
            elif p.log_prefix == "v026":
                out += self.emit(
                    now,
                    "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
                    level="WARNING",
                    tag="monitor",
                )
        out += self._dead_error_api(now + 0.5)
        out += [line for request in in_flight for line in self.access(now + 0.5, *request, 500)]
        out += self.uvicorn("Shutting down")
        return out

    def cuda_oom_runtime(
        self,
        now: float,
        *,
        tried_gib: float,
        total_gib: float,
        free_gib: float,
        in_use_gib: float,
        allocated_gib: float,
        reserved_unallocated_gib: float,
        private_pools_gib: float = 0.0,
        in_flight: Sequence[tuple[str, str, str]] = (),
    ) -> list[str]:
        """A runtime CUDA OOM inside the engine, which then dies (see `engine_death`)."""
        cause = torch_oom_message(
            tried_gib=tried_gib,
            total_gib=total_gib,
            free_gib=free_gib,
            in_use_gib=in_use_gib,
            allocated_gib=allocated_gib,
            reserved_unallocated_gib=reserved_unallocated_gib,
            private_pools_gib=private_pools_gib,
        )
        return self.engine_death(now, cause=cause, in_flight=in_flight)

    def startup_failure(self, now: float, final: str) -> list[str]:
        """An engine that fails during init, and the API server giving up."""
        p = self.profile
        if not p.v1:
            return self.raw(
                "Traceback (most recent call last):\n"
                f'  File "{_SITE}/engine/multiprocessing/engine.py", '
                "line 366, in run_mp_engine\n    engine = MQLLMEngine.from_engine_args(\n" + final
            )
        out = self._core_traceback(
            now,
            "core_start_fail",
            "EngineCore failed to start.",
            [
                (
                    "v1/engine/core.py",
                    699,
                    "run_engine_core",
                    "engine_core = EngineCoreProc(*args, **kwargs)",
                ),
                (
                    "v1/engine/core.py",
                    498,
                    "__init__",
                    "super().__init__(vllm_config, executor_class, log_stats,",
                ),
                *_raising_frames(final),
            ],
            final,
        )
        failed = "RuntimeError: Engine core initialization failed. See root cause above."
        if p.log_prefix == "v026":
            failed += f" Failed core proc(s): {{'{self._core_name()}': 1}}"
        out += self.raw(
            "Traceback (most recent call last):\n"
            '  File "/usr/local/bin/vllm", line 10, in <module>\n    sys.exit(main())\n' + failed
        )
        return out

    def startup_oom(
        self, now: float, free_gib: float, total_gib: float, gmu: float, requested_gib: float
    ) -> list[str]:
        """Startup with too little free GPU memory for `gpu_memory_utilization`.

        0.9+ V1 checks up front (gpu_worker.py, values printed as round(x, 2); 0.26+ also names
        the device, `cuda:0`). 0.8 and V0 have no such check: the KV profile fails instead.
        """
        p = self.profile
        if not p.v1 or p.name == "0.8":
            final = (
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine."
            )
            return self.startup_failure(now, final)
        device = "cuda:0 " if p.log_prefix == "v026" else ""
        final = (
            f"ValueError: Free memory on device {device}({round(free_gib, 2)}/{round(total_gib, 2)} GiB) "
            "on startup "
            f"is less than desired GPU memory utilization ({gmu}, {round(requested_gib, 2)} GiB). "
            "Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )
        return self.startup_failure(now, final)

    def kv_cache_too_small(
        self, now: float, max_model_len: int, needed_gib: float, available_gib: float, estimated_max_len: int
    ) -> list[str]:
        """Startup where one max-length request's KV cache does not fit."""
        p = self.profile
        if not p.v1:
            tokens = int(available_gib / needed_gib * max_model_len) if needed_gib > 0 else 0
            final = (
                f"ValueError: The model's max seq len ({max_model_len}) is larger than the maximum number of "
                f"tokens that can be stored in KV cache ({tokens}). "
                "Try increasing `gpu_memory_utilization` or "
                "decreasing `max_model_len` when initializing the engine."
            )
            return self.startup_failure(now, final)
        owner = "models's" if p.name == "0.10" else "model's"
        final = (
            f"ValueError: To serve at least one request with the {owner} max seq len ({max_model_len}), "
            f"({needed_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available_gib:.2f} GiB). Based on the available memory, "
            f"the estimated maximum model length is {estimated_max_len}. "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
        return self.startup_failure(now, final)

    def nccl_timeout(
        self,
        now: float,
        *,
        rank: int = 0,
        seq: int = 158046,
        op: str = "ALLREDUCE",
        numel: int = 2867200,
        timeout_ms: int = 600000,
        ran_ms: int = 600027,
    ) -> list[str]:
        """PyTorch's ProcessGroupNCCL watchdog lines (C++ stderr: no vLLM header)."""
        del now
        where = WORKER if self.profile.v1 else CORE
        return self.raw(
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            f"Timeout(ms)={timeout_ms}) ran for {ran_ms} milliseconds before timing out.\n"
            f"[rank{rank}]:[E ProcessGroupNCCL.cpp:583] [Rank {rank}] To avoid data inconsistency, we are "
            "taking the entire process down.",
            where=where,
        )

    def preemption_warning_v0(
        self, now: float, request_id: str, total: int, *, mode: str = "RECOMPUTE"
    ) -> list[str]:
        """V0's preemption WARNING; printed only for the 1st, 51st, 101st... (else [], and [] on V1)."""
        if self.profile.v1 or total % 50 != 1:
            return []
        msg = (
            f"Sequence group {request_id} is preempted by PreemptionMode.{mode} mode because there is not "
            "enough KV cache space. This can affect the end-to-end performance. Increase "
            "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            f"total_num_cumulative_preemption={total}"
        )
        return self.emit(now, msg, level="WARNING", where=CORE, tag="preempt")

    def request_error(self, now: float, message: str, *, exc_type: str = "ValueError") -> list[str]:
        """The error stack a dev-mode server prints for a rejected request (e.g. prompt too long).

        Printed with traceback.print_exc when log_error_stack is on (VLLM_SERVER_DEV_MODE, 0.10.2+),
        so no vLLM header; [] before 0.10. The client's 400 is a separate `access` line.
        """
        del now
        if self.profile.name in ("0.6", "0.8"):
            return []
        return self.raw(
            "\n".join(
                [
                    "Traceback (most recent call last):",
                    f'  File "{_SITE}/entrypoints/openai/serving_engine.py", line 1017, in _validate_input',
                    f"    raise {exc_type}(",
                    f"{exc_type}: {message}",
                ]
            )
        )
