"""tools/reliability_report.py renders what was measured: a row whose tests did not all pass is NOT HELD (exit 1),
a crash in a fuzz target fails the page, a fuzz runner that did not run says so, and every row of the account
names tests that exist."""

from __future__ import annotations

import json
from pathlib import Path

from tests.chaos.cases import FAULTS, all_tests, registry
from tools.reliability_report import main, render

ROOT = Path(__file__).resolve().parents[2]


def _results(**tests: dict) -> dict:
    return {"tests": tests, **registry()}


def _all_passed() -> dict[str, dict]:
    out = {t: {"result": "passed", "seconds": 1.0} for t in all_tests()}
    for f in FAULTS:
        for t in f.tests:
            if t.startswith("tests/chaos/"):
                out[t]["outcome"] = {"kind": f.expected, "detail": f"held {f.id}", "lost": 0}
    return out


def test_everything_held_renders_every_row() -> None:
    text, ok = render(_results(**_all_passed()), {"metrics": {"inputs": 1200, "crashes": 0}})
    assert ok
    assert "| `metrics` | 1,200 | 0 |" in text
    for f in FAULTS:
        assert f.fault in text
        assert (f"held {f.id}" in text) == any(t.startswith("tests/chaos/") for t in f.tests)
    assert "**NOT HELD**" not in text and "**NO**" not in text


def test_a_failed_or_missing_test_is_not_held_and_a_crash_fails(tmp_path: Path) -> None:
    tests = _all_passed()
    failed = FAULTS[0].tests[0]
    tests[failed]["result"] = "failed"
    del tests[FAULTS[1].tests[0]]
    text, ok = render(_results(**tests), None, fuzz_why_not="no fuzzing here")
    assert not ok
    assert text.count("**NOT HELD**") == 2 and "**failed**" in text and "**not run**" in text
    assert "Not run: no fuzzing here." in text
    _, crashed = render(_results(**_all_passed()), {"wire": {"inputs": 10, "crashes": 1}})
    assert not crashed
    results = tmp_path / "r.json"
    results.write_text(json.dumps(_results(**tests)))
    assert main(["--results", str(results), "--out", str(tmp_path / "out.md")]) == 1
    assert "NOT HELD" in (tmp_path / "out.md").read_text()


def test_a_recorded_outcome_other_than_the_expected_one_is_not_held() -> None:
    tests = _all_passed()
    tests[FAULTS[0].tests[0]]["outcome"]["kind"] = "refused"
    text, ok = render(_results(**tests), None)
    assert not ok and "recorded refused, expected recovered" in text


def test_every_named_test_exists() -> None:
    for node in all_tests():
        path, name = node.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), node
