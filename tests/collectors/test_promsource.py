"""The Prometheus source: PromQL per version profile, snapshots and frames (fake client), and the same
signals through a real Prometheus (Debian's package, on loopback) as through direct scraping of sim engines.
"""

from __future__ import annotations

import asyncio
import math
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_client.parser import text_string_to_metric_families

from collectors.derive import derive_metrics_signals
from collectors.httpsource import read_metrics
from collectors.names import PROFILE_NAMES, detect_profile
from collectors.promsource import (
    FAMILIES_RE,
    PrometheusError,
    PrometheusSource,
    promql,
    promql_signals,
    snapshot_query,
)
from collectors.scrape import has_engine_label, parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot
from sim.harness import Harness
from sim.testing import ALL_GRAPHED, engine_thread
from sim.workload import RequestSpec

ROOT = Path(__file__).resolve().parents[2]
SEL = 'instance="127.0.0.1:8000"'

# ------------------------------------------------------------------------------------------ PromQL


def test_promql_follows_the_profile_renames() -> None:
    assert promql("0.33", "kv_cache_usage", SEL, "5m") == \
        'max({__name__=~"vllm[:_]kv_cache_usage_perc", instance="127.0.0.1:8000"})'
    assert "gpu_cache_usage_perc" in promql("0.8", "kv_cache_usage", SEL, "5m")
    assert "gpu_cache_usage_perc" in promql("0.6", "kv_cache_usage", SEL, "5m")
    assert "gpu_cache_usage_perc" in promql("0.10-v0", "kv_cache_usage", SEL, "5m")
    assert "kv_cache_usage_perc" in promql("0.10", "kv_cache_usage", SEL, "5m")

    assert promql("0.33", "p99_itl_s", SEL, "1m") == (
        'histogram_quantile(0.99, sum by (le) (rate({__name__=~"vllm[:_]inter_token_latency_seconds_bucket", '
        'instance="127.0.0.1:8000"}[1m])))')
    for profile in ("0.6", "0.8", "0.10-v0"):
        assert "time_per_output_token_seconds_bucket" in promql(profile, "p99_itl_s", SEL, "1m")
    for profile in ("0.10", "0.11", "0.12", "0.33"):
        assert "inter_token_latency_seconds_bucket" in promql(profile, "p50_itl_s", SEL, "1m")

    assert promql("0.8", "prefix_cache_hit_rate", SEL, "5m") == (
        'sum(rate({__name__=~"vllm[:_]gpu_prefix_cache_hits_total", instance="127.0.0.1:8000"}[5m])) / '
        'sum(rate({__name__=~"vllm[:_]gpu_prefix_cache_queries_total", instance="127.0.0.1:8000"}[5m]))')
    assert "(vllm[:_]prefix_cache_hits_total" not in promql("0.20", "prefix_cache_hit_rate", SEL, "5m")
    assert 'vllm[:_]prefix_cache_hits_total"' in promql("0.20", "prefix_cache_hit_rate", SEL, "5m")
    assert promql("0.6", "prefix_cache_hit_rate", SEL, "5m") == \
        'max({__name__=~"vllm[:_]gpu_prefix_cache_hit_rate", instance="127.0.0.1:8000"} >= 0)'


def test_promql_main_signals() -> None:
    assert promql("0.33", "qps", SEL, "1m") == \
        'sum(rate({__name__=~"vllm[:_]request_success_total", instance="127.0.0.1:8000"}[1m]))'
    assert promql("0.33", "generation_tokens_per_s", "", "30s") == \
        'sum(rate({__name__=~"vllm[:_]generation_tokens_total"}[30s]))'
    assert promql("0.33", "preemptions_per_s", SEL, "5m").startswith(
        'sum(rate({__name__=~"vllm[:_]num_preemptions_total"')
    assert promql("0.33", "waiting", "{" + SEL + "}", "5m") == \
        'sum({__name__=~"vllm[:_]num_requests_waiting", instance="127.0.0.1:8000"})'
    assert promql("0.33", "p95_ttft_s", SEL, "5m").startswith(
        'histogram_quantile(0.95, sum by (le) (rate({__name__=~"vllm[:_]time_to_first_token_seconds_bucket"')
    abort = promql("0.33", "abort_rate", SEL, "5m")
    assert 'finished_reason="abort"' in abort and "or vector(0)" in abort
    error = promql("0.33", "error_rate", SEL, "5m")
    assert 'status="5xx"' in error and 'handler=~"/v1/.*"' in error
    assert promql("0.33", "uptime_s", SEL, "5m") == \
        'time() - max(process_start_time_seconds{instance="127.0.0.1:8000"})'


