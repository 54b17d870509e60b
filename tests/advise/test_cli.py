"""`doctor advise` for users: bad input exits 3 with what is wrong, thin traffic withholds advice (exit 1), the
state directory's kept snapshots open the window. Real entry point; the network is the sim's (trials.sim_io)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from collectors.scrape import parse_metrics
from collectors.snapstore import SnapshotStore
from doctor.advise.cli import main
from doctor.cli import main as doctor_main
from sim.workload import WorkloadSpec, generate
from trials.scenario import ScenarioHarness
from trials.sim_io import SimNetwork, engine_url


def _run(argv: list[str], **io_: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err, **io_)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("argv", "says"), [
    ([], "name at least one engine"),
    (["--engine", "gt"], "--engine"),
    (["--engine", "gt=http://gt.sim", "--chunked-grid", "maybe"], "--chunked-grid"),
    (["--engine", "gt=http://gt.sim", "--max-num-seqs-grid", "8,x"], "--max-num-seqs-grid"),
    (["--engine", "gt=http://gt.sim", "--preset", "b200-1t"], "unknown preset"),
    (["--engine", "gt=http://gt.sim", "--sample", "soon"], "soon"),
    (["--config", "/nonexistent/doctor.toml"], "doctor.toml"),
])
def test_bad_input_exits_3_naming_it(argv: list[str], says: str) -> None:
    code, out, err = _run(argv)
    assert code == 3 and says in err and not out and "Traceback" not in err


def test_wired_into_the_doctor_cli(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        doctor_main(["advise", "--help"])
    assert exc.value.code == 0 and "doctor advise" in capsys.readouterr().out


def test_unreachable_engine_cannot_be_advised() -> None:
    h = ScenarioHarness()
    net = SimNetwork(h)  # nothing registered: connection refused

    async def wait(s: float) -> None:
        h.run_for(s)

    code, out, _ = _run(["--engine", "gt=http://gt.sim", "--sample", "10s", "--format", "json"],
                        transport=net.transport(), clock=lambda: h.now, sleep=wait)
    doc = json.loads(out)
    assert code == 3 and "read(s) of /metrics" in doc["engines"][0]["error"]


def test_thin_traffic_from_kept_snapshots_withholds_advice(tmp_path: Path) -> None:
    h = ScenarioHarness(seed=2)
    h.add_engine("gt", ["m", "--preset", "a100-13b"])
    h.load(generate(WorkloadSpec(rate_qps=0.5, duration_s=120, seed=1)))
    net = SimNetwork(h)
    net.register(engine_url("gt"), "gt")
    store = SnapshotStore(tmp_path / "snapshots.jsonl", clock=lambda: h.now)
    for _ in range(12):  # what `doctor diagnose` runs on cron leave behind
        h.run_for(5.0)
        store.save("gt", engine_url("gt"), [parse_metrics(h.metrics_text("gt"), h.now)])
    h.run_for(5.0)
    code, out, err = _run(["--engine", f"gt={engine_url('gt')}", "--state-dir", str(tmp_path)],
                          transport=net.transport(), clock=lambda: h.now)
    assert code == 1, err
    assert "advice withheld" in out and "fewer than 200" in out
    assert "workload over 60s" in out  # the kept snapshots opened the window; one read closed it
