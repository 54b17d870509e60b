"""A client's figures against the sim's own /metrics over the same window (issue 19, real clients).

Scrape before, run the client, scrape after: the request count must match the delta of
vllm:request_success_total exactly, and each client-measured latency percentile must lie within one
bucket width of the histogram quantile (Prometheus `histogram_quantile` on the bucket deltas) of the
bucket holding it. The bound comes only from the bucket layout, never from an absolute timing.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from collectors.quantiles import histogram_quantile
from sim.loadgen_summary import percentile as linear_percentile

SUCCESS = "vllm:request_success_total"
COUNTERS = (SUCCESS, "vllm:prompt_tokens_total", "vllm:generation_tokens_total")
TTFT = "vllm:time_to_first_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
HISTOGRAMS = (TTFT, E2E)
PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True)
class Scrape:
    counters: dict[str, float]  # summed over label sets
    buckets: dict[str, dict[float, float]]  # family -> le -> cumulative count, summed over label sets


def scrape(url: str) -> Scrape:
    text = httpx.get(url.rstrip("/") + "/metrics", timeout=10).text
    counters = dict.fromkeys(COUNTERS, 0.0)
    buckets: dict[str, dict[float, float]] = {h: {} for h in HISTOGRAMS}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in counters:
                counters[s.name] += s.value
            elif s.name.endswith("_bucket") and s.name[: -len("_bucket")] in buckets:
                le = float(s.labels["le"])
                per = buckets[s.name[: -len("_bucket")]]
                per[le] = per.get(le, 0.0) + s.value
    return Scrape(counters, buckets)


@dataclass(frozen=True)
class Window:
    """Deltas between two scrapes of one engine."""

    counters: dict[str, float]
    buckets: dict[str, tuple[tuple[float, ...], tuple[float, ...]]]  # family -> (bounds, cumulative deltas)

    @property
    def requests(self) -> int:
        return round(self.counters[SUCCESS])

    def observations(self, family: str) -> int:
        return round(self.buckets[family][1][-1]) if self.buckets[family][1] else 0

    def quantile(self, family: str, q: float) -> tuple[float, float, float]:
        """(histogram_quantile, lower bound, upper bound) of the bucket that holds rank q."""
        bounds, cumulative = self.buckets[family]
        got = histogram_quantile(q, bounds, cumulative)
        assert got is not None, f"{family}: no observations in the window"
        value, index = got
        assert not math.isinf(bounds[index]), f"{family} q={q}: the rank falls in the +Inf bucket"
        lower = bounds[index - 1] if index > 0 else 0.0
        return value, lower, bounds[index]


def window(before: Scrape, after: Scrape) -> Window:
    counters = {k: after.counters[k] - before.counters.get(k, 0.0) for k in after.counters}
    buckets = {}
    for family, per in after.buckets.items():
        bounds = tuple(sorted(per))
        prev = before.buckets.get(family, {})
        buckets[family] = (bounds, tuple(per[b] - prev.get(b, 0.0) for b in bounds))
    return Window(counters, buckets)


def settled_window(url: str, before: Scrape, expected: int, *, timeout_s: float = 10.0) -> Window:
    """The window once `expected` requests are counted (the exposition may trail the last response
    by a statistics interval, as vLLM's may); a count past `expected` is returned at once, to fail."""
    deadline = time.monotonic() + timeout_s
    while True:
        w = window(before, scrape(url))
        if w.requests >= expected or time.monotonic() > deadline:
            return w
        time.sleep(0.05)


def percentile(values: Sequence[float], p: float) -> float:
    """numpy's default (linear) percentile, as `vllm bench serve` computes its figures."""
    assert values, "no values"
    return linear_percentile(values, p)


@dataclass
class HostLag:
    """How long the client's process was kept from running while it measured: a thread sleeps `tick_s` at a time
    and adds up every overshoot past `slack_s` (a wake-up that late means the process had no CPU, or no GIL).
    A client's timestamps run late by up to that much on a loaded host, whatever the engine did; on a quiet one
    it stays near zero, so the bound stays one bucket width."""

    tick_s: float = 0.005
    slack_s: float = 0.002
    stalled_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            time.sleep(self.tick_s)
            over = time.perf_counter() - began - self.tick_s
            if over > self.slack_s:
                self.stalled_s += over


@contextmanager
def host_lag() -> Iterator[HostLag]:
    """Measure the client process's stalls (HostLag) for the duration of the block."""
    lag = HostLag()
    probe = threading.Thread(target=lag._run, name="host-lag-probe", daemon=True)
    probe.start()
    try:
        yield lag
    finally:
        lag._stop.set()
        probe.join()


def check_latency(w: Window, family: str, client: dict[float, float], what: str, *,
                  extra_hop: bool = False, stalled_s: float = 0.0) -> list[str]:
    """Each client percentile (p -> seconds) within one bucket width of the sim's quantile; returns
    the comparisons as lines (for the failure message and the log). The client is never earlier than the engine
    by more than a width; it may be later by a width plus `stalled_s`, the time its own process was measured
    stalled (HostLag: seen on CI, an in-process engine and six streams on 2 busy cores put a chat p90 TTFT
    293 ms after the engine's, width 250 ms). `extra_hop`: the client reached the engine through a proxy
    (the router), whose hop adds what a loaded host makes it (measured at +190 ms on a saturated 2-core machine):
    the client may then be later than the engine by any amount, never earlier."""
    lines = []
    bad = []
    for p, seconds in sorted(client.items()):
        sim, lower, upper = w.quantile(family, p / 100.0)
        width = upper - lower
        line = (f"{what} {family} p{p:g}: client {seconds * 1000:.1f} ms, sim {sim * 1000:.1f} ms "
                f"(bucket {lower:g}-{upper:g} s, width {width * 1000:.0f} ms"
                + (f", client process stalled {stalled_s * 1000:.0f} ms)" if stalled_s else ")"))
        lines.append(line)
        late = seconds - sim
        if -late > width or (not extra_hop and late > width + stalled_s):
            bad.append(line)
    assert not bad, "client and sim disagree by more than a bucket width:\n" + "\n".join([*bad, "", *lines])
    return lines


def client_percentiles(values: Iterable[float]) -> dict[float, float]:
    xs = list(values)
    return {p: percentile(xs, p) for p in PERCENTILES}
