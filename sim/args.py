"""`doctor sim engine` arguments: the `vllm serve` flags the model uses, plus the sim's own flags."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.compilation import parse_compilation_config
from sim.engine import EngineConfig
from sim.faults import FaultPlan, FaultSpecError, build_plan
from sim.presets import DEFAULT_PRESET, PRESETS, Preset, get_preset
from sim.profiles import DEFAULT_PROFILE, PROFILE_NAMES, PROFILES, VersionProfile, get_profile
from sim.vllm_flags import BoolAction, Flag, add_flag, normalize_argv, release_flags, str_bool


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
    log_requests: bool = False  # vLLM's request log lines ("Received request ...", "Added request ...")
    access_log_excluded: frozenset[str] | None = frozenset()  # paths without access lines; None: all
    ignored_flags: list[str] = field(default_factory=list)  # set, accepted, not modelled


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise EngineArgsError(f"{self.prog}: error: {message}")


# The vLLM flags the sim models, by dest, with the sim's own parsing (defaults resolved from the preset).
_MODELLED: dict[str, dict[str, Any]] = {
    "model": {"dest": "model_flag", "help": "the model (older `api_server --model` style)"},
    "served_model_name": {"nargs": "+", "help": "name(s) clients use; default: the model tag"},
    "host": {"default": "0.0.0.0"},
    "port": {"type": int, "default": 8000, "help": "0 picks a free port"},
    "max_num_seqs": {"type": int, "help": "cap on running sequences (default from the preset)"},
    "max_num_batched_tokens": {"type": int, "help": "per-step token budget (default from the preset)"},
    "max_model_len": {"type": int, "help": "context length (default: the model's)"},
    "gpu_memory_utilization": {"type": float, "help": "share of each GPU this engine reserves"},
    "tensor_parallel_size": {"type": int, "default": 1},
    "enable_chunked_prefill": {"bool": True, "default": True},
    "enable_prefix_caching": {"bool": True, "default": True},
    "kv_cache_dtype": {"default": "auto", "choices": ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3",
                                                      "fp8_e5m2"]},
    "quantization": {"default": None},
    "scheduling_policy": {"default": "fcfs", "choices": ["fcfs", "priority"]},
    "enable_sleep_mode": {"action": "store_true"},
    "disable_log_stats": {"action": "store_true"},
    "enforce_eager": {"bool": True, "default": False},
    # -O / --compilation-config (0.6-0.11), --compilation-config / -cc (0.12+): sim.compilation reads it.
    "compilation_config": {"default": None, "help": "an optimization level (-O0..-O3 up to 0.11) or a JSON dict "
                           "(level/mode, cudagraph_mode, cudagraph_capture_sizes)"},
    "block_size": {"type": int, "default": 16, "choices": [8, 16, 32, 64, 128]},
    "num_gpu_blocks_override": {"type": int},
    "long_prefill_token_threshold": {"type": int, "default": 0},
    "seed": {"type": int, "default": 0, "help": "seed for every random draw of the model"},
}
# Flags whose effect shows outside and that the sim reproduces (request log lines, access-log filters).
_REPRODUCED = frozenset({"enable_log_requests", "disable_log_requests", "disable_access_log_for_endpoints",
                         "disable_uvicorn_access_log"})
_IGNORED_GROUP = "other vLLM flags (accepted; the sim does not model them)"


def _add_modelled(group: argparse._ActionsContainer, flag: Flag, spec: dict[str, Any]) -> None:
    kw = {k: v for k, v in spec.items() if k != "bool"}
    kw.setdefault("dest", flag.dest)
    if "choices" in kw:  # the release's own choices (they differ across releases)
        conv = kw.get("type", str)
        kw["choices"] = [conv(c) for c in flag.choices if c != "None"] if flag.choices else None
    if spec.get("bool"):
        if flag.kind in ("true", "bool"):
            group.add_argument(*flag.options, action=BoolAction, false_options=flag.false_options, **kw)
        else:  # 0.6's StoreBoolean (`--enable-prefix-caching true`)
            group.add_argument(*flag.options, type=str_bool, nargs="?", const=True, **kw)
    elif flag.kind == "true" and "action" not in kw:
        group.add_argument(*flag.options, action="store_true", **kw)
    else:
        group.add_argument(*flag.options, **kw)


def build_parser(prog: str = "doctor sim engine", version: str = DEFAULT_PROFILE) -> argparse.ArgumentParser:
    """The parser for one profile: every `vllm serve` flag of its release, then the sim's own flags."""
    p = _Parser(prog=prog, description="A simulated vLLM engine: the same HTTP API, /metrics and logs as "
                "`vllm serve`, with latency from a model of continuous batching.",
                usage=f"{prog} [model_tag] [options]")
    p.add_argument("model_tag", nargs="?", help="model name or path, as for `vllm serve`")
    ignored = p.add_argument_group(_IGNORED_GROUP)
    for flag in release_flags(version):
        if flag.dest in _MODELLED:
            _add_modelled(p, flag, _MODELLED[flag.dest])
        else:
            add_flag(p if flag.dest in _REPRODUCED else ignored, flag)
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
    """vLLM's `non-default args` dict: its own flags whose value differs from the default (no sim flags)."""
    out: dict[str, object] = {}
    sim_only = {a.dest for g in parser._action_groups if g.title == "simulator" for a in g._group_actions}
    for action in parser._actions:
        if action.dest in ("help", "model_flag", "model_tag") or action.dest in sim_only:
            continue
        value = getattr(ns, action.dest, None)
        if value != action.default:
            out[action.dest] = value
    return out


