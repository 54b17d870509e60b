"""Render a `MetricsState` as the /metrics text of one vLLM release.

The text is produced by prometheus_client itself (the library vLLM uses): a one-shot collector
yields metric families and `generate_latest` writes the classic text format 0.0.4, so `_total`
munging, `_created` gauge families, label sorting and float formatting are the library's.

Sources. Names, HELP texts, label names, bucket bounds and registration order were checked in
vLLM's `vllm/v1/metrics/loggers.py` (0.9.x and a 0.20+ revision) and `vllm/engine/metrics.py`
(0.7-era V0), plus prometheus_fastapi_instrumentator's `metrics.default()`. What was inferred, not
read, is listed in the docstring of the module that renders it.

The families live in one module per concern; this module assembles them in the order a server
registers them:

* `sim.exposition_process`: python_* and process_* (V1 servers only),
* `sim.exposition_v1` / `sim.exposition_v0`: the engine's `vllm:*` families (unless stats are off),
  built with `sim.exposition_families.Families`,
* `sim.exposition_http`: prometheus_fastapi_instrumentator's http_* families.
"""

from __future__ import annotations

from collections.abc import Iterator

import prometheus_client.exposition
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from sim.exposition_families import Families
from sim.exposition_http import EXCLUDED_HANDLERS, HTTP_HIGHR_BUCKETS, http_families
from sim.exposition_process import runtime_families
from sim.exposition_v0 import vllm_v0_families
from sim.exposition_v1 import vllm_v1_families
from sim.profiles import VersionProfile
from sim.stats import MetricsState

__all__ = ["CONTENT_TYPE", "EXCLUDED_HANDLERS", "HTTP_HIGHR_BUCKETS", "render_metrics"]

# What /metrics answers to a plain scrape (Accept: */* or text/plain). Newer prometheus_client
# (0.26 here) made CONTENT_TYPE_LATEST "version=1.0.0"; its ASGI app still labels the text 0.0.4.
CONTENT_TYPE: str = getattr(prometheus_client.exposition, "CONTENT_TYPE_PLAIN_0_0_4", CONTENT_TYPE_LATEST)


class _OneShot:
    """A collector that yields prepared families once per collect()."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def render_metrics(
    profile: VersionProfile,
    state: MetricsState,
    *,
    model_name: str,
    engine_index: int = 0,
    stats_enabled: bool = True,
    python_version: tuple[int, int, int] = (3, 12, 3),
) -> bytes:
    """The /metrics body (Prometheus text 0.0.4) a `vllm serve` of this profile would answer."""
    engine = str(engine_index)
    families: list[Metric] = []
    if profile.v1:  # V0 serves through MultiProcessCollector: no runtime families
        families.extend(runtime_families(state, python_version))
    if stats_enabled:
        if profile.engine_label:
            f = Families(["model_name", "engine"], [model_name, engine], profile.created_series)
        else:
            f = Families(["model_name"], [model_name], profile.created_series)
        if profile.v1:
            vllm_v1_families(profile, state, f, engine)
        else:
            vllm_v0_families(profile, state, f)
        families.extend(f.out)
    if profile.http_metrics:
        families.extend(http_families(state, profile.created_series))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_OneShot(families))
    return generate_latest(registry)
