"""Parse an engine's /metrics text into one canonical `MetricsSnapshot`, whatever the vLLM release.

Folding rules (reference/vllm-observability.md §1.1):

* counters: summed over every series (multiprocess `pid`, data-parallel `engine`, `model_name`),
  except the one label a spec keeps as `name{value}` (`request_success{length}`, `http_requests{5xx}`);
* histograms: summed by `le` over every series, bounds read from the scrape;
* gauges: ratio gauges (`MetricSpec.ratio`, e.g. KV usage) by maximum, never summed; count gauges
  (running, waiting) summed over `pid` and `engine` (each process or DP rank reports its own share);
  `process_start_time` by maximum (the newest process);
* `*_created` series are ignored everywhere; `http_requests` keeps generation handlers only;
* a sample value that is not a finite number (`+Inf`, `NaN`, `1e999`), a negative counter, count gauge or
  bucket, or a ratio gauge outside 0..1 is bad input: the series is left out (a histogram whole) and
  `MetricsSnapshot.rejected` says why (a bucket's `le="+Inf"` label is normal; only values must be finite).

Whether the series carried an `engine` (or `pid`) label is kept in `info["scrape"]` (see `SCRAPE_INFO`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from collectors.names import PROCESS_METRICS, VLLM_METRICS, MetricSpec
from collectors.promtext import families
from collectors.types import HistogramData, MetricsSnapshot

# info["scrape"] keys: engine_label / pid_label ("true" | "false"), engines / pids / model_names (comma-joined).
SCRAPE_INFO = "scrape"
# Handlers whose 5xx count as serving errors (prometheus_fastapi_instrumentator's `handler` label).
GENERATION_HANDLERS: frozenset[str] = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/invocations"}
)
_MAX_GAUGES = frozenset({"process_start_time"})
# Gauges that count things (never negative).
_COUNT_GAUGES = frozenset({"running", "waiting", "swapped", "process_rss_bytes", "process_start_time"})


class ScrapeError(ValueError):
    """A /metrics body that is not Prometheus text (truncated, garbage)."""


@dataclass(frozen=True)
class _Target:
    canonical: str
    kind: str  # gauge | counter | histogram | info
    part: str  # "" | bucket | sum | count
    pref: int  # index in spec.exposed: lower wins
    spec: MetricSpec
    family: str  # exposed family name (for names_seen)
    vllm: bool


def _build_table() -> dict[str, _Target]:
    table: dict[str, _Target] = {}

    def add(spellings: Iterable[str], canonical: str, spec: MetricSpec, pref: int, vllm: bool) -> None:
        for fam in spellings:
            if spec.kind == "counter":
                table[fam + "_total"] = _Target(canonical, "counter", "", pref, spec, fam, vllm)
            elif spec.kind == "histogram":
                for part in ("bucket", "sum", "count"):
                    table[f"{fam}_{part}"] = _Target(canonical, "histogram", part, pref, spec, fam, vllm)
            else:
                table[fam] = _Target(canonical, spec.kind, "", pref, spec, fam, vllm)

    for canonical, spec in VLLM_METRICS.items():
        for pref, base in enumerate(spec.exposed):
            add((f"vllm:{base}", f"vllm_{base}"), canonical, spec, pref, True)
    for canonical, spec in PROCESS_METRICS.items():
        for pref, base in enumerate(spec.exposed):
            add((base,), canonical, spec, pref, False)
    return table


_TABLE = _build_table()


def _family_of(sample_name: str) -> str | None:
    """The family name of an unmapped sample (None for `_created`, which is ignored)."""
    if sample_name.endswith("_created"):
        return None
    for suffix in ("_bucket", "_total", "_sum", "_count"):
        if sample_name.endswith(suffix):
            return sample_name[: -len(suffix)]
    return sample_name


def _show(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:g}"


def _le(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


class _Builder:
    """Accumulates raw samples; `snapshot()` folds them into a MetricsSnapshot."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, int], dict[str, float]] = {}
        self.gauges: dict[tuple[str, int], float] = {}
        self.hists: dict[tuple[str, int], _Hist] = {}
        self.info: dict[str, dict[str, str]] = {}
        self.names: set[str] = set()
        self.chosen_family: dict[tuple[str, int], str] = {}
        self.engines: set[str] = set()
        self.pids: set[str] = set()
        self.models: set[str] = set()
        self.vllm_seen = False
        self.rejected: dict[str, str] = {}
        self.bad_hists: set[tuple[str, int]] = set()

    def _reject(self, t: _Target, name: str, value: float, why: str) -> None:
        shown = _show(value)
        self.rejected.setdefault(t.canonical, f"{name} = {shown} is {why}: ignored (bad input)")

    def _check(self, t: _Target, name: str, value: float) -> bool:
        """Whether a sample value is usable; otherwise it is recorded in `rejected`."""
        if not math.isfinite(value):
            self._reject(t, name, value, "not a finite number")
            return False
        if value < 0.0 and (t.kind in ("counter", "histogram") or t.canonical in _COUNT_GAUGES):
            self._reject(t, name, value, f"negative (a {t.kind} cannot be)")
            return False
        if t.spec.ratio and value > 1.0 + 1e-6:  # rounding above 1 is not bad input
            self._reject(t, name, value, "outside 0..1 (a ratio)")
            return False
        return True

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        t = _TABLE.get(name)
        if t is None:
            fam = _family_of(name)
            if fam is not None:
                self.names.add(fam)
            return
        self.names.add(t.family)
        key = (t.canonical, t.pref)
        self.chosen_family[key] = t.family
        if t.vllm:
            self.vllm_seen = True
            if labels:
                eng = labels.get("engine")
                if eng is not None:
                    self.engines.add(eng)
                pid = labels.get("pid")
                if pid is not None:
                    self.pids.add(pid)
                model = labels.get("model_name")
                if model is not None:
                    self.models.add(model)
        kind = t.kind
        if kind != "info" and not self._check(t, name, value):
            if kind == "histogram":
                self.bad_hists.add(key)
            return
        if kind == "counter":
            spec = t.spec
            if spec.label is None:
                ckey = t.canonical
            else:
                if t.canonical == "http_requests" and labels.get("handler") not in GENERATION_HANDLERS:
                    return
                ckey = f"{t.canonical}{{{labels.get(spec.label, '')}}}"
            acc = self.counters.setdefault(key, {})
            acc[ckey] = acc.get(ckey, 0.0) + value
        elif kind == "histogram":
            h = self.hists.get(key)
            if h is None:
                h = self.hists[key] = _Hist()
            if t.part == "bucket":
                le = _le(labels.get("le"))
                if le is not None:
                    h.buckets[le] = h.buckets.get(le, 0.0) + value
            elif t.part == "sum":
                h.sum += value
            else:
                h.count += value
        elif kind == "gauge":
            prev = self.gauges.get(key)
            if prev is None:
                self.gauges[key] = value
            elif t.spec.ratio or t.canonical in _MAX_GAUGES:
                self.gauges[key] = max(prev, value)
            else:
                self.gauges[key] = prev + value
        else:  # info: the first series wins (DP ranks share one cache config)
            self.info.setdefault(t.canonical, dict(labels))

    @staticmethod
    def _pick(keys: Iterable[tuple[str, int]]) -> dict[str, tuple[str, int]]:
        best: dict[str, tuple[str, int]] = {}
        for key in keys:
            cur = best.get(key[0])
            if cur is None or key[1] < cur[1]:
                best[key[0]] = key
        return best

    def snapshot(self, timestamp: float, docs: Mapping[str, str] | None = None) -> MetricsSnapshot:
        counters: dict[str, float] = {}
        units: dict[str, str] = {}
        for canonical, key in self._pick(self.counters).items():
            counters.update(self.counters[key])
            if canonical in ("prefix_cache_queries", "prefix_cache_hits"):
                units[canonical] = self._prefix_unit(key, docs)
        gauges = {canonical: self.gauges[key] for canonical, key in self._pick(self.gauges).items()}
        histograms: dict[str, HistogramData] = {}
        for canonical, key in self._pick(self.hists).items():
            if key in self.bad_hists:
                continue
            hist = _histogram(self.hists[key])
            if hist is not None:
                histograms[canonical] = hist
        info: dict[str, Mapping[str, str]] = dict(self.info)
        info[SCRAPE_INFO] = {
            "engine_label": "true" if self.engines else "false",
            "engines": ",".join(sorted(self.engines)),
            "pid_label": "true" if self.pids else "false",
            "pids": ",".join(sorted(self.pids)),
            "model_names": ",".join(sorted(self.models)),
        }
        return MetricsSnapshot(
            timestamp=timestamp, counters=counters, gauges=gauges, histograms=histograms, info=info,
            names_seen=frozenset(self.names), units=units, stats_enabled=self.vllm_seen,
            rejected=dict(self.rejected),
        )

    def _prefix_unit(self, key: tuple[str, int], docs: Mapping[str, str] | None) -> str:
        family = self.chosen_family.get(key, "")
        if "gpu_prefix_cache" not in family:
            return "tokens"
        doc = (docs or {}).get(family)
        if doc is not None:
            return "blocks" if "block" in doc else "tokens"
        # No HELP text (Prometheus server): the old name alone means 0.8.x, which counted blocks.
        return "blocks"


