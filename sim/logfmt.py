"""Log lines in the exact format of each vLLM release (see reference section 2).

`LogFormatter` turns engine events into complete log lines (no trailing newline) for one
`VersionProfile`. It never reads the clock: every method takes the event time `now` (unix
seconds), rendered in UTC with `time.gmtime`, so the output is deterministic.

Line layout per `profile.log_prefix` (vllm/logger.py):

* ``v06``:  ``LEVEL MM-DD HH:MM:SS file.py:LINE] msg``
* ``v08``:  ``LEVEL MM-DD HH:MM:SS [file.py:LINE] msg``
* ``v010``: ``ESC[1;36m(ProcName pid=N)ESC[0;0m `` + the v08 layout (the stdout wrapper colours
  the process prefix unconditionally in 0.10.2); uvicorn and raw traceback lines get the prefix too.
* ``v026``: ``(ProcName pid=N) `` + the v08 layout, no colour.

Multi-line messages repeat the whole header on every line, as vLLM's NewLineFormatter does.
File:line tags are taken from real logs of the release where one was seen, else plausible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from http import HTTPStatus

from sim.profiles import VersionProfile

ANSI_START = "\x1b[1;36m"
ANSI_END = "\x1b[0;0m"

API = "api"  # the API server process (front end)
CORE = "core"  # the engine core process (V1) or MQLLMEngine process (V0)
WORKER = "worker"  # TP worker 0 (V1 with tensor_parallel_size > 1)

GIB = 1024**3
_SITE = "/usr/local/lib/python3.12/dist-packages/vllm"  # paths in printed tracebacks


def is_zero_interval(prompt_tps: float, gen_tps: float) -> bool:
    """True when an interval had no prompt and no generation throughput."""
    return prompt_tps == 0 and gen_tps == 0


def should_log_stats(prev_zero: bool, this_zero: bool) -> bool:
    """Whether the periodic stats line shows at INFO (vLLM's idle suppression).

    vLLM (V0 metrics.py and V1 loggers.py alike) logs the line at DEBUG when this interval's and
    the previous interval's prompt and generation throughputs are all zero, so an idle engine
    prints nothing at the default INFO level. Missing lines do not mean a dead engine. Pass
    `is_zero_interval(...)` of the previous and of this interval.
    """
    return not (prev_zero and this_zero)


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


@dataclass
class StartupInfo:
    """What `vllm serve` prints about itself at startup."""

    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    served_model_name: str | None = None
    host: str = "0.0.0.0"
    port: int = 8000
    max_model_len: int = 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    scheduling_policy: str = "fcfs"
    non_default_args: dict[str, object] = field(default_factory=dict)
    num_gpu_blocks: int = 26784
    block_size: int = 16
    kv_cache_tokens: int = 428544
    weights_gib: float = 14.99
    kv_cache_gib: float = 52.31
    load_seconds: float = 5.3
    init_seconds: float = 41.77
    dev_mode: bool = False
    routes: list[tuple[str, str]] = field(
        default_factory=lambda: [
            ("/openapi.json", "HEAD, GET"),
            ("/health", "GET"),
            ("/metrics", "GET"),
            ("/version", "GET"),
            ("/v1/models", "GET"),
            ("/v1/chat/completions", "POST"),
            ("/v1/completions", "POST"),
        ]
    )
    # Extras with realistic defaults.
    architecture: str = "LlamaForCausalLM"
    dtype: str = "torch.bfloat16"
    gpu_total_gib: float = 79.19
    num_cpu_blocks: int = 2048
    graph_seconds: float = 12.0
    graph_gib: float = 0.56
    compile_seconds: float | None = None  # 0.26+ appends "(compilation: X s)" when set

    @property
    def served_name(self) -> str:
        """The name clients use (served_model_name or the model path)."""
        return self.served_model_name or self.model


# --- file:line tags -------------------------------------------------------------------------------
# Keys are events; eras are profile names. Lines from real logs where seen (0.6.6, 0.8.5, 0.10.2,
# 0.11.0), else plausible.
_TAGS_BASE: dict[str, str] = {
    "version": "api_server.py:1882",
    "args": "utils.py:328",
    "tasks": "config.py:717",
    "arch": "__init__.py:745",
    "max_len": "__init__.py:1778",
    "chunked": "scheduler.py:222",
    "engine_cfg": "core.py:75",
    "weights": "default_loader.py:267",
    "model_loading": "gpu_model_runner.py:1975",
    "kv_avail": "gpu_worker.py:276",
    "kv_size": "kv_cache_utils.py:850",
    "kv_conc": "kv_cache_utils.py:854",
    "graph": "gpu_model_runner.py:2708",
    "init": "core.py:217",
    "cache_info": "loggers.py:142",
    "tasks_api": "api_server.py:1680",
    "dev_mode": "api_server.py:1402",
    "listen": "api_server.py:1957",
    "routes": "launcher.py:36",
    "route": "launcher.py:44",
    "stats": "loggers.py:123",
    "dump_cfg": "dump_input.py:69",
    "dump_stats": "dump_input.py:79",
    "core_fatal": "core.py:711",
    "core_start_fail": "core.py:708",
    "output_handler": "async_llm.py:416",
    "monitor": "core_client.py:560",
    "sleep_freed": "gpu_worker.py:105",
    "sleep_took": "executor_base.py:210",
    "wake_took": "executor_base.py:226",
    "started_engine": "api_server.py:247",
    "blocks": "executor_base.py:112",
    "blocks_conc": "executor_base.py:117",
    "mem_profile": "worker.py:294",
    "preempt": "scheduler.py:1772",
    "v0_error": "engine.py:160",
    "v0_client": "client.py:250",
    "v0_launcher": "launcher.py:116",
    "prefix_v0": "metrics.py:489",
}
_TAGS_ERA: dict[str, dict[str, str]] = {
    "0.6": {
        "version": "api_server.py:712",
        "args": "api_server.py:713",
        "started_engine": "api_server.py:199",
        "tasks": "config.py:510",
        "chunked": "config.py:1186",
        "engine_cfg": "llm_engine.py:234",
        "model_loading": "model_runner.py:1099",
        "mem_profile": "worker.py:241",
        "blocks": "distributed_gpu_executor.py:57",
        "blocks_conc": "distributed_gpu_executor.py:61",
        "graph": "model_runner.py:1497",
        "init": "llm_engine.py:431",
        "dev_mode": "api_server.py:569",
        "listen": "api_server.py:641",
        "routes": "launcher.py:19",
        "route": "launcher.py:27",
        "stats": "metrics.py:467",
        "prefix_v0": "metrics.py:483",
        "preempt": "scheduler.py:1560",
        "v0_error": "engine.py:135",
        "v0_client": "client.py:250",
        "v0_launcher": "launcher.py:99",
    },
    "0.10-v0": {
        "engine_cfg": "llm_engine.py:230",
        "model_loading": "model_runner.py:1203",
        "graph": "model_runner.py:1671",
        "init": "llm_engine.py:433",
        "stats": "metrics.py:489",
        "prefix_v0": "metrics.py:505",
    },
    "0.8": {
        "version": "api_server.py:1043",
        "args": "api_server.py:1044",
        "chunked": "config.py:2003",
        "engine_cfg": "core.py:58",
        "weights": "loader.py:458",
        "model_loading": "gpu_model_runner.py:1347",
        "kv_size": "kv_cache_utils.py:634",
        "kv_conc": "kv_cache_utils.py:637",
        "graph": "gpu_model_runner.py:1686",
        "init": "core.py:159",
        "ready": "core_client.py:439",
        "dev_mode": "api_server.py:975",
        "listen": "api_server.py:1090",
        "routes": "launcher.py:28",
        "route": "launcher.py:36",
        "stats": "loggers.py:111",
        "core_fatal": "core.py:387",
        "core_start_fail": "core.py:390",
        "output_handler": "async_llm.py:357",
        "monitor": "core_client.py:430",
        "sleep_freed": "gpu_worker.py:80",
        "sleep_took": "executor_base.py:208",
        "wake_took": "executor_base.py:224",
    },
    "0.11": {
        "version": "api_server.py:1839",
        "args": "utils.py:233",
        "arch": "model.py:547",
        "max_len": "model.py:1510",
        "chunked": "scheduler.py:205",
        "engine_cfg": "core.py:77",
        "model_loading": "gpu_model_runner.py:2653",
        "kv_avail": "gpu_worker.py:298",
        "kv_size": "kv_cache_utils.py:1087",
        "kv_conc": "kv_cache_utils.py:1091",
        "graph": "gpu_model_runner.py:3480",
        "init": "core.py:210",
        "tasks_api": "api_server.py:1634",
        "listen": "api_server.py:1950",
        "routes": "launcher.py:34",
        "route": "launcher.py:42",
        "core_fatal": "core.py:710",
        "core_start_fail": "core.py:708",
        "output_handler": "async_llm.py:480",
        "monitor": "core_client.py:564",
    },
    "0.12": {
        "version": "api_server.py:1772",
        "args": "utils.py:253",
        "arch": "model.py:637",
        "max_len": "model.py:1752",
        "chunked": "scheduler.py:216",
        "engine_cfg": "core.py:93",
        "model_loading": "gpu_model_runner.py:3549",
        "kv_avail": "gpu_worker.py:359",
        "kv_size": "kv_cache_utils.py:1286",
        "kv_conc": "kv_cache_utils.py:1291",
        "graph": "gpu_model_runner.py:4466",
        "init": "core.py:254",
        "tasks_api": "api_server.py:1646",
        "listen": "api_server.py:2007",
        "routes": "launcher.py:38",
        "route": "launcher.py:46",
        "stats": "loggers.py:236",
        "core_fatal": "core.py:844",
        "core_start_fail": "core.py:842",
        "output_handler": "async_llm.py:525",
        "monitor": "core_client.py:610",
        "sleep_freed": "gpu_worker.py:122",
        "sleep_took": "abstract.py:293",
        "wake_took": "abstract.py:318",
    },
    "0.20": {
        "version": "api_server.py:540",
        "args": "utils.py:297",
        "arch": "model.py:531",
        "max_len": "model.py:1788",
        "chunked": "vllm.py:754",
        "engine_cfg": "core.py:105",
        "weights": "default_loader.py:384",
        "model_loading": "gpu_model_runner.py:4570",
        "kv_avail": "gpu_worker.py:436",
        "kv_size": "kv_cache_utils.py:1314",
        "kv_conc": "kv_cache_utils.py:1319",
        "graph": "gpu_model_runner.py:5692",
        "init": "core.py:283",
        "tasks_api": "api_server.py:598",
        "dev_mode": "api_server.py:389",
        "listen": "api_server.py:602",
        "routes": "launcher.py:37",
        "route": "launcher.py:46",
        "stats": "loggers.py:283",
        "core_fatal": "core.py:1094",
        "core_start_fail": "core.py:1092",
        "output_handler": "async_llm.py:699",
        "sleep_freed": "gpu_worker.py:134",
        "sleep_took": "abstract.py:301",
        "wake_took": "abstract.py:326",
    },
    "0.26": {
        "version": "api_server.py:556",
        "args": "utils.py:301",
        "arch": "model.py:540",
        "max_len": "model.py:1810",
        "chunked": "vllm.py:771",
        "engine_cfg": "core.py:112",
        "weights": "default_loader.py:498",
        "model_loading": "gpu_model_runner.py:5187",
        "kv_avail": "gpu_worker.py:452",
        "kv_size": "kv_cache_utils.py:1879",
        "graph": "gpu_model_runner.py:5930",
        "init": "core.py:368",
        "tasks_api": "api_server.py:579",
        "dev_mode": "api_server.py:401",
        "listen": "api_server.py:583",
        "routes": "launcher.py:37",
        "route": "launcher.py:46",
        "stats": "loggers.py:283",
        "core_fatal": "core.py:1201",
        "core_start_fail": "core.py:1199",
        "output_handler": "async_llm.py:724",
        "monitor": "core_client.py:707",
        "sleep_freed": "gpu_worker.py:141",
        "sleep_took": "abstract.py:309",
        "wake_took": "abstract.py:334",
    },
}
_TAGS_ERA["0.32"] = _TAGS_ERA["0.26"]
_TAGS_ERA["0.33"] = _TAGS_ERA["0.26"]


@dataclass(frozen=True)
class _Proc:
    name: str | None  # None: no process prefix
    pid: int


class LogFormatter:
    """Formats sim events as the log lines of one vLLM release."""

    def __init__(self, profile: VersionProfile, *, api_pid: int, core_pid: int) -> None:
        self.profile = profile
        self.api_pid = api_pid
        self.core_pid = core_pid
        self.model = "model"  # set by startup(); used in later fault dumps
        self._tags = {**_TAGS_BASE, **_TAGS_ERA.get(profile.name, {})}
        prefixed = profile.log_prefix in ("v010", "v026")
        self._procs: dict[str, _Proc] = {
            API: _Proc("APIServer" if prefixed else None, api_pid),
            CORE: _Proc(self._core_name() if prefixed and profile.v1 else None, core_pid),
            WORKER: _Proc(self._worker_name() if prefixed and profile.v1 else None, core_pid + 1),
        }

    # --- naming ---------------------------------------------------------------------------------------
    def _core_name(self) -> str:
        """EngineCore_0 (0.10), EngineCore_DP0 (0.11-0.25), EngineCore (0.26+, one engine)."""
        if self.profile.name == "0.10":
            return "EngineCore_0"
        if self.profile.log_prefix == "v026":
            return "EngineCore"
        return "EngineCore_DP0"

    def _worker_name(self) -> str:
        return "VllmWorker TP0" if self.profile.name == "0.10" else "Worker_TP0"

    @property
    def core_proc_name(self) -> str:
        """The engine core's process name as vLLM's messages spell it."""
        return "EngineCore_0" if self.profile.name in ("0.8", "0.10") else "EngineCore_DP0"

    # --- low-level line building -----------------------------------------------------------------
    @staticmethod
    def timestamp(now: float) -> str:
        """`MM-DD HH:MM:SS` in UTC."""
        return time.strftime("%m-%d %H:%M:%S", time.gmtime(now))

    def _proc_prefix(self, where: str) -> str:
        proc = self._procs[where]
        if proc.name is None:
            return ""
        text = f"({proc.name} pid={proc.pid})"
        if self.profile.log_prefix == "v010":
            return f"{ANSI_START}{text}{ANSI_END} "
        return f"{text} "

    def _header(self, now: float, level: str, tag: str) -> str:
        ts = self.timestamp(now)
        if self.profile.log_prefix == "v06":
            return f"{level} {ts} {tag}]"
        return f"{level} {ts} [{tag}]"

    def emit(
        self, now: float, msg: str, *, level: str = "INFO", where: str = API, tag: str | None = None
    ) -> list[str]:
        """One vLLM logger record: every line of `msg` gets the full prefix.

        `where` is API, CORE or WORKER; `tag` is a key of the tag table or a literal `file.py:N`.
        """
        resolved = self._tags.get(tag or "", tag or "api_server.py:1")
        head = self._proc_prefix(where) + self._header(now, level, resolved)
        return [f"{head} {part}" for part in msg.split("\n")]

    def raw(self, text: str, *, where: str = API) -> list[str]:
        """Unformatted stdout/stderr text (uvicorn, print_exc, C++): only the process prefix."""
        prefix = self._proc_prefix(where)
        return [prefix + part for part in text.split("\n")]

    def uvicorn(self, msg: str) -> list[str]:
        """A uvicorn line: `INFO:     msg`, with the API server's prefix in 0.10+."""
        return self.raw(f"INFO:     {msg}", where=API)

    # --- startup ---------------------------------------------------------------------------------
    @staticmethod
    def startup_duration(cfg: StartupInfo) -> float:
        """Seconds from `now` (process start) to `Application startup complete.` in `startup()`."""
        return 5.0 + cfg.load_seconds + cfg.init_seconds + 1.0

    def _engine_config(self, cfg: StartupInfo) -> str:
        quant = cfg.quantization if cfg.quantization is not None else "None"
        parts = [
            f"model='{cfg.model}'",
            "speculative_config=None",
            f"tokenizer='{cfg.model}'",
            "skip_tokenizer_init=False",
            "tokenizer_mode=auto",
            "revision=None",
            "tokenizer_revision=None",
            "trust_remote_code=False",
            f"dtype={cfg.dtype}",
            f"max_seq_len={cfg.max_model_len}",
            "download_dir=None",
            "load_format=auto",
            f"tensor_parallel_size={cfg.tensor_parallel_size}",
            "pipeline_parallel_size=1",
            "disable_custom_all_reduce=False",
            f"quantization={quant}",
            "enforce_eager=False",
            f"kv_cache_dtype={cfg.kv_cache_dtype}",
            "device_config=cuda",
            "seed=0",
            f"served_model_name={cfg.served_name}",
        ]
        if not self.profile.v1:
            parts.append("num_scheduler_steps=1")
        parts += [
            f"enable_prefix_caching={cfg.enable_prefix_caching}",
            f"chunked_prefill_enabled={cfg.enable_chunked_prefill}",
            "use_async_output_proc=True",
            "pooler_config=None",
        ]
        return ", ".join(parts)

    def _namespace(self, cfg: StartupInfo) -> str:
        """`args: Namespace(...)` as printed up to 0.8 (subset of fields, real order)."""
        fields: dict[str, object] = {
            "subparser": "serve",
            "model_tag": cfg.model,
            "config": "",
            "host": None if cfg.host == "0.0.0.0" and "host" not in cfg.non_default_args else cfg.host,
            "port": cfg.port,
            "uvicorn_log_level": "info",
            "api_key": None,
            "lora_modules": None,
            "chat_template": None,
            "response_role": "assistant",
            "model": cfg.model,
            "task": "auto",
            "tokenizer": None,
            "trust_remote_code": False,
            "load_format": "auto",
            "dtype": "auto",
            "kv_cache_dtype": cfg.kv_cache_dtype,
            "max_model_len": None,
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "block_size": None,
            "enable_prefix_caching": None,
            "swap_space": 4,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "max_num_batched_tokens": None,
            "max_num_seqs": None,
            "disable_log_stats": False,
            "quantization": cfg.quantization,
            "enforce_eager": False,
            "served_model_name": None,
            "scheduling_policy": cfg.scheduling_policy,
            "enable_chunked_prefill": None,
            "disable_log_requests": False,
        }
        for key, value in cfg.non_default_args.items():
            fields[key] = value
        return "Namespace(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"

    def startup(self, now: float, cfg: StartupInfo) -> list[str]:
        """The startup sequence of `vllm serve` up to `Application startup complete.`.

        `now` is the process start; later lines are stamped at offsets derived from cfg
        (weights at +5 s + load_seconds, ready after init_seconds more; see `startup_duration`).
        """
        p = self.profile
        self.model = cfg.model
        out: list[str] = []
        t_engine = now + 3.0
        t_loaded = now + 5.0 + cfg.load_seconds
        t_kv = t_loaded + cfg.init_seconds * 0.4
        t_ready = t_loaded + cfg.init_seconds
        t_api = t_ready + 1.0
        v1_core = CORE
        load_where = WORKER if p.v1 and cfg.tensor_parallel_size > 1 else CORE
        one_line = p.kv_size_line == "v1_one_line"

        # Version line and CLI args (API server).
        if p.version_line == "server_version":
            out += self.emit(
                now, f"vLLM server version {p.version}, serving model {cfg.served_name}", tag="version"
            )
        else:
            out += self.emit(now, f"vLLM API server version {p.version}", tag="version")
        if p.name in ("0.6", "0.8"):
            out += self.emit(now, f"args: {self._namespace(cfg)}", tag="args")
        else:
            args = {"model_tag": cfg.model, **cfg.non_default_args}
            out += self.emit(now, f"non-default args: {args!r}", tag="args")
        if not p.v1:
            out += self.emit(
                now + 0.5, f"Started engine process with PID {self.core_pid}", tag="started_engine"
            )

        # Model config (API server, before the engine starts).
        if p.name in ("0.6", "0.8"):
            out += self.emit(
                now + 1.0,
                "This model supports multiple tasks: {'generate', 'embed', 'classify', 'score', 'reward'}. "
                "Defaulting to 'generate'.",
                tag="tasks",
            )
        else:
            out += self.emit(now + 1.0, f"Resolved architecture: {cfg.architecture}", tag="arch")
            out += self.emit(now + 1.0, f"Using max model len {cfg.max_model_len}", tag="max_len")
        if cfg.enable_chunked_prefill:
            out += self.emit(
                now + 1.2,
                f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.",
                tag="chunked",
            )

        # Engine init (engine core process in V1; MQLLMEngine process in V0).
        if p.v1:
            head = f"Initializing a V1 LLM engine (v{p.version}) with config: "
        elif p.name == "0.6":
            head = f"Initializing an LLM engine (v{p.version}) with config: "
        else:
            head = f"Initializing a V0 LLM engine (v{p.version}) with config: "
        out += self.emit(t_engine, head + self._engine_config(cfg), where=v1_core, tag="engine_cfg")

        # Weights.
        if p.name == "0.6":
            out += self.emit(
                t_loaded,
                f"Loading model weights took {cfg.weights_gib:.4f} GB",
                where=CORE,
                tag="model_loading",
            )
        else:
            out += self.emit(
                t_loaded,
                f"Loading weights took {cfg.load_seconds * 0.8:.2f} seconds",
                where=load_where,
                tag="weights",
            )
            if one_line:
                msg = (
                    f"Model loading took {cfg.weights_gib:.2f} GiB memory and {cfg.load_seconds:.6f} seconds"
                )
            else:
                msg = f"Model loading took {cfg.weights_gib:.4f} GiB and {cfg.load_seconds:.6f} seconds"
            out += self.emit(t_loaded, msg, where=load_where, tag="model_loading")

        # KV cache sizing.
        if p.v1:
            if p.name != "0.8":
                out += self.emit(
                    t_kv,
                    f"Available KV cache memory: {cfg.kv_cache_gib:.2f} GiB",
                    where=load_where,
                    tag="kv_avail",
                )
            conc = cfg.kv_cache_tokens / cfg.max_model_len
            size = f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens"
            conc_msg = f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x"
            if one_line:
                out += self.emit(t_kv, f"{size}, {conc_msg}", where=CORE, tag="kv_size")
            else:
                out += self.emit(t_kv, size, where=CORE, tag="kv_size")
                out += self.emit(t_kv, conc_msg, where=CORE, tag="kv_conc")
        else:
            total = cfg.gpu_total_gib
            usable = total * cfg.gpu_memory_utilization
            activation = max(usable - cfg.weights_gib - cfg.kv_cache_gib - 0.26, 0.0)
            out += self.emit(
                t_kv,
                "Memory profiling takes 4.29 seconds\n"
                f"the current vLLM instance can use total_gpu_memory ({total:.2f}GiB) x "
                f"gpu_memory_utilization ({cfg.gpu_memory_utilization:.2f}) = {usable:.2f}GiB\n"
                f"model weights take {cfg.weights_gib:.2f}GiB; non_torch_memory takes 0.26GiB; "
                f"PyTorch activation peak memory takes {activation:.2f}GiB; the rest of the memory reserved "
                f"for KV Cache is {cfg.kv_cache_gib:.2f}GiB.",
                where=CORE,
                tag="mem_profile",
            )
            kind = "GPU" if p.name == "0.6" else "cuda"
            out += self.emit(
                t_kv,
                f"# {kind} blocks: {cfg.num_gpu_blocks}, # CPU blocks: {cfg.num_cpu_blocks}",
                where=CORE,
                tag="blocks",
            )
            conc = cfg.num_gpu_blocks * cfg.block_size / cfg.max_model_len
            out += self.emit(
                t_kv,
                f"Maximum concurrency for {cfg.max_model_len} tokens per request: {conc:.2f}x",
                where=CORE,
                tag="blocks_conc",
            )

        # CUDA graphs and total init time.
        out += self.emit(
            t_ready - 0.5,
            f"Graph capturing finished in {cfg.graph_seconds:.0f} secs, took {cfg.graph_gib:.2f} GiB",
            where=load_where,
            tag="graph",
        )
        init_msg = "init engine (profile, create kv cache, warmup model) took "
        if one_line:
            init_msg += f"{cfg.init_seconds:.2f} s"
            if cfg.compile_seconds is not None:
                init_msg += f" (compilation: {cfg.compile_seconds:.2f} s)"
        else:
            init_msg += f"{cfg.init_seconds:.2f} seconds"
        out += self.emit(t_ready, init_msg, where=CORE, tag="init")
        if p.name == "0.8":
            out += self.emit(t_ready, "Core engine process 0 ready.", tag="ready")
        if p.name in ("0.10", "0.11"):
            out += self.emit(
                t_ready + 0.5,
                f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
                f"{cfg.kv_cache_tokens // cfg.block_size}",
                tag="cache_info",
            )
        if p.v1 and p.name != "0.8":
            word = "Supported_tasks" if p.name in ("0.10", "0.11") else "Supported tasks"
            out += self.emit(t_api, f"{word}: ['generate']", tag="tasks_api")

        # HTTP server.
        if cfg.dev_mode:
            out += self.emit(
                t_api,
                "SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!",
                level="WARNING",
                tag="dev_mode",
            )
        url = f"http://{cfg.host}:{cfg.port}"
        if p.listen_line == "v015":
            listen = f"Starting vLLM API server 0 on {url}"
        elif p.listen_line == "v020":
            listen = f"Starting vLLM server on {url}"
        else:
            listen = f"Starting vLLM API server on {url}"
        out += self.emit(t_api, listen, tag="listen")
        out += self.emit(t_api, "Available routes are:", tag="routes")
        for path, methods in cfg.routes:
            out += self.emit(t_api, f"Route: {path}, Methods: {methods}", tag="route")
        out += self.uvicorn(f"Started server process [{self.api_pid}]")
        out += self.uvicorn("Waiting for application startup.")
        out += self.uvicorn("Application startup complete.")
        return out

    # --- periodic stats --------------------------------------------------------------------------
    def stats(
        self,
        now: float,
        *,
        prompt_tps: float,
        gen_tps: float,
        running: int,
        waiting: int,
        kv_usage: float,
        prefix_hit_rate: float | None,
        preemptions_in_interval: int,
        swapped: int = 0,
        cpu_kv_usage: float = 0.0,
        deferred: int = 0,
        device: str = "GPU",
    ) -> list[str]:
        """The periodic stats line(s) in this release's format (always at INFO).

        Use `should_log_stats` to decide whether it shows at all. Ratios are 0..1. On 0.20+
        `waiting` should already include deferred requests, as vLLM counts them.
        """
        p = self.profile
        if p.stats_line == "v0":
            msg = (
                f"Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: {gen_tps:.1f} "
                f"tokens/s, Running: {running} reqs, Swapped: {swapped} reqs, Pending: {waiting} reqs, "
                "GPU KV "
                f"cache usage: {kv_usage * 100:.1f}%, CPU KV cache usage: {cpu_kv_usage * 100:.1f}%."
            )
            out = self.emit(now, msg, where=CORE, tag="stats")
            if prefix_hit_rate is not None:
                out += self.emit(
                    now,
                    f"Prefix cache hit rate: GPU: {prefix_hit_rate * 100:.2f}%, CPU: 0.00%",
                    where=CORE,
                    tag="prefix_v0",
                )
            return out
        head = (
            f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
            f"Avg generation throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, "
            f"Waiting: {waiting} reqs"
        )
        if p.stats_line == "v1_fixed":
            hit = (prefix_hit_rate or 0.0) * 100
            msg = f"{head}, GPU KV cache usage: {kv_usage * 100:.1f}%, Prefix cache hit rate: {hit:.1f}%"
            return self.emit(now, msg, tag="stats")
        parts = [head]
        if p.waiting_by_reason and deferred > 0:  # 0.20+
            parts.append(f"Deferred: {deferred} reqs")
        if preemptions_in_interval > 0:
            parts.append(f"Preemptions: {preemptions_in_interval}")
        word = device if p.kv_size_line == "v1_one_line" else "GPU"
        parts.append(f"{word} KV cache usage: {kv_usage * 100:.1f}%")
        if prefix_hit_rate is not None or not p.prefix_hit_only_with_queries:
            parts.append(f"Prefix cache hit rate: {(prefix_hit_rate or 0.0) * 100:.1f}%")
        return self.emit(now, ", ".join(parts), tag="stats")

    # --- HTTP access log --------------------------------------------------------------------------
    def access(self, now: float, client: str, method: str, path: str, status: int) -> list[str]:
        """A uvicorn access line; `client` is `host:port`. `now` is unused (uvicorn prints no time)."""
        del now
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:  # uvicorn prints no phrase for codes it does not know (e.g. 499)
            phrase = ""
        return self.uvicorn(f'{client} - "{method} {path} HTTP/1.1" {status} {phrase}')

    # --- faults ----------------------------------------------------------------------------------
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
        client: str = "127.0.0.1:51234",
        method: str = "POST",
        path: str = "/v1/chat/completions",
        running: int = 0,
        waiting: int = 0,
        kv_usage: float = 0.0,
    ) -> list[str]:
        """The lines of an engine death, ending with a 500 and the server shutting down.

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
            out += self.access(now, client, method, path, 500)
            out += self.emit(
                now + 3.0,
                "MQLLMEngine is already dead, terminating server process",
                level="CRITICAL",
                tag="v0_launcher",
            )
            out += self.uvicorn("Shutting down")
            return out
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
        else:
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
        out += self.access(now, client, method, path, 500)
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
        client: str = "127.0.0.1:51234",
        path: str = "/v1/chat/completions",
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
        return self.engine_death(now, cause=cause, client=client, path=path)

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
                ("v1/worker/gpu_worker.py", 184, "init_device", "raise ValueError("),
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

    def sleep(
        self, now: float, level: int, freed_gib: float, *, still_in_use_gib: float = 1.5, seconds: float = 2.5
    ) -> list[str]:
        """Sleep mode (POST /sleep): worker's freed line then executor's timing. [] on 0.6 (none).

        `level` does not change the text (it only decides what is offloaded).
        """
        del level
        if self.profile.name == "0.6":
            return []
        out = self.emit(
            now,
            f"Sleep mode freed {freed_gib:.2f} GiB memory, {still_in_use_gib:.2f} GiB memory "
            "is still in use.",
            where=CORE,
            tag="sleep_freed",
        )
        out += self.emit(now, f"It took {seconds:.6f} seconds to fall asleep.", where=CORE, tag="sleep_took")
        return out

    def wake_up(self, now: float, *, seconds: float = 1.2, tags: list[str] | None = None) -> list[str]:
        """Wake up (POST /wake_up); `tags=None` prints the default sleeping tags. [] on 0.6."""
        if self.profile.name == "0.6":
            return []
        shown = repr(tags) if tags is not None else "{'weights', 'kv_cache'}"
        return self.emit(
            now, f"It took {seconds:.6f} seconds to wake up tags {shown}.", where=CORE, tag="wake_took"
        )

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
