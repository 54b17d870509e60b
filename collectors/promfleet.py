"""A fleet through Prometheus: every engine's snapshot in a few instant queries, and engines found from its targets.

`fleet_snapshots_at` reads N engines with one query per label their selectors match on (usually one:
`instance`) and per ENGINES_PER_QUERY engines, not one per engine: the engines' values become one
`label=~"v1|v2|..."` matcher, the answer is split by that label, and each engine's rows are mapped
exactly as `PrometheusSource.snapshot_at` maps them (`promsource.snapshot_of_rows`). Engines whose
selector is not one `label="value"` matcher are read one by one. `discover_targets` lists the active
scrape targets (`/api/v1/targets`) whose labels match the given ones. Both are synchronous: run them
off the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import httpx

from collectors.gcpause import gc_paused
from collectors.promsource import (
    _TARGET_LABELS,
    PrometheusError,
    PrometheusSource,
    _as_float,
    _matchers,
    snapshot_of_rows,
    snapshot_query,
)
from collectors.types import MetricsSnapshot

# Engines per snapshot query: the decoded answer is ~350 series per vLLM engine, and the process holds all of
# one answer at once (bench/fleet_read.py, 1,000 engines: 550 MB peak in one query, 211 MB in 250s, 142 in 100s).
ENGINES_PER_QUERY = 200
_ONE_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def equality_matcher(selector: str) -> tuple[str, str] | None:
    """(label, value) when `selector` is exactly one `label="value"` matcher, else None."""
    found = _ONE_MATCHER.fullmatch(_matchers(selector))
    if found is None or found.group(1) == "__name__":
        return None
    value = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), found.group(2))
    return found.group(1), value


def _promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def alternation(values: list[str]) -> str:
    """A PromQL string literal of an RE2 regex that matches exactly these values."""
    return _promql_string("|".join(_SPECIAL.sub(r"\\\1", v) for v in values))


def fleet_snapshots_at(source: PrometheusSource, selectors: Mapping[str, str], t: float, *,
                       per_query: int = ENGINES_PER_QUERY) -> dict[str, MetricsSnapshot | PrometheusError]:
    """Each engine's snapshot at `t` ({engine: selector}), or the error that names why it has none.

    One query per label the selectors match on and per `per_query` of its values; an engine the answer
    lacks gets the same errors as a per-engine read (no series, several targets). A failed query is
    every one of its engines' error.
    """
    return fleet_snapshots_over(source, selectors, (t,), per_query=per_query)[0]


def fleet_snapshots_over(source: PrometheusSource, selectors: Mapping[str, str], times: Sequence[float], *,
                         per_query: int = ENGINES_PER_QUERY,
                         workers: int = 2) -> list[dict[str, MetricsSnapshot | PrometheusError]]:
    """fleet_snapshots_at for each of `times` (one or two), one query per chunk of engines for all of them.

    Two times are one range query from the first to the second with their difference as its step: Prometheus
    evaluates each step as the instant query at that time (the same points, held equal by a test), finds the
    series once for both, and answers the labels once (bench/fleet_read.py's answers for 200 engines: 11.8 MB
    against 20.2 MB for two instant queries, Prometheus's CPU 1.18 s against 1.52 s). Chunks are asked
    `workers` at a time.
    """
    times = tuple(times)
    if not 1 <= len(times) <= 2 or (len(times) == 2 and not times[1] > times[0]):
        raise ValueError(f"one time, or two increasing ones, not {times!r}")
    with gc_paused():  # the answers are large and acyclic (collectors/gcpause.py)
        return _fleet_snapshots_over(source, selectors, times, per_query=per_query, workers=workers)


Chunk = tuple[str, dict[str, list[str]]]  # (label, {value: engines})


def _fleet_snapshots_over(source: PrometheusSource, selectors: Mapping[str, str], times: tuple[float, ...], *,
                          per_query: int, workers: int) -> list[dict[str, MetricsSnapshot | PrometheusError]]:
    out: list[dict[str, MetricsSnapshot | PrometheusError]] = [{} for _ in times]
    groups: dict[str, dict[str, list[str]]] = {}  # label -> value -> engines
    for engine, selector in selectors.items():
        key = equality_matcher(selector)
        if key is None:
            for i, t in enumerate(times):
                try:
                    out[i][engine] = source.snapshot_at(selector, t)
                except PrometheusError as exc:
                    out[i][engine] = exc
            continue
        groups.setdefault(key[0], {}).setdefault(key[1], []).append(engine)
    chunks: list[Chunk] = [(label, {v: by_value[v] for v in values[i:i + max(1, per_query)]})
                           for label, by_value in groups.items() for values in [sorted(by_value)]
                           for i in range(0, len(values), max(1, per_query))]
    if len(chunks) > 1 and workers > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="promfleet") as pool:
            done = list(pool.map(lambda c: _chunk(source, c, times), chunks))
    else:
        done = [_chunk(source, c, times) for c in chunks]
    for got in done:
        for i, snaps in enumerate(got):
            out[i].update(snaps)
    return out


def _chunk(source: PrometheusSource, chunk: Chunk, times: tuple[float, ...]) \
        -> list[dict[str, MetricsSnapshot | PrometheusError]]:
    """One chunk's engines' snapshots at each of `times`, from one query."""
    label, by_value = chunk
    by = _TARGET_LABELS if label in _TARGET_LABELS else (*_TARGET_LABELS, label)
    query = snapshot_query(f"{label}=~{alternation(sorted(by_value))}", by=by)
    out: list[dict[str, MetricsSnapshot | PrometheusError]] = [{} for _ in times]
    try:
        splits = _split_answers(source, query, times, label)
    except PrometheusError as exc:
        for snaps in out:
            snaps.update({engine: exc for engines in by_value.values() for engine in engines})
        return out
    for i, (t, split) in enumerate(zip(times, splits, strict=True)):
        for value, engines in by_value.items():
            selector = f"{label}={_promql_string(value)}"
            try:  # each engine's rows are dropped once mapped: the answer is not held twice
                snap: MetricsSnapshot | PrometheusError = snapshot_of_rows(
                    split.pop(value, []), url=source.url, selector=selector, t=t, query=query)
            except PrometheusError as exc:
                snap = exc
            out[i].update({engine: snap for engine in engines})
    return out


Rows = dict[str, list[tuple[dict[str, str], float]]]


def _split_answers(source: PrometheusSource, query: str, times: tuple[float, ...], label: str) -> list[Rows]:
    """The query's rows at each of `times`, by the value of `label`, built from the decoded answer in place (a row's
    labels are the answer's own dict, not a copy: for 1,000 engines the answer holds ~200,000 series; the first
    time's rows of a range answer get a copy, as mapping a row takes its target labels out)."""
    if len(times) == 1:
        result = source._call(query, lambda c: c.custom_query(query, params={"time": f"{times[0]:.3f}"}))
    else:
        # Prometheus works in milliseconds: start, start + step and end are the two times to the millisecond, as
        # the instant queries ask them (the client's own parameters would round them to seconds)
        t0, t1 = (round(t, 3) for t in times)
        at = {"start": f"{t0:.3f}", "end": f"{t1:.3f}", "step": f"{t1 - t0:.3f}"}
        result = source._call(query, lambda c: c.custom_query_range(
            query, datetime.fromtimestamp(t0, UTC), datetime.fromtimestamp(t1, UTC), at["step"], params=at))
    splits: list[Rows] = [{} for _ in times]
    try:
        if len(times) == 1:
            split = splits[0]
            for item in result:
                labels = item["metric"]
                split.setdefault(labels.get(label, ""), []).append((labels, _as_float(item["value"][1])))
            return splits
        first = round(times[0], 3)
        for item in result:
            labels = item["metric"]
            key = labels.get(label, "")
            points = item["values"]
            for ts, raw in points:
                i = 0 if abs(float(ts) - first) < 0.0005 else 1
                own = dict(labels) if i == 0 and len(points) > 1 else labels
                splits[i].setdefault(key, []).append((own, _as_float(raw)))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"Prometheus at {source.url}: unexpected result shape ({exc}) (query: {query})") \
            from None
    return splits