def test_promql_spellings() -> None:
    assert promql("0.33", "running", SEL, "1m", spelling="colon") == \
        'sum(vllm:num_requests_running{instance="127.0.0.1:8000"})'
    assert promql("0.33", "running", "", "1m", spelling="underscore") == "sum(vllm_num_requests_running{})"


def _exposed_names(profile: str) -> set[str]:
    """Sample names a sim engine of this profile exposes (histogram families with all three suffixes)."""
    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED, "--vllm-version", profile])
    names: set[str] = set()
    for family in text_string_to_metric_families(h.metrics_text("e")):
        if family.type == "histogram":
            names |= {family.name + s for s in ("_bucket", "_sum", "_count")}
        elif family.type == "counter":
            names.add(family.name + "_total")
        else:
            names.add(family.name)
    return names


_VLLM_REF = re.compile(r'__name__=~"vllm\[:_\](\w+)"')
_PLAIN_REF = re.compile(r"(?<![\w:\]\"])([a-zA-Z_][\w:]*)\{")


@pytest.mark.parametrize("profile", [p for p in PROFILE_NAMES if p not in ("0.26", "0.32")])
def test_promql_names_exist_in_each_profile(profile: str) -> None:
    """Every family a profile's PromQL names is one that profile's /metrics exposes (checked on the sim)."""
    exposed = _exposed_names(profile)
    for signal in promql_signals(profile):
        query = promql(profile, signal, SEL, "5m")
        refs = [f"vllm:{base}" for base in _VLLM_REF.findall(query)] + _PLAIN_REF.findall(query)
        assert refs, query
        for ref in refs:
            assert ref in exposed, f"{profile} {signal}: {ref} is not exposed ({query})"


def test_promql_rejects_what_it_cannot_express() -> None:
    with pytest.raises(ValueError, match=r"unknown version profile '0\.7'"):
        promql("0.7", "qps", SEL, "5m")
    with pytest.raises(ValueError, match=r"no PromQL for signal 'dram_utilization'"):
        promql("0.33", "dram_utilization", SEL, "5m")
    with pytest.raises(ValueError, match=r"no PromQL for signal 'uptime_s' in profile 0\.6"):
        promql("0.6", "uptime_s", SEL, "5m")  # V0's multiprocess server has no process_* metrics
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        promql("0.33", "qps", SEL, "5 minutes")
    with pytest.raises(ValueError, match="spelling"):
        promql("0.33", "qps", SEL, "5m", spelling="dots")


def test_snapshot_query_shape() -> None:
    q = snapshot_query(SEL)
    assert q.startswith(f'{{__name__=~"{FAMILIES_RE}", instance="127.0.0.1:8000"}} or label_replace(')
    assert "vllm:num_requests_running|" in q and "vllm_e2e_request_latency_seconds_bucket|" in q
    assert 'timestamp({__name__=~"vllm[:_]num_requests_running", instance="127.0.0.1:8000"})' in q


# ------------------------------------------------------------------------- source with a fake client


class FakeClient:
    """Answers like PrometheusConnect, from canned results; records the calls."""

    def __init__(self, result: Any = None, exc: BaseException | None = None) -> None:
        self.result = result if result is not None else []
        self.exc = exc
        self.calls: list[tuple[str, Any]] = []

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.calls.append((query, params))
        if self.exc is not None:
            raise self.exc
        return self.result

    def custom_query_range(self, query: str, start_time: Any, end_time: Any, step: str,
                           params: dict[str, Any] | None = None) -> Any:
        self.calls.append((query, (start_time, end_time, step)))
        if self.exc is not None:
            raise self.exc
        return self.result


