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
from collections.abc import Mapping
from dataclasses import dataclass
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
    with gc_paused():  # the answers are large and acyclic (collectors/gcpause.py)
        return _fleet_snapshots_at(source, selectors, t, per_query=per_query)


def _fleet_snapshots_at(source: PrometheusSource, selectors: Mapping[str, str], t: float, *,
                        per_query: int) -> dict[str, MetricsSnapshot | PrometheusError]:
    out: dict[str, MetricsSnapshot | PrometheusError] = {}
    groups: dict[str, dict[str, list[str]]] = {}  # label -> value -> engines
    for engine, selector in selectors.items():
        key = equality_matcher(selector)
        if key is None:
            try:
                out[engine] = source.snapshot_at(selector, t)
            except PrometheusError as exc:
                out[engine] = exc
            continue
        groups.setdefault(key[0], {}).setdefault(key[1], []).append(engine)
    chunks = [(label, {v: by_value[v] for v in values[i:i + max(1, per_query)]})
              for label, by_value in groups.items() for values in [sorted(by_value)]
              for i in range(0, len(values), max(1, per_query))]
    for label, by_value in chunks:
        by = _TARGET_LABELS if label in _TARGET_LABELS else (*_TARGET_LABELS, label)
        query = snapshot_query(f"{label}=~{alternation(sorted(by_value))}", by=by)
        try:
            split = _split_answer(source, query, t, label)
        except PrometheusError as exc:
            out.update({engine: exc for engines in by_value.values() for engine in engines})
            continue
        for value, engines in by_value.items():
            selector = f"{label}={_promql_string(value)}"
            try:  # each engine's rows are dropped once mapped: the answer is not held twice
                snap: MetricsSnapshot | PrometheusError = snapshot_of_rows(
                    split.pop(value, []), url=source.url, selector=selector, t=t, query=query)
            except PrometheusError as exc:
                snap = exc
            out.update({engine: snap for engine in engines})
    return out


def _split_answer(source: PrometheusSource, query: str, t: float,
                  label: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """An instant query's rows by the value of `label`, built from the decoded answer in place (each row's labels
    are the answer's own dict, not a copy: for 1,000 engines the answer holds ~350,000 series)."""
    result = source._call(query, lambda c: c.custom_query(query, params={"time": f"{t:.3f}"}))
    split: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for item in result:
            labels = item["metric"]
            split.setdefault(labels.get(label, ""), []).append((labels, _as_float(item["value"][1])))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"Prometheus at {source.url}: unexpected result shape ({exc}) (query: {query})") \
            from None
    return split


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


__all__ = ("ENGINES_PER_QUERY", "Target", "alternation", "discover_targets", "equality_matcher", "fleet_snapshots_at")