class _Hist:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum = 0.0
        self.count = 0.0


def _histogram(raw: _Hist) -> HistogramData | None:
    buckets, total_sum, count = raw.buckets, raw.sum, raw.count
    if not buckets and count == 0.0:
        return None
    bounds = sorted(buckets)
    cumulative = [buckets[b] for b in bounds]
    if not bounds or not math.isinf(bounds[-1]):
        bounds.append(math.inf)
        cumulative.append(max(count, cumulative[-1] if cumulative else 0.0))
    if count == 0.0:
        count = cumulative[-1]
    return HistogramData(bounds=tuple(bounds), cumulative=tuple(cumulative), sum=total_sum, count=count)


def snapshot_from_samples(samples: Iterable[tuple[str, Mapping[str, str], float]], timestamp: float) -> MetricsSnapshot:
    """Map raw (sample name, labels, value) triples (e.g. PromQL instant-query results) to a snapshot."""
    builder = _Builder()
    for name, labels, value in samples:
        builder.add(name, labels, float(value))
    return builder.snapshot(timestamp)


def _locate(text: str) -> str:
    """Find the first line the parser rejects (error path only)."""
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            for family in text_string_to_metric_families(line + "\n"):
                list(family.samples)
        except Exception as exc:  # the parser raises ValueError, IndexError, KeyError... on garbage
            return f"line {number}: {line[:80]!r}: {exc}"
    return "somewhere in the text (no single line is invalid on its own)"


