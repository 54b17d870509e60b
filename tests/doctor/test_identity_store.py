"""The identity store: engines' /version and /v1/models remembered between runs, in identity.json."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from collectors.types import MetricsSnapshot, Sample
from doctor.identity_store import FILE, IdentityStore, process_start_of
from doctor.state import StateDir

URL = "http://10.0.0.1:8000"
T0 = 1_700_000_000.0
START = 1_699_990_000.0


def _answers(t: float = T0, *, models_error: str | None = None) -> list[Sample]:
    return [Sample("health", "e", t, data={"status": 200}),
            Sample("version", "e", t, data={"version": "0.10.2"}),
            Sample("models", "e", t, error=models_error) if models_error else
            Sample("models", "e", t, data={"ids": ["m"], "max_model_len": 8192})]


def _kept(tmp_path: Path) -> IdentityStore:
    store = IdentityStore(StateDir(tmp_path))
    store.keep("e", URL, _answers(), T0, START)
    store.save()
    return IdentityStore(StateDir(tmp_path))


def test_fresh_entry_is_recalled_for_the_same_process(tmp_path: Path) -> None:
    again = _kept(tmp_path)
    got = again.recall("e", URL, T0 + 600, process_start=START)
    assert got is not None and [(s.source, dict(s.data), s.timestamp) for s in got] == [
        ("version", {"version": "0.10.2"}, T0 + 600), ("models", {"ids": ["m"], "max_model_len": 8192}, T0 + 600)]
    assert again.recall("e", URL, T0 + 600, check_start=False) is not None
    assert again.problems == []


def test_expired_moved_or_restarted_engines_are_read_again(tmp_path: Path) -> None:
    again = _kept(tmp_path)
    assert again.recall("e", URL, T0 + 3600, process_start=START) is None  # an hour old
    assert again.recall("e", URL, T0 - 5, process_start=START) is None  # from the future (clock moved)
    assert again.recall("e", "http://10.0.0.2:8000", T0 + 1, process_start=START) is None
    assert again.recall("e", URL, T0 + 1, process_start=START + 30) is None  # restarted
    assert again.recall("e", URL, T0 + 1, process_start=None) is None  # no start time to tell by
    assert again.recall("other", URL, T0 + 1, process_start=START) is None


def test_failed_answers_are_not_kept_and_forget_the_entry(tmp_path: Path) -> None:
    store = IdentityStore(StateDir(tmp_path))
    store.keep("e", URL, _answers(), T0, START)
    store.keep("e", URL, _answers(models_error="/v1/models: timed out"), T0 + 5, START)
    assert store.recall("e", URL, T0 + 6, process_start=START) is None
    store.keep("e", URL, _answers(), T0, None)  # no process start time: nothing to hold it to
    assert "e" not in store.entries


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '{"e": 3}', "\xff\xfe"])
def test_a_corrupted_file_is_ignored_with_a_problem_and_replaced(tmp_path: Path, body: str) -> None:
    (tmp_path / FILE).write_bytes(body.encode("utf-8", "surrogateescape") if body != "\xff\xfe" else b"\xff\xfe")
    store = IdentityStore(StateDir(tmp_path))
    assert store.entries == {} and len(store.problems) == 1 and FILE in store.problems[0]
    assert store.recall("e", URL, T0, process_start=START) is None
    store.keep("e", URL, _answers(), T0, START)
    store.save()
    assert IdentityStore(StateDir(tmp_path)).recall("e", URL, T0 + 1, process_start=START) is not None


def test_the_file_is_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _kept(state)
    assert stat.S_IMODE((state / FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_an_unwritable_directory_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = IdentityStore(StateDir(blocker / "state"))  # a directory under a file cannot be made
    assert store.problems and "unreadable" in store.problems[0]
    store.keep("e", URL, _answers(), T0, START)
    store.save()
    assert any("cannot write" in p for p in store.problems)


def test_process_start_comes_from_the_latest_metrics() -> None:
    def snap(start: float) -> MetricsSnapshot:
        return MetricsSnapshot(timestamp=T0, counters={}, gauges={"process_start_time": start}, histograms={},
                               info={}, names_seen=frozenset(), units={}, stats_enabled=True, rejected={})
    samples = [Sample("metrics", "e", T0 - 900, metrics=snap(START)),
               Sample("metrics", "e", T0, metrics=snap(START + 7)), Sample("health", "e", T0, data={"status": 200})]
    assert process_start_of(samples) == START + 7
    assert process_start_of([Sample("metrics", "e", T0, error="no series")]) is None


# ------------------------------------------------------------------ in a Prometheus-mode read (fakes for both)

def _read_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starts: list[float],
                down_second: bool = False) -> list[list[str]]:
    """Two Prometheus-mode reads of one engine whose process started at starts[run]; the paths each run asked."""
    import asyncio
    import functools

    import httpx

    import collectors.promfleet
    from doctor.engines import EngineRef
    from doctor.plan import Plan
    from doctor.reading import EngineReading, _read_prometheus

    asked: list[list[str]] = []
    answers = {"/health": (200, {}), "/version": (200, {"version": "0.10.2"}),
               "/v1/models": (200, {"data": [{"id": "m", "max_model_len": 8192}]})}

    def handler(request: httpx.Request) -> httpx.Response:
        asked[-1].append(request.url.path)
        if down_second and len(asked) == 2:
            raise httpx.ConnectError("connection refused", request=request)
        status, body = answers[request.url.path]
        return httpx.Response(status, json=body)

    ref = EngineRef("e", "hot", URL, selector='instance="10.0.0.1:8000"')
    plan = Plan(engines=(ref,), state_dir=tmp_path, prometheus="http://prom:9090", since_s=900.0,
                history=False, transport=httpx.MockTransport(handler))
    out = []
    for run, start in enumerate(starts):
        snap = MetricsSnapshot(timestamp=T0, counters={}, gauges={"process_start_time": start}, histograms={},
                               info={}, names_seen=frozenset(), units={}, stats_enabled=True, rejected={})
        def fleet(source: object, selectors: object, times: tuple[float, ...],
                  s: MetricsSnapshot = snap) -> list[dict[str, object]]:
            return [{"e": s} for _ in times]
        monkeypatch.setattr(collectors.promfleet, "fleet_snapshots_over", fleet)
        asked.append([])
        reading = EngineReading("e", "hot", URL)
        now = T0 + 60 * run
        assert asyncio.run(_read_prometheus(plan, {"e": reading}, clock=functools.partial(float, now))) is None
        if down_second and run == 1:
            assert reading.last_ok("health") is None and reading.last_ok("version") is None
        else:
            assert {s.source for s in reading.samples} == {"metrics", "health", "version", "models"}
            assert reading.last_ok("version") is not None and reading.last_ok("models") is not None
        out.append(sorted(asked[-1]))
    return out


def test_a_second_run_reads_only_health(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _read_twice(tmp_path, monkeypatch, [START, START]) == [
        ["/health", "/v1/models", "/version"], ["/health"]]


def test_a_restarted_engine_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _read_twice(tmp_path, monkeypatch, [START, START + 100]) == [
        ["/health", "/v1/models", "/version"], ["/health", "/v1/models", "/version"]]


def test_a_restarted_engine_that_is_down_is_asked_only_for_health(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert _read_twice(tmp_path, monkeypatch, [START, START + 100], down_second=True) == [
        ["/health", "/v1/models", "/version"], ["/health"]]
    assert "e" not in IdentityStore(StateDir(tmp_path)).entries  # forgotten: read again once it answers


def test_a_down_engine_loses_its_remembered_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _read_twice(tmp_path, monkeypatch, [START, START], down_second=True) == [
        ["/health", "/v1/models", "/version"], ["/health"]]
    assert "e" not in IdentityStore(StateDir(tmp_path)).entries