def _source(client: FakeClient) -> PrometheusSource:
    return PrometheusSource("http://prom.example:9090/", timeout_s=2.0, client_factory=lambda url, t: client)


def _as_prometheus_result(text: str, instance: str, scrape_t: float, *,
                          asked: str = FAMILIES_RE) -> list[dict[str, Any]]:
    """What Prometheus answers to the snapshot query for an engine that served `text` (`asked`: the names)."""
    rows: list[dict[str, Any]] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not re.fullmatch(asked, s.name):
                continue
            metric = {"__name__": s.name, **s.labels, "job": "vllm", "instance": instance}
            rows.append({"metric": metric, "value": [scrape_t + 0.5, repr(float(s.value))]})
    rows.append({"metric": {"job": "vllm", "instance": instance, "doctor_scrape_time": "1"},
                 "value": [scrape_t + 0.5, str(scrape_t)]})
    return rows


def _same_snapshot(direct: MetricsSnapshot, prom: MetricsSnapshot, *, exact_process: bool = True,
                   names_decide: bool = True) -> None:
    def keep(d: Mapping[str, float]) -> dict[str, float]:
        return {k: v for k, v in d.items() if exact_process or not k.startswith("process_")}

    assert keep(prom.counters) == keep(direct.counters)
    assert keep(prom.gauges) == keep(direct.gauges)
    assert set(prom.gauges) == set(direct.gauges) and set(prom.counters) == set(direct.counters)
    assert prom.histograms == direct.histograms
    assert prom.info == direct.info
    assert prom.units == direct.units
    assert prom.stats_enabled == direct.stats_enabled
    # Prometheus stores samples, not families: a V0 family declared without samples is unseen there.
    assert prom.names_seen <= direct.names_seen
    for version in (None, "0.10.2") if names_decide else ("0.10.2",):
        assert detect_profile(version, prom.names_seen, has_engine_label=has_engine_label(prom)) == \
            detect_profile(version, direct.names_seen, has_engine_label=has_engine_label(direct))


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_snapshot_at_maps_like_a_direct_scrape(profile: str) -> None:
    """Only the sample names the query asks for (FAMILIES_RE) reach the snapshot: leaving out a family
    derive.py or the profile detection reads makes the snapshot, its signals or its detection differ."""
    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED, "--vllm-version", profile])
    h.load([RequestSpec(index=i, arrival_s=0.01 * i, prompt_tokens=100 + 40 * i, output_tokens=10 + i, long=False)
            for i in range(12)])
    h.drain()
    text = h.metrics_text("e")
    client = FakeClient(_as_prometheus_result(text, "10.0.0.1:8000", 1_700_000_000.25))
    snap = _source(client).snapshot_at('instance="10.0.0.1:8000"', 1_700_000_003.0)
    assert snap.timestamp == 1_700_000_000.25  # the scrape time, not the query time
    direct = parse_metrics(text, snap.timestamp)
    # 0.10-v0 declares http_requests before it has samples: Prometheus stores none, so without /version the
    # names alone say 0.6 there (any query; `full` below agrees). Everything else maps alike.
    _same_snapshot(direct, snap, names_decide=profile != "0.10-v0")
    # Every series the engine has (as the query asked before it was narrowed) gives the same signals.
    full = _source(FakeClient(_as_prometheus_result(text, "10.0.0.1:8000", 1_700_000_000.25, asked=r"(?!.+_created).+"))
                   ).snapshot_at('instance="10.0.0.1:8000"', 1_700_000_003.0)
    assert full.names_seen > snap.names_seen
    early = parse_metrics(text, snap.timestamp - 60.0)  # a read a minute before: rates of 0, gauges, quantiles
    assert derive_metrics_signals(early, snap, EngineConfigView()) == \
        derive_metrics_signals(early, full, EngineConfigView())
    for version in (None, "0.10.2"):
        assert detect_profile(version, snap.names_seen, has_engine_label=has_engine_label(snap)) == \
            detect_profile(version, full.names_seen, has_engine_label=has_engine_label(full))
    assert snap.counters["request_success{length}"] + snap.counters.get("request_success{stop}", 0) == 12
    (query, params), = client.calls
    assert query == snapshot_query('instance="10.0.0.1:8000"') and params == {"time": "1700000003.000"}