def parse_metrics(text: str, timestamp: float) -> MetricsSnapshot:
    """Parse a /metrics body (Prometheus text 0.0.4) into a canonical snapshot; ScrapeError if it is not one."""
    if not isinstance(text, str):
        raise ScrapeError(f"/metrics body must be text, got {type(text).__name__}")
    if "\x00" in text:
        where = text.count("\n", 0, text.index("\x00")) + 1
        raise ScrapeError(f"/metrics body is binary (NUL byte on line {where}), not Prometheus text")
    if text and not text.endswith("\n"):
        last = text.rsplit("\n", 1)[-1]
        raise ScrapeError(
            f"/metrics body is truncated: its last line (line {text.count(chr(10)) + 1}) does not end with a "
            f"newline: {last[:80]!r}"
        )
    builder = _Builder()
    docs: dict[str, str] = {}
    try:
        for family in families(text):
            name = family.name
            if name.endswith("_created"):
                continue
            if "prefix_cache" in name:
                docs[name] = family.documentation
            builder.names.add(name)
            add = builder.add
            for s in family.samples:
                add(s.name, s.labels, s.value)
    except Exception as exc:
        raise ScrapeError(f"/metrics body is not Prometheus text: {_locate(text)}") from exc
    return builder.snapshot(timestamp, docs)


def has_engine_label(snapshot: MetricsSnapshot) -> bool | None:
    """Whether vLLM series carried an `engine` label (V1); None when no vLLM series were seen."""
    if not snapshot.stats_enabled:
        return None
    return snapshot.info.get(SCRAPE_INFO, {}).get("engine_label") == "true"


def engine_count(snapshot: MetricsSnapshot) -> int:
    """Data-parallel ranks in the scrape (distinct `engine` label values; 1 without the label)."""
    engines = snapshot.info.get(SCRAPE_INFO, {}).get("engines", "")
    return max(1, len([e for e in engines.split(",") if e]))
