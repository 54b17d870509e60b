"""The family builder of one /metrics render, and the vLLM family groups both V0 and V1 register.

`Families` collects prometheus_client metric families for one render: it knows the base labels
(`model_name`, and `engine` where the release has it) and whether children carry `_created`.
`phase_histograms` and `cache_config_info` are the groups the V0 and V1 renderers
(`sim.exposition_v0`, `sim.exposition_v1`) share.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from sim.profiles import VersionProfile
from sim.stats import Histogram, MetricsState


def release(profile: VersionProfile) -> tuple[int, int]:
    major, minor = profile.version.split(".")[:2]
    return int(major), int(minor)


class Families:
    """Builds families for one render; knows the base labels and whether `_created` is shown."""

    def __init__(self, base_names: list[str], base_values: list[str], created: bool) -> None:
        self.names = base_names
        self.values = base_values
        self.created = created
        self.out: list[Metric] = []

    def gauge(self, name: str, doc: str, value: float) -> None:
        fam = GaugeMetricFamily(name, doc, labels=self.names)
        fam.add_metric(self.values, float(value))
        self.out.append(fam)

    def labelled_gauge(self, name: str, doc: str, label: str, values: Iterable[tuple[str, float]]) -> None:
        fam = GaugeMetricFamily(name, doc, labels=[*self.names, label])
        for key, value in values:
            fam.add_metric([*self.values, key], float(value))
        self.out.append(fam)

    def counter(self, name: str, doc: str, value: float | None, created: float) -> None:
        """A counter; value None means a family with no child (V0 lazily created labels)."""
        fam = CounterMetricFamily(name, doc, labels=self.names)
        if value is not None:
            fam.add_metric(self.values, float(value), created=created if self.created else None)
        self.out.append(fam)

    def labelled_counter(
        self, name: str, doc: str, label: str, values: Iterable[tuple[str, float]], created: float
    ) -> None:
        fam = CounterMetricFamily(name, doc, labels=[*self.names, label])
        for key, value in values:
            fam.add_metric([*self.values, key], float(value), created=created if self.created else None)
        self.out.append(fam)

    def histogram(self, name: str, doc: str, hist: Histogram, *, lazy: bool = False) -> None:
        fam = HistogramMetricFamily(name, doc, labels=self.names)
        if not (lazy and hist.count == 0):
            fam.add_metric(list(self.values), le_buckets(hist), hist.sum)
            if self.created:
                fam.add_sample(
                    name + "_created", dict(zip(self.names, self.values, strict=True)), hist.created
                )
        self.out.append(fam)

    def empty_histogram(self, name: str, doc: str) -> None:
        self.out.append(HistogramMetricFamily(name, doc, labels=self.names))


def le_buckets(hist: Histogram) -> list[tuple[str, float]]:
    """(le, cumulative count) pairs with `le` spelled as prometheus_client spells it."""
    return [(floatToGoString(float(b)), float(n)) for b, n in hist.cumulative()]


def phase_histograms(f: Families, s: MetricsState, *, lazy: bool) -> None:
    for name, phase, hist in (
        ("vllm:request_queue_time_seconds", "WAITING", s.queue),
        ("vllm:request_inference_time_seconds", "RUNNING", s.inference),
        ("vllm:request_prefill_time_seconds", "PREFILL", s.prefill),
        ("vllm:request_decode_time_seconds", "DECODE", s.decode),
    ):
        f.histogram(name, f"Histogram of time spent in {phase} phase for request.", hist, lazy=lazy)


def cache_config_info(f: Families, s: MetricsState, engine: str | None) -> None:
    info = dict(s.cache_config)
    if engine is not None:
        info["engine"] = engine
    fam = GaugeMetricFamily(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(info)
    )
    fam.add_metric(list(info.values()), 1.0)
    f.out.append(fam)