def _log_requests(ns: argparse.Namespace) -> bool:
    """0.10+: --enable-log-requests (off by default); 0.6 and 0.8 log unless --disable-log-requests."""
    if hasattr(ns, "enable_log_requests"):
        return bool(ns.enable_log_requests)  # 0.10-0.12's deprecated --disable-log-requests changes nothing here
    return not getattr(ns, "disable_log_requests", False)


def _access_log_excluded(ns: argparse.Namespace) -> frozenset[str] | None:
    """--disable-uvicorn-access-log (all) and --disable-access-log-for-endpoints (0.20+, comma-separated)."""
    if getattr(ns, "disable_uvicorn_access_log", False):
        return None
    paths = getattr(ns, "disable_access_log_for_endpoints", None) or ""
    return frozenset(p.strip() for p in paths.split(",") if p.strip())


def _ignored(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The flags given (value off their default) that the sim accepts without modelling."""
    group = next(g for g in parser._action_groups if g.title == _IGNORED_GROUP)
    return [a.option_strings[0] for a in group._group_actions if getattr(ns, a.dest, a.default) != a.default]


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
    argv = normalize_argv(argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--vllm-version", default=DEFAULT_PROFILE)
    version = pre.parse_known_args(argv)[0].vllm_version
    parser = build_parser(version=version if version in PROFILES else DEFAULT_PROFILE)
    ns = parser.parse_args(argv)
    for dest, spec in _MODELLED.items():  # flags this release lacks take the sim's default
        if not hasattr(ns, spec.get("dest", dest)):
            setattr(ns, spec.get("dest", dest), spec.get("default", False if "action" in spec else None))
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
        spelling = "/".join(next(a.option_strings for a in parser._actions if a.dest == "compilation_config"))
        raise EngineArgsError(f"{parser.prog}: error: argument {spelling}: {exc}") from None
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
        log_requests=_log_requests(ns),
        access_log_excluded=_access_log_excluded(ns),
        ignored_flags=_ignored(ns, parser),
        non_default_args={"model_tag": model, **{k: v for k, v in _non_default(ns, parser).items()
                                                 if k != "model_tag"}},
    )
    return config, options