def test_snapshot_at_refuses_several_targets_and_empty_answers() -> None:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
    rows = _as_prometheus_result(text, "a:1", 100.0) + _as_prometheus_result(text, "b:1", 100.0)
    with pytest.raises(PrometheusError, match=r"matches 2 scrape targets \(vllm/a:1, vllm/b:1\); select one"):
        _source(FakeClient(rows)).snapshot_at('job="vllm"', 101.0)
    with pytest.raises(PrometheusError, match=r"prom.example:9090: no series at t=101.000 \(query: .*instance=\"x\""):
        _source(FakeClient([])).snapshot_at('instance="x"', 101.0)
    only_stamp = [r for r in _as_prometheus_result(text, "a:1", 100.0) if "doctor_scrape_time" in r["metric"]]
    with pytest.raises(PrometheusError, match="no engine series"):
        _source(FakeClient(only_stamp)).snapshot_at('instance="a:1"', 101.0)


@pytest.mark.parametrize(("exc", "message"), [
    (requests.exceptions.ConnectionError("Max retries exceeded ... Connection refused"),
     r"Prometheus at http://prom.example:9090 is unreachable \(connection refused\) \(query: up\)"),
    (requests.exceptions.ReadTimeout("read timed out"),
     r"Prometheus at http://prom.example:9090 did not answer within 2s \(query: up\)"),
    (PrometheusApiClientException(
        "HTTP Status Code 400 (b'{\"status\":\"error\",\"errorType\":\"bad_data\",\"error\":\"invalid parameter "
        "\\\\\"query\\\\\": 1:4: parse error: unexpected character\"}')"),
     r"rejected the query: HTTP 400: invalid parameter \"query\": 1:4: parse error: unexpected character "
     r"\(query: up\)"),
    (PrometheusApiClientException("HTTP Status Code 404 (b'404 page not found\\n')"),
     r"rejected the query: HTTP 404: b'404 page not found\\n' \(query: up\)"),
    (ValueError("Expecting value: line 1 column 1"), r"an answer that is not the Prometheus API's"),
])
def test_errors_name_the_url_and_the_query(exc: BaseException, message: str) -> None:
    with pytest.raises(PrometheusError, match=message):
        _source(FakeClient(exc=exc)).instant("up")


def test_bad_results_and_arguments() -> None:
    with pytest.raises(PrometheusError, match="unexpected result shape"):
        _source(FakeClient([{"metric": {}}])).instant("up")
    assert _source(FakeClient([])).instant("up", allow_empty=True) == []
    assert _source(FakeClient([{"metric": {"a": "1"}, "value": [1, "NaN"]}])).instant("up")[0][1] != 0.0
    with pytest.raises(PrometheusError, match="must look like http://host:9090"):
        PrometheusSource("prom:9090", timeout_s=1)
    with pytest.raises(PrometheusError, match="timeout must be positive"):
        PrometheusSource("http://prom:9090", timeout_s=0)


def test_range_frame_is_wide_by_series() -> None:
    result = [
        {"metric": {}, "values": [[100, "1"], [115, "2.5"]]},
        {"metric": {"__name__": "up", "instance": "a:1", "job": "j"}, "values": [[115, "1"]]},
    ]
    client = FakeClient(result)
    frame = _source(client).range_frame("sum(up)", 100.0, 130.0, 15)
    assert list(frame.columns) == ["value", 'up{instance="a:1",job="j"}']
    assert list(frame.index) == [100.0, 115.0] and frame.index.name == "timestamp"
    assert frame["value"].tolist() == [1.0, 2.5]
    assert math.isnan(frame.iloc[0, 1]) and frame.iloc[1, 1] == 1.0
    (_, (start, end, step)), = client.calls
    assert (start.timestamp(), end.timestamp(), step) == (100.0, 130.0, "15s")
    with pytest.raises(PrometheusError, match=r"no series between .* \(query: sum\(up\)\)"):
        _source(FakeClient([])).range_frame("sum(up)", 100.0, 130.0, "15s")
    with pytest.raises(PrometheusError, match="is before start"):
        _source(FakeClient([])).range_frame("sum(up)", 130.0, 100.0, "15s")


