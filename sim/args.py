"""`doctor sim engine` arguments: the `vllm serve` flags the model uses, plus the sim's own flags."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from sim.compilation import parse_compilation_config
from sim.engine import EngineConfig
from sim.faults import FaultPlan, FaultSpecError, build_plan
from sim.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset
from sim.profiles import DEFAULT_PROFILE, PROFILE_NAMES, VersionProfile, get_profile


class EngineArgsError(ValueError):
    """Arguments that vLLM (or the sim) would refuse; the message is what it prints."""


@dataclass
class SimOptions:
    """Everything about an engine that is not an EngineConfig field."""

    host: str = "0.0.0.0"
    port: int = 8000
    profile: VersionProfile = field(default_factory=lambda: get_profile(DEFAULT_PROFILE))
    preset: Preset = field(default_factory=lambda: get_preset(DEFAULT_PRESET))
    faults: FaultPlan = field(default_factory=FaultPlan)
    log_file: Path | None = None
    dcgm_port: int | None = None
    gpu_ledger: Path | None = None
    fault_endpoint: bool = False
    dev_mode: bool = False
    keep_alive_on_death: bool = False
    stats_interval_s: float | None = None  # VLLM_LOG_STATS_INTERVAL (V1 0.10+)
    non_default_args: dict[str, object] = field(default_factory=dict)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise EngineArgsError(f"{self.prog}: error: {message}")


def build_parser(prog: str = "doctor sim engine") -> argparse.ArgumentParser:
    """The parser; `--help` lists every flag."""
    p = _Parser(prog=prog, description="A simulated vLLM engine: the same HTTP API, /metrics and logs as "
                "`vllm serve`, with latency from a model of continuous batching.",
                usage=f"{prog} [model_tag] [options]")
    p.add_argument("model_tag", nargs="?", help="model name or path, as for `vllm serve`")
    p.add_argument("--model", dest="model_flag", help="the model (older `api_server --model` style)")
    p.add_argument("--served-model-name", nargs="+", help="name(s) clients use; default: the model tag")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--max-num-seqs", type=int, help="cap on running sequences (default from the preset)")
    p.add_argument("--max-num-batched-tokens", type=int, help="per-step token budget (default from the preset)")
    p.add_argument("--max-model-len", type=int, help="context length (default: the model's)")
    p.add_argument("--gpu-memory-utilization", type=float, help="share of each GPU this engine reserves")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--kv-cache-dtype", default="auto",
                   choices=["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"])
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    p.add_argument("--enable-sleep-mode", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--compilation-config", "-O", dest="compilation_config", default=None,
                   help="an optimization level (-O0..-O3) or a JSON dict (level/mode, cudagraph_mode, "
                   "cudagraph_capture_sizes)")
    p.add_argument("--block-size", type=int, default=16, choices=[8, 16, 32, 64, 128])
    p.add_argument("--num-gpu-blocks-override", type=int)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="seed for every random draw of the model")
    sim = p.add_argument_group("simulator")
    sim.add_argument("--vllm-version", default=DEFAULT_PROFILE,
                     help=f"version profile to imitate: {', '.join(PROFILE_NAMES)} (default {DEFAULT_PROFILE})")
    sim.add_argument("--preset", default=DEFAULT_PRESET,
                     help=f"hardware + model preset: {', '.join(PRESETS)} (default {DEFAULT_PRESET})")
    sim.add_argument("--time-scale", type=float, default=1.0,
                     help="multiplies every modelled duration (0.5 = twice as fast as the modelled GPU)")
    sim.add_argument("--sim-startup-scale", type=float, default=1.0,
                     help="multiplies the modelled start-up (weights, profiling, compile, CUDA graphs) on top of "
                     "--time-scale; 0 serves at once (tests)")
    sim.add_argument("--log-file", type=Path, help="also append log lines to this file")
    sim.add_argument("--dcgm-port", type=int, help="serve dcgm-exporter style GPU metrics on this port")
    sim.add_argument("--gpu-ledger", type=Path,
                     help="file shared by sim engines on one simulated node (default under $TMPDIR)")
    sim.add_argument("--fault", action="append", default=[], metavar="KIND[@S][:ARG]",
                     help="inject a fault: engine-death, hang, cuda-oom-start, fragmentation, xid, slow-metrics")
    sim.add_argument("--sim-fault-endpoint", action="store_true",
                     help="serve POST /sim/fault to inject faults at run time")
    return p


def _non_default(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, object]:
    """vLLM's `non-default args` dict: engine flags whose value differs from the default."""
    out: dict[str, object] = {}
    for action in parser._actions:
        if action.dest in ("help", "model_flag", "model_tag"):
            continue
        value = getattr(ns, action.dest, None)
        if value != action.default:
            out[action.dest] = value
    return out


