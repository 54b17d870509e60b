"""A fleet through Prometheus: one query per label for every engine's snapshot, engines from the targets.

The scale test backfills 1,000 engines' series (the sim's exposition, each engine's numbers its own) into a
real Prometheus (Debian's, on loopback) with `promtool tsdb create-blocks-from openmetrics`, lists them as
its targets, and runs the doctor's own read (doctor.reading.read_all in Prometheus mode) over all of them.
"""

from __future__ import annotations

import asyncio
import gc
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.combine import EngineReading, build_signals
from collectors.promfleet import (
    ENGINES_PER_QUERY,
    Target,
    alternation,
    discover_targets,
    equality_matcher,
    fleet_snapshots_at,
    fleet_snapshots_over,
)
from collectors.promsource import PrometheusError, PrometheusSource
from collectors.scrape import parse_metrics
from collectors.types import MetricsSnapshot, Sample, Signals
from doctor.discover import DiscoveryError, discover_engines, engines_from_targets
from doctor.engines import EngineRef
from doctor.plan import Plan
from doctor.reading import EngineResult, read_all
from sim.harness import Harness
from sim.testing import ALL_GRAPHED
from sim.workload import RequestSpec

# ------------------------------------------------------------------------------- matchers and splitting


def test_equality_matcher_and_alternation() -> None:
    assert equality_matcher('instance="h:8000"') == ("instance", "h:8000")
    assert equality_matcher('{ pod = "a\\"b" }') == ("pod", 'a"b')
    for selector in ('job="vllm", instance="h:1"', 'instance=~"h.*"', '__name__="up"', ""):
        assert equality_matcher(selector) is None, selector
    literal = alternation(["10.0.0.1:8000", "a|b", 'q"x'])
    assert literal == '"10\\\\.0\\\\.0\\\\.1:8000|a\\\\|b|q\\"x"'
    # as Prometheus reads the literal, the regex matches exactly the values
    pattern = literal[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    assert [v for v in ("10.0.0.1:8000", "10a0b0c1:8000", "a|b", "a", 'q"x') if re.fullmatch(pattern, v)] == \
        ["10.0.0.1:8000", "a|b", 'q"x']


class FakeClient:
    """Answers every instant query from canned rows; records the queries."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.queries: list[str] = []
        self.gc_on_during: list[bool] = []

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.queries.append(query)
        self.gc_on_during.append(gc.isenabled())
        return [dict(r, metric=dict(r["metric"])) for r in self.rows]  # a fresh answer, as a real client's

    def custom_query_range(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no range queries here")


def _rows(instance: str, running: float, stamp: float, job: str = "vllm") -> list[dict[str, Any]]:
    return [{"metric": {"__name__": "vllm:num_requests_running", "engine": "0", "model_name": "m", "job": job,
                        "instance": instance}, "value": [stamp + 1, str(running)]},
            {"metric": {"job": job, "instance": instance, "doctor_scrape_time": "1"}, "value": [stamp + 1, str(stamp)]}]


def test_fleet_snapshots_split_one_answer_per_engine() -> None:
    client = FakeClient(_rows("a:1", 3, 100.0) + _rows("b:1", 5, 101.0) + _rows("c:1", 1, 99.0, job="x")
                        + _rows("c:1", 1, 99.0, job="y"))
    source = PrometheusSource("http://prom:9090", client_factory=lambda url, t: client)
    out = fleet_snapshots_at(source, {"a": 'instance="a:1"', "b": 'instance="b:1"', "gone": 'instance="z:1"',
                                      "twice": 'instance="c:1"'}, 102.0)
    assert len(client.queries) == 1
    assert 'instance=~"a:1|b:1|c:1|z:1"' in client.queries[0]
    # the answer decoded and mapped with the cyclic collector paused (collectors/gcpause.py), on again after
    assert client.gc_on_during == [False] and gc.isenabled()
    a, b = out["a"], out["b"]
    assert isinstance(a, MetricsSnapshot) and isinstance(b, MetricsSnapshot)
    assert (a.gauges["running"], a.timestamp, b.gauges["running"], b.timestamp) == (3.0, 100.0, 5.0, 101.0)
    assert isinstance(out["gone"], PrometheusError) and "no engine series" in str(out["gone"])
    assert isinstance(out["twice"], PrometheusError) and "matches 2 scrape targets" in str(out["twice"])
    # another label: its own query, its scrape times kept by that label too; a compound selector: one by one
    client.queries.clear()
    fleet_snapshots_at(source, {"p": 'pod="p-1"', "q": 'pod="p-2"', "j": 'job="vllm", instance="a:1"'}, 102.0)
    assert len(client.queries) == 2
    assert any("pod=~" in q and "max by (job, instance, pod)" in q for q in client.queries)
    # at most `per_query` engines' values in one query: three engines, two at a time, two queries
    client.queries.clear()
    chunked = fleet_snapshots_at(source, {"a": 'instance="a:1"', "b": 'instance="b:1"', "gone": 'instance="z:1"'},
                                 102.0, per_query=2)
    assert len(client.queries) == 2 and 'instance=~"a:1|b:1"' in client.queries[0]
    assert 'instance=~"z:1"' in client.queries[1]
    assert [type(chunked[e]).__name__ for e in ("a", "b", "gone")] == ["MetricsSnapshot", "MetricsSnapshot",
                                                                      "PrometheusError"]


def test_targets_become_engines() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/targets" and request.url.params["state"] == "active"
        active = [{"labels": {"job": "vllm", "instance": "10.0.0.1:8000", "role": "hot"},
                   "scrapeUrl": "http://10.0.0.1:8000/metrics", "health": "up"},
                  {"labels": {"job": "vllm", "instance": "pod/a b"}, "scrapeUrl": "https://a:8443/metrics",
                   "health": "down"},
                  {"labels": {"job": "vllm", "instance": "listed:1", "role": "cold"},
                   "scrapeUrl": "http://listed:1/metrics", "health": "up"},
                  {"labels": {"job": "node", "instance": "n:9100"}, "scrapeUrl": "http://n:9100/metrics"}]
        return httpx.Response(200, json={"status": "success", "data": {"activeTargets": active}})

    transport = httpx.MockTransport(answer)
    targets = discover_targets("http://prom:9090/", {"job": "vllm"}, transport=transport)
    assert [t.labels["instance"] for t in targets] == ["10.0.0.1:8000", "pod/a b", "listed:1"]
    listed = EngineRef("listed", "hot", "http://listed:1")
    engines = discover_engines("http://prom:9090", {"job": "vllm"}, [listed], timeout_s=1, transport=transport)
    assert [(e.name, e.role, e.url, e.promql_selector) for e in engines] == [
        ("listed", "hot", "http://listed:1", 'instance="listed:1"'),
        ("10.0.0.1-8000", "hot", "http://10.0.0.1:8000", 'instance="10.0.0.1:8000"'),
        ("pod-a-b", None, "https://a:8443", 'instance="pod/a b"')]
    same_name = [Target({"instance": "x:1"}, "http://x:1/metrics", "up"), Target({"instance": "x-1"}, "http://y:1", "")]
    assert [e.name for e in engines_from_targets(same_name)] == ["x-1", "x-1-2"]

    with pytest.raises(DiscoveryError, match=r'no active target .* has job="nothing", and no engine is listed'):
        discover_engines("http://prom:9090", {"job": "nothing"}, [], timeout_s=1, transport=transport)
    broken = httpx.MockTransport(lambda r: httpx.Response(503, text="starting"))
    with pytest.raises(DiscoveryError, match=r"cannot discover engines: .*answered HTTP 503: starting"):
        discover_engines("http://prom:9090", {"job": "vllm"}, [], timeout_s=1, transport=broken)


# ------------------------------------------------------------------- 1,000 engines through a real Prometheus

ENGINES = 1000
WINDOW_S = 600
# The families the signals come from (a subset of the sim's ~430 series per engine keeps the backfill short).
FAMILIES = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
            "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:inter_token_latency_seconds",
            "vllm:request_prompt_tokens", "process_start_time_seconds", "process_cpu_seconds_total",
            "process_resident_memory_bytes"}
GAUGE_OF = {"vllm:num_requests_running": lambda i: float(i % 7), "vllm:num_requests_waiting": lambda i: float(i % 5),
            "vllm:kv_cache_usage_perc": lambda i: (i % 100) / 100}
SAMPLED = (0, 1, 137, 500, 998, 999)
_SAMPLE = re.compile(r"^([^{\s]+)(\{.*\})?\s+(\S+)$")


@dataclass(frozen=True)
class Line:
    family: str
    kind: str
    name: str
    labels: str  # inside the braces, "" for none
    value: float


def _template_lines(text: str) -> list[str | Line]:
    """The exposition of the kept families: comment lines as they are, samples parsed (no _created series)."""
    out: list[str | Line] = []
    family, kind = "", ""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
        if family not in FAMILIES:
            continue
        if line.startswith("#"):
            out.append(line)
            continue
        m = _SAMPLE.match(line)
        assert m is not None, line
        if not m.group(1).endswith("_created"):
            out.append(Line(family, kind, m.group(1), (m.group(2) or "{}")[1:-1], float(m.group(3))))
    return out


def _value(line: Line, i: int) -> float:
    """Engine i's own numbers: its gauges set from i, its counters and histograms scaled by 1 + i/1000."""
    if line.family in GAUGE_OF:
        return GAUGE_OF[line.family](i)
    return line.value if line.kind == "gauge" else line.value * (1 + i / 1000)


def _instance(i: int) -> str:
    return f"engine-{i:04d}"


def _exposition(lines: list[str | Line], i: int) -> str:
    """What engine i's /metrics would have answered (for the direct parse the backfill is compared to)."""
    return "".join((x if isinstance(x, str) else f"{x.name}{{{x.labels}}} {_value(x, i)!r}") + "\n" for x in lines)


def _openmetrics(points: list[tuple[float, list[str | Line]]], path: Path) -> None:
    """Every engine's series at every point, in OpenMetrics with timestamps in seconds, ending in # EOF."""
    with path.open("w") as out:
        samples = [[x for x in lines if isinstance(x, Line)] for _, lines in points]
        for i in range(ENGINES):
            extra = f'instance="{_instance(i)}",job="vllm"'
            for series in zip(*samples, strict=True):
                first = series[0]
                labels = f"{extra},{first.labels}" if first.labels else extra
                out.write("".join(f"{x.name}{{{labels}}} {_value(x, i)!r} {t:.0f}\n"
                                  for (t, _), x in zip(points, series, strict=True)))
        out.write("# EOF\n")


def _targets_yaml() -> str:
    groups = "".join(f"      - {{targets: ['127.0.0.2:1'], labels: {{instance: {_instance(i)}, "
                     f"role: {'hot' if i % 2 else 'cold'}}}}}\n" for i in range(ENGINES))
    return ("  - job_name: vllm\n    scrape_interval: 1h\n    static_configs:\n" + groups
            + "  - job_name: other\n    scrape_interval: 1h\n"
              "    static_configs: [{targets: ['127.0.0.2:2'], labels: {instance: not-an-engine}}]\n")


def _query_count(url: str) -> float:
    """Queries (instant and range) Prometheus has answered, from its own /metrics (reading them is no query)."""
    r = httpx.get(f"{url}/metrics", timeout=10, trust_env=False)
    r.raise_for_status()
    return sum(s.value for f in text_string_to_metric_families(r.text) if f.name == "prometheus_http_requests"
               for s in f.samples if s.name.endswith("_total")
               and s.labels.get("handler") in ("/api/v1/query", "/api/v1/query_range"))


def _signals(name: str, snaps: list[MetricsSnapshot], window_s: float) -> Signals:
    """The doctor's derive step over two snapshots (as doctor.reading builds them, defaults alike)."""
    reading = EngineReading(name, None, "http://127.0.0.2:1")
    reading.samples.extend(Sample("metrics", name, s.timestamp, metrics=s) for s in snaps)
    return build_signals(reading, window_s=window_s)


def _same_signals(got: Signals, want: Signals) -> None:
    expected = {k: v for k, v in want.values.items() if v is not None}
    assert expected.keys() <= {k for k, v in got.values.items() if v is not None}, \
        set(expected) - {k for k, v in got.values.items() if v is not None}
    for key, value in expected.items():
        assert got.values[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@dataclass
class Fleet:
    url: str
    t1: float
    points: list[tuple[float, list[str | Line]]]
    results: dict[str, EngineResult]
    queries: float
    engines: list[EngineRef]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, prometheus_launcher: Any) -> Iterator[Fleet]:
    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED, "--vllm-version", "0.33"])
    texts = []
    for batch in range(2):
        h.load([RequestSpec(index=i, arrival_s=h.now - h.start + 0.01 * i, prompt_tokens=100 + 40 * i + 500 * batch,
                            output_tokens=10 + i, long=False) for i in range(12 + 20 * batch)])
        h.drain()
        texts.append(h.metrics_text("e"))
    t1 = float(int(time.time()) - 60)
    points = [(t1 - WINDOW_S, _template_lines(texts[0])), (t1, _template_lines(texts[1]))]
    work = tmp_path_factory.mktemp("fleet")
    started = time.monotonic()
    _openmetrics(points, work / "fleet.om")
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    proc = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(work / "fleet.om"),
                           str(work / "data")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    backfilled = time.monotonic() - started
    with prometheus_launcher(work, [], scrape_configs=_targets_yaml()) as server:
        deadline = time.monotonic() + 60
        listed = EngineRef("listed", "hot", "http://127.0.0.2:1", selector='instance="engine-0000"')
        while True:  # the scrape manager takes the static targets in after its first discovery round
            try:
                engines = discover_engines(server.url, {"job": "vllm"}, [listed], timeout_s=10)
            except DiscoveryError:
                engines = []
            if len(engines) >= ENGINES or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        plan = Plan(engines=tuple(engines), state_dir=work / "state", prometheus=server.url, since_s=WINDOW_S,
                    history=False, request_timeout_s=10.0)
        before = _query_count(server.url)
        read_started = time.monotonic()
        results = asyncio.run(read_all(plan, None, clock=lambda: t1))
        read_s = time.monotonic() - read_started
        queries = _query_count(server.url) - before
        source = PrometheusSource(server.url, timeout_s=10.0)
        one_started = time.monotonic()
        for e in engines[:20]:
            for t, _ in points:
                source.snapshot_at(e.promql_selector, t)
        per_engine_s = (time.monotonic() - one_started) / 20 * len(engines)
        print(f"\n{len(engines)}-engine fleet: backfill {backfilled:.1f}s; the doctor's read_all through Prometheus "
              f"{read_s:.2f}s in {queries:g} queries (with every engine's direct /health, /version, /v1/models and "
              f"derive step); their snapshots one engine at a time would take ~{per_engine_s:.1f}s "
              f"(2 x {len(engines)} queries, extrapolated from 20 engines); this process's peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        yield Fleet(server.url, t1, points, {r.ref.name: r for r in results}, queries, engines)


def test_every_engine_is_discovered_and_read(fleet: Fleet) -> None:
    assert len(fleet.engines) == ENGINES  # 999 discovered beside the one listed (engine-0000), not "other"
    assert fleet.engines[0].name == "listed"
    roles = {e.name: e.role for e in fleet.engines}
    assert (roles["engine-0001"], roles["engine-0002"], roles["listed"]) == ("hot", "cold", "hot")  # label; listed
    assert len(fleet.results) == ENGINES
    for result in fleet.results.values():
        snaps = [s for s in result.reading.of("metrics") if s.error is None]
        assert len(snaps) == 2, (result.ref.name, [s.error for s in result.reading.of("metrics")])
        assert result.signals.values["qps"] is not None, result.signals.reasons.get("qps")


def test_queries_do_not_grow_with_the_engines(fleet: Fleet) -> None:
    # one snapshot query (a range query over both points in time) per ENGINES_PER_QUERY engines (a bounded
    # answer), not one per engine
    assert fleet.queries == -(-ENGINES // ENGINES_PER_QUERY) < ENGINES


def test_signals_are_what_was_backfilled_and_what_per_engine_reads_give(fleet: Fleet) -> None:
    source = PrometheusSource(fleet.url, timeout_s=10.0)
    for i in SAMPLED:
        name = "listed" if i == 0 else _instance(i)
        got = fleet.results[name].signals
        direct = [parse_metrics(_exposition(lines, i), t) for t, lines in fleet.points]
        _same_signals(got, _signals(name, direct, WINDOW_S))
        per_engine = [source.snapshot_at(f'instance="{_instance(i)}"', t) for t, _ in fleet.points]
        _same_signals(got, _signals(name, per_engine, WINDOW_S))
        _same_signals(_signals(name, per_engine, WINDOW_S), got)
        assert got.values["running"] == float(i % 7) and got.values["kv_cache_usage"] == (i % 100) / 100
    qps = [fleet.results[_instance(i)].signals.values["qps"] for i in (1, 999)]
    assert qps[0] is not None and qps[1] is not None and qps[1] / qps[0] == pytest.approx(1.999 / 1.001)


class RangeClient(FakeClient):
    """Answers the range query over two times with each time's rows as a matrix (what Prometheus answers)."""

    def __init__(self, at: dict[float, list[dict[str, Any]]]) -> None:
        super().__init__([])
        self.at = at
        self.range_params: list[dict[str, Any]] = []

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.queries.append(query)
        return [dict(r, metric=dict(r["metric"])) for r in self.at[float((params or {})["time"])]]

    def custom_query_range(self, query: str, start_time: Any, end_time: Any, step: str,
                           params: dict[str, Any] | None = None) -> Any:
        self.queries.append(query)
        self.range_params.append(dict(params or {}))
        series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for t, rows in sorted(self.at.items()):
            for r in rows:
                key = tuple(sorted(r["metric"].items()))
                series.setdefault(key, {"metric": dict(r["metric"]), "values": []})["values"].append([t, r["value"][1]])
        return list(series.values())


def test_two_points_are_one_range_query_with_the_same_snapshots_as_two_instant_ones() -> None:
    t0, t1 = 100.0004, 1000.0009  # asked to the millisecond, as the instant queries ask them
    at = {100.0: _rows("a:1", 3, 90.0) + _rows("b:1", 5, 91.0),
          1000.001: _rows("a:1", 4, 990.0) + _rows("b:1", 6, 991.0) + _rows("c:1", 1, 992.0)}
    selectors = {"a": 'instance="a:1"', "b": 'instance="b:1"', "c": 'instance="c:1"'}
    ranged = RangeClient(at)
    over = fleet_snapshots_over(PrometheusSource("http://prom:9090", client_factory=lambda url, t: ranged),
                                selectors, (t0, t1))
    assert len(ranged.queries) == 1
    assert ranged.range_params == [{"start": "100.000", "end": "1000.001", "step": "900.001"}]
    instant = RangeClient({100.0: at[100.0], 100.0004: at[100.0], 1000.001: at[1000.001], 1000.0009: at[1000.001]})
    one_by_one = [fleet_snapshots_at(PrometheusSource("http://prom:9090", client_factory=lambda url, t: instant),
                                     selectors, t) for t in (t0, t1)]
    for got, want in zip(over, one_by_one, strict=True):
        assert set(got) == set(want) == set(selectors)
        for name in selectors:
            if isinstance(want[name], PrometheusError):  # c had no series at t0: the same error
                assert isinstance(got[name], PrometheusError) and str(got[name]).split(" (query")[0] == \
                    str(want[name]).split(" (query")[0]
            else:
                assert got[name] == want[name], name
    assert isinstance(over[0]["c"], PrometheusError) and isinstance(over[1]["c"], MetricsSnapshot)
    with pytest.raises(ValueError, match="two increasing"):
        fleet_snapshots_over(PrometheusSource("http://prom:9090", client_factory=lambda url, t: ranged), selectors,
                             (t1, t0))