def test_import_pulls_in_neither_pandas_nor_the_client() -> None:
    code = ("import sys, collectors.promsource; "
            "bad = [m for m in ('pandas', 'numpy', 'prometheus_api_client', 'requests') if m in sys.modules]; "
            "print(', '.join(bad)); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"imported at module level: {proc.stdout} {proc.stderr}"


# -------------------------------------------------------------------- no Prometheus / hung Prometheus


def test_missing_prometheus_is_a_clear_error_quickly() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = PrometheusSource(f"http://127.0.0.1:{port}", timeout_s=2.0)
    started = time.monotonic()
    with pytest.raises(PrometheusError, match=rf"127.0.0.1:{port} is unreachable .*\(query: .*instance=\"h:1\""):
        src.snapshot_at('instance="h:1"', time.time())
    assert time.monotonic() - started < 10.0  # no retry storm (the client's default retries take ~7 s)


def test_hung_prometheus_times_out() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        src = PrometheusSource(f"http://127.0.0.1:{port}", timeout_s=0.3)
        with pytest.raises(PrometheusError, match=r"did not answer within 0.3s \(query: up\)"):
            src.instant("up")


# ----------------------------------------------------------------- real Prometheus scraping sim engines

HOT_ARGV = ["m", *ALL_GRAPHED, "--time-scale", "0.1", "--vllm-version", "0.33", "--max-num-seqs", "2",
            "--max-model-len", "32768", "--sim-fault-endpoint"]
COLD_ARGV = ["m", *ALL_GRAPHED, "--time-scale", "0.1", "--vllm-version", "0.8"]
CONFIGS = {"hot": EngineConfigView(max_num_seqs=2, max_num_batched_tokens=8192),
           "cold": EngineConfigView(max_num_seqs=256, max_num_batched_tokens=8192)}
PROFILES = {"hot": "0.33", "cold": "0.8"}
LONG_REQUESTS = 5


@dataclass
class Observed:
    """What the integration fixture saw: per engine, direct and Prometheus snapshots at two points."""

    prometheus: Any  # conftest's PrometheusServer
    source: PrometheusSource
    instances: dict[str, str]
    started: float
    direct: dict[str, list[MetricsSnapshot]] = field(default_factory=dict)
    prom: dict[str, list[MetricsSnapshot]] = field(default_factory=dict)
    quiet_since: list[float] = field(default_factory=list)


async def _short_load(urls: list[str], per_engine: int) -> None:
    async with httpx.AsyncClient(timeout=60.0) as client:
        async def one(url: str, i: int) -> None:
            r = await client.post(f"{url}/v1/completions",
                                  json={"model": "m", "prompt": "hello " * (20 + 37 * i), "max_tokens": 4 + i % 13})
            assert r.status_code == 200, r.text
        await asyncio.gather(*(one(url, i) for url in urls for i in range(per_engine)))


def _direct(url: str) -> MetricsSnapshot:
    async def read() -> MetricsSnapshot:
        async with httpx.AsyncClient() as client:
            sample = await read_metrics(client, "e", url, timeout_s=10.0)
        assert sample.error is None and sample.metrics is not None, sample.error
        return sample.metrics
    return asyncio.run(read())


def _start_long_requests(url: str) -> list[threading.Thread]:
    """Requests that will still be in flight when the engine is hung (ended by engine death at teardown)."""
    def run() -> None:
        with suppress(httpx.HTTPError):
            httpx.post(f"{url}/v1/completions", timeout=120.0,
                       json={"model": "m", "prompt": "x " * 50, "max_tokens": 30000, "ignore_eos": True})
    threads = [threading.Thread(target=run, daemon=True, name="long-request") for _ in range(LONG_REQUESTS)]
    for t in threads:
        t.start()
    return threads


def _wait_until(predicate: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory, prometheus_launcher: Any) -> Iterator[Observed]:
    """Two sim engines (0.33 hot, 0.8 cold) scraped every second by a real Prometheus; two quiet points.

    Point 0: after a burst of short requests has finished. Point 1: after a second burst, with the hot
    engine hung while long requests are in flight (running/waiting/KV usage non-zero and frozen). At
    both points nothing changes between scrapes, so direct and Prometheus snapshots must agree exactly.
    """
    with ExitStack() as stack:
        hot = stack.enter_context(engine_thread(HOT_ARGV))
        cold = stack.enter_context(engine_thread(COLD_ARGV))
        urls = {"hot": hot.url, "cold": cold.url}
        instances = {name: url.removeprefix("http://") for name, url in urls.items()}
        server = stack.enter_context(prometheus_launcher(tmp_path_factory.mktemp("prometheus"),
                                                         list(instances.values())))
        obs = Observed(server, PrometheusSource(server.url, timeout_s=10.0), instances, time.time())
        threads: list[threading.Thread] = []

        def kill_hot() -> None:
            with suppress(httpx.HTTPError):
                httpx.post(f"{hot.url}/sim/fault", json={"fault": "engine-death"}, timeout=10.0)
            for t in threads:
                t.join(timeout=20.0)
        stack.callback(kill_hot)

        for point in range(2):
            asyncio.run(_short_load(list(urls.values()), per_engine=24))
            if point == 1:
                threads += _start_long_requests(hot.url)
                _wait_until(lambda: _direct(hot.url).gauges.get("running") == 2.0, "2 running on the hot engine")
                r = httpx.post(f"{hot.url}/sim/fault", json={"fault": "hang"}, timeout=10.0)
                assert r.status_code == 200, r.text
            quiet = time.time()
            obs.quiet_since.append(quiet)
            server.wait_scrapes_after(list(instances.values()), quiet, count=2)
            for name, url in urls.items():
                direct = _direct(url)
                obs.direct.setdefault(name, []).append(direct)
                obs.prom.setdefault(name, []).append(
                    obs.source.snapshot_at(f'instance="{instances[name]}"', direct.timestamp))
        yield obs


@pytest.mark.parametrize("engine", ["hot", "cold"])
def test_prometheus_snapshots_equal_direct_scrapes(observed: Observed, engine: str) -> None:
    for point, (direct, prom) in enumerate(zip(observed.direct[engine], observed.prom[engine], strict=True)):
        # The newest scrape at or before the direct read, and after the engine went quiet.
        assert observed.quiet_since[point] < prom.timestamp <= direct.timestamp + 0.001
        # process_* are the sim's model of the API server process: quiet too, so exact as well.
        _same_snapshot(direct, prom)
    hung = observed.prom[engine][1]
    if engine == "hot":
        assert hung.gauges["running"] == 2.0 and hung.gauges["waiting"] >= 1.0 and hung.gauges["kv_cache_usage"] > 0


def test_fleet_read_equals_per_engine_reads(observed: Observed) -> None:
    """One query for both engines (collectors.promfleet) gives each the snapshots, so the Signals, that a query
    of its own gives."""
    from collectors.promfleet import fleet_snapshots_at

    selectors = {name: f'instance="{inst}"' for name, inst in observed.instances.items()}
    grouped: dict[str, list[MetricsSnapshot]] = {name: [] for name in selectors}
    single: dict[str, list[MetricsSnapshot]] = {name: [] for name in selectors}
    for point in range(2):
        t = observed.direct["hot"][point].timestamp
        for name, snap in fleet_snapshots_at(observed.source, selectors, t).items():
            assert isinstance(snap, MetricsSnapshot), snap
            grouped[name].append(snap)
            single[name].append(observed.source.snapshot_at(selectors[name], t))
    for name in selectors:
        for g, one in zip(grouped[name], single[name], strict=True):
            assert g == one
        vg, _ = derive_metrics_signals(grouped[name][0], grouped[name][1], CONFIGS[name])
        vs, _ = derive_metrics_signals(single[name][0], single[name][1], CONFIGS[name])
        assert vg.keys() == vs.keys() and vg["qps"] is not None
        for key, value in vs.items():
            assert vg[key] == (value if value is None else pytest.approx(value, rel=1e-12, abs=1e-12)), key


RATES = {"qps", "prompt_tokens_per_s", "generation_tokens_per_s", "preemptions_per_s", "process_cpu"}


@pytest.mark.parametrize("engine", ["hot", "cold"])
def test_prometheus_signals_agree_with_direct_signals(observed: Observed, engine: str) -> None:
    d0, d1 = observed.direct[engine]
    p0, p1 = observed.prom[engine]
    vd, _ = derive_metrics_signals(d0, d1, CONFIGS[engine])
    vp, rp = derive_metrics_signals(p0, p1, CONFIGS[engine])
    dt_d, dt_p = d1.timestamp - d0.timestamp, p1.timestamp - p0.timestamp
    finished = vp["qps"] * dt_p if vp["qps"] is not None else None
    assert finished is not None and (finished == pytest.approx(24) if engine == "cold" else finished >= 24)
    # Window tolerance: the two windows may differ by up to a scrape interval at each end (plus slack).
    tolerance = (2 * observed.prometheus.scrape_interval_s + 1.0) / dt_p
    for name in vd:
        a, b = vd[name], vp[name]
        assert (a is None) == (b is None), f"{name}: direct {a} vs Prometheus {b} ({rp.get(name)})"
        if a is None or b is None:
            continue
        if name in RATES:  # the same increase over a slightly different interval
            assert a * dt_d == pytest.approx(b * dt_p, rel=1e-9, abs=1e-9), name
            assert b == pytest.approx(a, rel=tolerance, abs=1e-9), name
        elif name == "uptime_s":  # read at the direct read's time vs at the scrape's
            assert a - b == pytest.approx(d1.timestamp - p1.timestamp, abs=1e-3)
        else:  # gauges, quantiles, ratios, shares: the same numbers
            assert b == pytest.approx(a, rel=1e-9, abs=1e-12), name
    for name in ("qps", "generation_tokens_per_s", "p99_ttft_s", "p99_e2e_s", "p99_itl_s", "running", "kv_cache_usage"):
        assert vp[name] is not None, name


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_prometheus_accepts_every_query(observed: Observed, profile: str) -> None:
    for signal in promql_signals(profile):
        for spelling in ("either", "colon"):
            observed.source.instant(promql(profile, signal, 'instance="127.0.0.1:1"', "1m", spelling=spelling),
                                    allow_empty=True)


@pytest.mark.parametrize("engine", ["hot", "cold"])
def test_queries_give_values_for_the_engines_own_profile(observed: Observed, engine: str) -> None:
    sel = f'instance="{observed.instances[engine]}"'
    t = observed.prom[engine][1].timestamp
    window = f"{math.ceil(t - observed.quiet_since[0]) + 2}s"
    for signal in promql_signals(PROFILES[engine]):
        rows = observed.source.instant(promql(PROFILES[engine], signal, sel, window), t)
        assert len(rows) == 1, (signal, rows)
    generated = observed.source.instant(
        f'increase({{__name__=~"vllm[:_]generation_tokens_total", {sel}}}[{window}])', t)
    assert generated[0][1] > 0


def test_range_frame_from_prometheus(observed: Observed) -> None:
    sel = f'instance="{observed.instances["cold"]}"'
    query = promql("0.8", "generation_tokens_per_s", sel, "3s")
    # The range must hold several scrapes whatever the machine's speed: wait for six more of the cold engine.
    observed.prometheus.wait_scrapes_after([observed.instances["cold"]], observed.started, count=6)
    frame = observed.source.range_frame(query, observed.started, time.time(), 1)
    assert list(frame.columns) == ["value"] and len(frame) >= 3
    assert frame["value"].max() > 0
    raw = observed.source.range_frame(f'{{__name__=~"vllm[:_]num_requests_running", {sel}}}',
                                      observed.started, time.time(), "1s")
    assert len(raw.columns) == 1 and "engine=\"0\"" in raw.columns[0]