@dataclass(frozen=True)
class Target:
    """One active scrape target: its labels (after relabelling), where it is scraped, its health."""

    labels: Mapping[str, str]
    scrape_url: str
    health: str

    @property
    def base_url(self) -> str:
        """The scrape URL without its path: the engine's HTTP root."""
        parts = urlsplit(self.scrape_url)
        return f"{parts.scheme}://{parts.netloc}"


def discover_targets(url: str, match: Mapping[str, str], *, timeout_s: float = 10.0,
                     transport: httpx.BaseTransport | None = None) -> list[Target]:
    """Prometheus's active targets whose labels equal every `match` item (e.g. {"job": "vllm"})."""
    where = f"Prometheus at {url.rstrip('/')}"
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, transport=transport) as client:
            r = client.get(f"{url.rstrip('/')}/api/v1/targets", params={"state": "active"})
    except httpx.HTTPError as exc:
        raise PrometheusError(f"{where}: cannot list targets ({type(exc).__name__}: {exc})") from None
    if r.status_code != 200:
        raise PrometheusError(f"{where}: /api/v1/targets answered HTTP {r.status_code}: {r.text[:200]}")
    try:
        active = r.json()["data"]["activeTargets"]
        targets = [Target(dict(t["labels"]), str(t["scrapeUrl"]), str(t.get("health", ""))) for t in active]
    except (ValueError, KeyError, TypeError) as exc:
        raise PrometheusError(f"{where}: /api/v1/targets gave an unexpected answer ({type(exc).__name__}: {exc})") \
            from None
    return [t for t in targets if all(t.labels.get(k) == v for k, v in match.items())]


__all__ = ("ENGINES_PER_QUERY", "Target", "alternation", "discover_targets", "equality_matcher", "fleet_snapshots_at",
           "fleet_snapshots_over")
