"""Non-finite and out-of-range /metrics values are bad input: the signal is unknown with the reason, the engine's
errors say so, and `doctor diagnose --format json` stays strict JSON (no NaN/Infinity), through real HTTP."""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from collectors.scrape import parse_metrics
from doctor.diagnose import EXIT_UNUSABLE, main
from doctor.jsonout import dumps, finite
from tests.badinput.crafted import metrics_server

FIXTURES = Path(__file__).resolve().parents[1] / "collectors" / "fixtures"


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _set(text: str, family: str, value: str, *, le: str | None = None) -> str:
    """Replace the value of every series of `family` (only the bucket `le` when given)."""
    pattern = re.compile(rf"^({re.escape(family)}\{{[^}}]*\}}) \S+$", re.M)

    def sub(m: re.Match[str]) -> str:
        if le is not None and f'le="{le}"' not in m.group(1):
            return m.group(0)
        return f"{m.group(1)} {value}"

    out, n = pattern.subn(sub, text)
    assert n, family
    return out


def _crafted(name: str) -> str:
    text = (FIXTURES / name).read_text()
    text = _set(text, "vllm:num_requests_running", "+Inf")
    text = _set(text, "vllm:num_requests_waiting", "NaN")
    text = _set(text, "vllm:kv_cache_usage_perc", "1e999")  # too large for a float: read as inf
    text = _set(text, "vllm:generation_tokens_total", "-Inf")
    text = _set(text, "vllm:e2e_request_latency_seconds_bucket", "NaN", le="+Inf")
    return text


def test_parse_leaves_out_bad_values_and_keeps_the_inf_bucket_label() -> None:
    snap = parse_metrics(_crafted("metrics_0.33_b.txt"), 100.0)
    for name in ("running", "waiting", "kv_cache_usage"):
        assert name not in snap.gauges
    assert "generation_tokens" not in snap.counters
    assert "e2e" not in snap.histograms
    assert "not a finite number" in snap.rejected["running"] and "+Inf" in snap.rejected["running"]
    assert "NaN" in snap.rejected["waiting"]
    ttft = snap.histograms["ttft"]  # le="+Inf" is a label, not a value: still read
    assert math.isinf(ttft.bounds[-1]) and ttft.cumulative[-1] == 140.0
    for v in [*snap.gauges.values(), *snap.counters.values()]:
        assert math.isfinite(v)


@pytest.mark.parametrize(("line", "needle"), [
    ('vllm:kv_cache_usage_perc{engine="0"} 1.5\n', "outside 0..1"),
    ('vllm:num_requests_running{engine="0"} -3\n', "negative"),
    ('vllm:prompt_tokens_total{engine="0"} -1\n', "negative"),
])
def test_out_of_range_values_are_rejected(line: str, needle: str) -> None:
    snap = parse_metrics(line, 1.0)
    assert not snap.gauges and not snap.counters
    assert any(needle in why for why in snap.rejected.values())


def test_diagnose_json_is_strict_and_signals_unknown_with_reason(tmp_path: Path) -> None:
    bodies = [_crafted("metrics_0.33_a.txt"), _crafted("metrics_0.33_b.txt")]
    with metrics_server(lambda n: bodies[min(n, 1)]) as url:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--engine", f"hot={url}", "--sample", "0.2s", "--state-dir", str(tmp_path / "s"),
                     "--format", "json"], out=out, err=err)
    assert code != EXIT_UNUSABLE, err
    report = _strict(out.getvalue())
    engine = report["engines"][0]
    signals, reasons = engine["signals"], engine["signals"]["reasons"]
    for name, needle in (("running", "+Inf"), ("waiting", "NaN"), ("kv_cache_usage", "+Inf"),
                         ("generation_tokens_per_s", "-Inf"), ("p99_e2e_s", "NaN")):
        assert signals[name] is None, name
        assert needle in reasons[name] and "bad input" in reasons[name], (name, reasons[name])
    assert signals["p50_ttft_s"] is not None  # the histograms whose values are fine still read
    assert any("bad input" in e for e in engine["errors"])
    assert "Traceback" not in err


def test_strict_dumps_never_writes_nan() -> None:
    doc = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": ({"d": math.nan},)}
    text = dumps(doc)
    assert _strict(text) == {"a": None, "b": [None, None, 1.5], "c": [{"d": None}]}
    assert finite(2.0) == 2.0


def test_daemon_json_response_is_strict() -> None:
    from doctor.serve.app import JSONResponse

    body = JSONResponse({"x": math.nan, "y": [math.inf]}).body
    assert _strict(bytes(body).decode()) == {"x": None, "y": [None]}
