"""`doctor diagnose` as cron uses it: config errors, the lock, --fail-on, and no traceback anywhere."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from doctor.diagnose import EXIT_OK, EXIT_UNUSABLE, EXIT_WARNING, main
from doctor.state import StateDir
from sim.testing import ALL_GRAPHED, engine_thread

FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(args, out=out, err=err), out.getvalue(), err.getvalue()


def test_bad_config_names_file_key_and_line(tmp_path: Path) -> None:
    cfg = tmp_path / "doctor.toml"
    cfg.write_text('[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:1"\n\n[thresholds.kv_presure]\n'
                   'kv_usage_ratio = 0.8\n')
    code, out, err = _run(["--config", str(cfg)])
    assert code == EXIT_UNUSABLE and out == ""
    assert f"{cfg}:5: thresholds.kv_presure: unknown playbook id 'kv_presure'; did you mean 'kv_pressure'?" in err
    cfg.write_text('[[engines]]\nname = "hot"\nurl = "http://127.0.0.1:1"\nmax_num_seqs = "eight"\n')
    code, _, err = _run(["--config", str(cfg)])
    assert code == EXIT_UNUSABLE and "engines[0].max_num_seqs" in err and ":4:" in err
    r = subprocess.run([sys.executable, "-m", "doctor.cli", "diagnose", "--config", str(tmp_path / "missing.toml")],
                       capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == EXIT_UNUSABLE and "missing.toml" in r.stderr and "Traceback" not in r.stderr


def test_config_drives_engines_thresholds_and_fail_on(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST, "--max-num-seqs", "2"]) as hot:
        cfg = tmp_path / "doctor.toml"
        cfg.write_text(f'[doctor]\nstate_dir = "{tmp_path / "state"}"\nsample_s = "0.5s"\n\n'
                       f'[[engines]]\nname = "hot"\nurl = "{hot.url}"\nmax_num_seqs = 2\n\n'
                       "[thresholds.queue_pressure]\nwaiting = 0\n")
        client = httpx.Client(timeout=60)
        # Keep the engine busy so requests wait behind its 2 slots while the doctor reads it.
        import threading

        def load() -> None:
            for _ in range(3):
                for _ in range(6):
                    threading.Thread(target=lambda: client.post(hot.url + "/v1/completions", json={
                        "prompt": "x " * 50, "max_tokens": 400, "ignore_eos": True})).start()

        load()
        # An earlier cron run saw the queue build up 5 minutes ago (the `for` duration spans runs).
        import time

        StateDir(tmp_path / "state").save_json(
            "playbooks.json", {"queue_pressure|hot": {"onset": time.time() - 300, "last": time.time() - 60}})
        code, out, _ = _run(["--config", str(cfg), "--format", "json"])
        report = json.loads(out)
        assert report["engines"][0]["name"] == "hot"
        fired = {f["playbook"] for f in report["findings"]}
        assert "queue_pressure" in fired, (fired, report["engines"][0]["signals"]["waiting"])
        assert code == EXIT_WARNING
        code, out, _ = _run(["--config", str(cfg), "--format", "json", "--fail-on", "critical"])
        assert json.loads(out)["status"] == "warning" and code == EXIT_OK


def test_overlapping_runs_are_refused(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    with state.lock("diagnose"):
        code, _, err = _run(["--engine", "hot=http://127.0.0.1:1", "--state-dir", str(tmp_path / "state"),
                             "--sample", "0.1s"])
    assert code == EXIT_UNUSABLE
    assert "another run is in progress" in err and str(os.getpid()) in err
