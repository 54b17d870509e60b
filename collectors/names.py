"""One canonical set of metric names for every vLLM release, and version-profile detection.

vLLM renamed most families between 0.6 and 0.33 (../shared/reference/vllm-observability.md §1.5).
Each canonical name lists the exposed base names (without the `vllm:` prefix) in order of
preference: the first one present in a scrape wins. Both `vllm:x` and `vllm_x` spellings are
accepted (OpenMetrics negotiation and some relabelling pipelines turn `:` into `_`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter", "histogram", "info"]

# The version profiles, named by the vLLM release whose surface they match (DESIGN.md). The sim
# keeps the same list in sim/profiles.py; tests/collectors/test_names.py checks they agree.
PROFILE_NAMES: tuple[str, ...] = ("0.6", "0.8", "0.10", "0.10-v0", "0.11", "0.12", "0.20", "0.26", "0.32", "0.33")
_RELEASE_PROFILES: tuple[tuple[tuple[int, int], str], ...] = (
    ((0, 6), "0.6"), ((0, 8), "0.8"), ((0, 10), "0.10"), ((0, 11), "0.11"), ((0, 12), "0.12"),
    ((0, 20), "0.20"), ((0, 26), "0.26"), ((0, 32), "0.32"), ((0, 33), "0.33"),
)


@dataclass(frozen=True)
class MetricSpec:
    """A canonical metric and the exposed vLLM base names that carry it."""

    kind: Kind
    exposed: tuple[str, ...]
    label: str | None = None  # a label kept as `name{value}` (counters only)
    ratio: bool = False  # a 0..1 gauge: fold multiprocess `pid` series by max, never sum


VLLM_METRICS: dict[str, MetricSpec] = {
    "running": MetricSpec("gauge", ("num_requests_running",)),
    "waiting": MetricSpec("gauge", ("num_requests_waiting",)),
    "swapped": MetricSpec("gauge", ("num_requests_swapped",)),
    "kv_cache_usage": MetricSpec("gauge", ("kv_cache_usage_perc", "gpu_cache_usage_perc"), ratio=True),
    "cpu_cache_usage": MetricSpec("gauge", ("cpu_cache_usage_perc",), ratio=True),
    "prefix_cache_hit_rate_v0": MetricSpec("gauge", ("gpu_prefix_cache_hit_rate",), ratio=True),
    "prompt_tokens": MetricSpec("counter", ("prompt_tokens",)),
    "generation_tokens": MetricSpec("counter", ("generation_tokens",)),
    "preemptions": MetricSpec("counter", ("num_preemptions",)),
    "request_success": MetricSpec("counter", ("request_success",), label="finished_reason"),
    "prefix_cache_queries": MetricSpec("counter", ("prefix_cache_queries", "gpu_prefix_cache_queries")),
    "prefix_cache_hits": MetricSpec("counter", ("prefix_cache_hits", "gpu_prefix_cache_hits")),
    "ttft": MetricSpec("histogram", ("time_to_first_token_seconds",)),
    "itl": MetricSpec("histogram", ("inter_token_latency_seconds", "time_per_output_token_seconds")),
    "e2e": MetricSpec("histogram", ("e2e_request_latency_seconds",)),
    "queue": MetricSpec("histogram", ("request_queue_time_seconds",)),
    "prefill": MetricSpec("histogram", ("request_prefill_time_seconds",)),
    "decode": MetricSpec("histogram", ("request_decode_time_seconds",)),
    "inference": MetricSpec("histogram", ("request_inference_time_seconds",)),
    "request_tpot": MetricSpec("histogram", ("request_time_per_output_token_seconds",)),
    "prompt_len": MetricSpec("histogram", ("request_prompt_tokens",)),
    "generation_len": MetricSpec("histogram", ("request_generation_tokens",)),
    "iteration_tokens": MetricSpec("histogram", ("iteration_tokens_total",)),
    "cache_config": MetricSpec("info", ("cache_config_info",)),
}

# Families outside the vllm: namespace that the collectors read (exposed names, no prefix rules).
PROCESS_METRICS: dict[str, MetricSpec] = {
    "process_start_time": MetricSpec("gauge", ("process_start_time_seconds",)),
    "process_cpu_seconds": MetricSpec("counter", ("process_cpu_seconds",)),
    "process_rss_bytes": MetricSpec("gauge", ("process_resident_memory_bytes",)),
    "http_requests": MetricSpec("counter", ("http_requests",), label="status"),
}

# vLLM families `detect_profile` reads by name alone (base names). With the families above they are all the
# collectors read: a Prometheus query asks for these and no more (`read_sample_names`).
PROFILE_TELLS: tuple[str, ...] = (
    "num_requests_running", "num_requests_waiting", "num_requests_swapped", "cpu_cache_usage_perc",
    "num_requests_waiting_by_reason", "request_num_preemptions", "engine_sleep_state",
    "external_prefix_cache_queries", "request_time_per_output_token_seconds", "kv_cache_usage_perc",
)
_PARTS: dict[str, tuple[str, ...]] = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                                      "gauge": ("",), "info": ("",)}
_ANY_PART = ("", "_total", "_bucket", "_sum", "_count")


def read_sample_names() -> tuple[str, ...]:
    """Every exposed sample name the collectors read: both spellings of each vLLM family, sorted."""
    names: set[str] = set()
    for spec in VLLM_METRICS.values():
        for base in spec.exposed:
            names.update(f + part for f in exposed_variants(base) for part in _PARTS[spec.kind])
    for spec in PROCESS_METRICS.values():
        names.update(base + part for base in spec.exposed for part in _PARTS[spec.kind])
    for base in PROFILE_TELLS:
        names.update(f + part for f in exposed_variants(base) for part in _ANY_PART)
    return tuple(sorted(names))


def exposed_variants(base: str) -> tuple[str, str]:
    """The two spellings of a vLLM family name."""
    return f"vllm:{base}", f"vllm_{base}"


def canonical_family(family: str) -> str | None:
    """The vLLM base name of an exposed family (`vllm:x` or `vllm_x`), else None."""
    if family.startswith(("vllm:", "vllm_")):
        return family[5:]
    return None


_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def profile_for_version(version: str) -> str | None:
    """The profile of a release string such as "0.10.2" or "0.9.2rc1" (the newest profile not newer)."""
    m = _VERSION.match(version.strip())
    if not m:
        return None
    release = (int(m.group(1)), int(m.group(2)))
    chosen: str | None = None
    for rel, name in _RELEASE_PROFILES:
        if rel <= release:
            chosen = name
    return chosen


@dataclass(frozen=True)
class Detection:
    """A detected version profile and how it was decided."""

    profile: str | None
    version: str | None
    engine_generation: Literal["v0", "v1", "unknown"]
    reason: str


def detect_profile(version: str | None, names_seen: frozenset[str], *, has_engine_label: bool | None) -> Detection:
    """Decide the profile from /version (when it answered) and the families a scrape exposed.

    A 0.8-0.10 server that fell back to the V0 engine is `0.10-v0`: V0 exports
    `num_requests_swapped` / `cpu_cache_usage_perc` and its series have no `engine` label.
    """
    bases = {canonical_family(n) or n for n in names_seen}
    v0_tell = bool({"num_requests_swapped", "cpu_cache_usage_perc"} & bases) or has_engine_label is False
    generation: Literal["v0", "v1", "unknown"] = "unknown"
    if bases & {"num_requests_running", "num_requests_waiting"}:
        generation = "v0" if v0_tell else "v1"
    if version:
        profile = profile_for_version(version)
        if profile is None:
            return Detection(None, version, generation, f"/version said {version!r}, which is not a release")
        if generation == "v0" and profile in ("0.8", "0.10"):
            return Detection("0.10-v0", version, generation,
                             f"/version {version} with V0 metric names: fell back to the V0 engine")
        if generation == "v0" and profile == "0.6":
            return Detection("0.6", version, generation, f"/version {version} (V0 engine)")
        return Detection(profile, version, generation, f"/version {version}")
    # No /version: judge by the names (coarse).
    if generation == "unknown":  # only process_*/http_* (stats disabled) or nothing: no engine names to judge by
        return Detection(None, None, generation, "no /version and no vLLM metrics to judge by")
    if generation == "v0":
        if "http_requests" in bases:  # the HTTP instrumentator arrived in 0.8: a V1 release fell back to V0
            return Detection("0.10-v0", None, generation, "V0 metric names with 0.8+ http_requests metrics")
        return Detection("0.6", None, generation, "V0 metric names (num_requests_swapped or no engine label)")
    if "num_requests_waiting_by_reason" in bases:
        prof = "0.26" if "request_num_preemptions" in bases else "0.20"
    elif "engine_sleep_state" in bases or "external_prefix_cache_queries" in bases:
        prof = "0.12"
    elif "request_time_per_output_token_seconds" in bases:
        prof = "0.11"
    elif "kv_cache_usage_perc" in bases:
        prof = "0.10"
    else:
        prof = "0.8"
    return Detection(prof, None, generation, "judged from the metric names (no /version)")