def _stats_interval(env: dict[str, str], profile: VersionProfile) -> float | None:
    """VLLM_LOG_STATS_INTERVAL as vLLM reads it (0.10+, V1): values <= 0 or unreadable fall back to 10 s."""
    raw = env.get("VLLM_LOG_STATS_INTERVAL")
    if raw is None or not profile.v1 or profile.name in ("0.8",):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def parse_engine_args(argv: list[str], env: dict[str, str] | None = None) -> tuple[EngineConfig, SimOptions]:
    """Resolve flags (and CUDA_VISIBLE_DEVICES, VLLM_SERVER_DEV_MODE) into a config."""
    env = dict(os.environ) if env is None else env
    parser = build_parser()
    ns = parser.parse_args(argv)
    model = ns.model_tag or ns.model_flag
    if not model:
        raise EngineArgsError(f"{parser.prog}: error: a model is required (positional model_tag or --model)")
    try:
        profile = get_profile(ns.vllm_version)
        preset = get_preset(ns.preset)
        faults = build_plan(ns.fault)
    except (ValueError, FaultSpecError) as exc:
        raise EngineArgsError(f"{parser.prog}: error: {exc}") from None
    if ns.time_scale <= 0:
        raise EngineArgsError(f"{parser.prog}: error: --time-scale must be > 0")
    if ns.sim_startup_scale < 0:
        raise EngineArgsError(f"{parser.prog}: error: --sim-startup-scale must be >= 0")
    try:
        compilation = parse_compilation_config(ns.compilation_config)
    except ValueError as exc:
        raise EngineArgsError(f"{parser.prog}: error: argument --compilation-config/-O: {exc}") from None
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "tensor_parallel_size"):
        value = getattr(ns, name)
        if value is not None and value < 1:
            raise EngineArgsError(f"{parser.prog}: error: --{name.replace('_', '-')} must be >= 1, got {value}")
    max_model_len = ns.max_model_len or preset.model.max_position
    if max_model_len > preset.model.max_position and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        raise EngineArgsError(
            f"ValueError: User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={preset.model.max_position} in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    tp = ns.tensor_parallel_size
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    try:
        gpus = tuple(int(g) for g in visible.split(",") if g.strip()) if visible else tuple(range(tp))
    except ValueError:
        raise EngineArgsError(f"CUDA_VISIBLE_DEVICES={visible!r} is not a list of GPU indices") from None
    if len(gpus) < tp:
        raise EngineArgsError(
            f"RuntimeError: tensor_parallel_size ({tp}) is larger than the number of visible GPUs ({len(gpus)})."
        )
    served = ns.served_model_name[0] if ns.served_model_name else model
    config = EngineConfig(
        model=model, served_model_name=served,
        max_num_seqs=ns.max_num_seqs or preset.default_max_num_seqs,
        max_num_batched_tokens=ns.max_num_batched_tokens or (
            preset.default_max_num_batched_tokens if ns.enable_chunked_prefill else max(
                max_model_len, preset.default_max_num_batched_tokens)),
        max_model_len=max_model_len,
        gpu_memory_utilization=ns.gpu_memory_utilization or profile.default_gpu_memory_utilization,
        tensor_parallel_size=tp, enable_chunked_prefill=ns.enable_chunked_prefill,
        enable_prefix_caching=ns.enable_prefix_caching, kv_cache_dtype=ns.kv_cache_dtype,
        quantization=ns.quantization, scheduling_policy=ns.scheduling_policy,
        enable_sleep_mode=ns.enable_sleep_mode, disable_log_stats=ns.disable_log_stats,
        block_size=ns.block_size, num_gpu_blocks_override=ns.num_gpu_blocks_override,
        long_prefill_token_threshold=ns.long_prefill_token_threshold, enforce_eager=ns.enforce_eager,
        gpus=gpus[:tp], seed=ns.seed, time_scale=ns.time_scale, startup_scale=ns.sim_startup_scale,
        **compilation,
    )
    options = SimOptions(
        host=ns.host, port=ns.port, profile=profile, preset=preset, faults=faults, log_file=ns.log_file,
        dcgm_port=ns.dcgm_port, gpu_ledger=ns.gpu_ledger, fault_endpoint=ns.sim_fault_endpoint,
        dev_mode=env.get("VLLM_SERVER_DEV_MODE") == "1",
        keep_alive_on_death=env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH") == "1",
        stats_interval_s=_stats_interval(env, profile),
        non_default_args={"model_tag": model, **{k: v for k, v in _non_default(ns, parser).items()
                                                 if k != "model_tag"}},
    )
    return config, options
