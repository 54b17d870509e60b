"""`doctor diagnose --fix` end to end: a real router and a real sim engine on loopback, the real actuators.

The finding used is p99_spike over a configured SLO (critical; first remedy: an emergency length limit at
the router), with its `for` duration already satisfied by an earlier run's state.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from collectors.types import Signals
from doctor.actions_cli import main_for
from doctor.config import load_config
from doctor.diagnose import EXIT_CRITICAL, main
from doctor.remedy.setup import remediator
from doctor.state import StateDir
from router.config import RouterConfig
from router.server import router_thread
from sim.testing import ALL_GRAPHED, engine_thread

TOKEN = "fix-loop-secret-token"
FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]


@dataclass
class World:
    engine_url: str
    router_url: str
    config: Path
    state: Path

    def policy(self) -> dict:
        return httpx.get(self.router_url + "/router/policy", headers={"Authorization": f"Bearer {TOKEN}"}).json()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("ROUTER_POLICY_TOKEN", TOKEN)
    with engine_thread(["m", *FAST, "--max-model-len", "16384"]) as hot:
        cfg = RouterConfig(hot=[hot.url], cold=[], policy_file="", port=0)
        with router_thread(cfg, token=TOKEN) as rt:
            stop = threading.Event()

            def traffic() -> None:
                """Steady requests, so every diagnose window has latency to judge: 9000-token documents, the
                long prompts that make the emergency length limit the spike's first remedy (a window in which
                none finished leaves the share unknown, which keeps the limit first too)."""
                with httpx.Client(timeout=30) as client:
                    while not stop.is_set():
                        client.post(hot.url + "/v1/completions", json={"prompt": "a " * 9000, "max_tokens": 5})
                        stop.wait(0.05)

            sender = threading.Thread(target=traffic, daemon=True)
            sender.start()
            try:
                yield World(hot.url, rt.url, tmp_path / "doctor.toml", tmp_path / "state")
            finally:
                stop.set()
                sender.join(10)


def _config(w: World, mode: str, cooldown: str = "15m") -> None:
    w.config.write_text(
        f'[doctor]\nstate_dir = "{w.state}"\nmode = "{mode}"\nsample_s = "0.3s"\ncooldown_s = "{cooldown}"\n'
        "min_requests = 1\n\n"  # a 0.3 s window holds a request or two: enough for what this tests
        f'[router]\nurl = "{w.router_url}"\n\n'
        f'[[engines]]\nname = "hot"\nurl = "{w.engine_url}"\nmax_model_len = 16384\n'
        '[engines.slo]\np99_ttft_s = 0.0001\n')
    # An earlier cron run saw the spike a few minutes ago: its `for` duration has passed.
    StateDir(w.state).save_json("playbooks.json", {"p99_spike|hot": {"onset": time.time() - 300,
                                                                     "last": time.time() - 30}})


def _diagnose(w: World, *extra: str) -> tuple[int, dict]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(w.config), "--format", "json", *extra], out=out, err=err)
    assert out.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())


def test_observe_and_dry_run_change_nothing(world: World) -> None:
    before = world.policy()
    _config(world, "observe")
    _, report = _diagnose(world, "--fix")
    assert report["findings"][0]["playbook"] == "p99_spike" and report["actions"] == []
    _config(world, "dry-run")
    _, report = _diagnose(world, "--fix")
    [action] = report["actions"]
    assert action["action"] == "length_limit" and action["status"] == "planned" and "dry-run" in action["reason"]
    after = world.policy()
    assert after["version"] == before["version"] and after["length_limit_tokens"] is None


def test_auto_applies_within_bounds_and_audits_without_secrets(world: World) -> None:
    _config(world, "auto")
    code, report = _diagnose(world, "--fix", "--verify-wait", "0")
    [action] = report["actions"]
    assert action["status"] == "applied", action
    policy = world.policy()
    assert policy["length_limit_tokens"] == 8192
    assert policy["length_limit_expires_at"] > time.time() + 3000  # a 3 a.m. limit cannot outlive the incident
    assert code == EXIT_CRITICAL  # applied, not yet verified: the finding still stands
    audit = (world.state / "audit.jsonl").read_text()
    assert '"event": "begin"' in audit and '"event": "applied"' in audit
    assert TOKEN not in audit and TOKEN not in json.dumps(report)
    # The same action is in its cooldown on the next run: refused with the reason, nothing changes.
    _, again = _diagnose(world, "--fix", "--verify-wait", "0")
    assert any(a["status"] == "refused" and "cooldown" in (a["reason"] or "") for a in again["actions"]), again


def test_a_limit_already_in_force_is_not_applied_again(world: World) -> None:
    _config(world, "auto", cooldown="0")
    _diagnose(world, "--fix", "--verify-wait", "0")
    policy = world.policy()
    assert policy["length_limit_tokens"] == 8192
    # No cooldown holds it back now, and the spike still stands: re-applying would only push the expiry out.
    _, again = _diagnose(world, "--fix", "--verify-wait", "0")
    # (The first run's action may be listed too, once this run has judged it: verified, well inside its window.)
    [action] = [a for a in again["actions"] if a["status"] != "verified"]
    assert action["status"] == "refused" and "already refuses prompts over 8192" in action["reason"], action
    assert world.policy()["version"] == policy["version"]


def test_failed_verification_rolls_back_and_escalates(world: World) -> None:
    _config(world, "auto")
    _diagnose(world, "--fix", "--verify-wait", "0")
    assert world.policy()["length_limit_tokens"] == 8192
    now = [time.time()]
    rem = remediator(load_config(world.config), world.state, environ={"ROUTER_POLICY_TOKEN": TOKEN})
    rem.clock = lambda: now[0]
    rem.guard.clock = rem.clock
    [rec] = rem.journal.unfinished()
    signal = rec.verify["signal"]  # what the limit must improve (the engine's queue)
    unchanged = Signals("hot", 5.0, "ok", 200, {signal: max(1.0, rec.before.get(signal) or 0.0)})

    async def reread() -> dict[str, Signals]:
        return {"hot": unchanged}

    now[0] += 600  # past the verification window
    asyncio.run(rem.verify([rec], reread, wait_s=0))
    assert rec.status == "rolled_back", rec
    assert world.policy()["length_limit_tokens"] is None
    events = [json.loads(line)["event"] for line in (world.state / "audit.jsonl").read_text().splitlines()]
    assert "rolled_back" in events and "escalated" in events
    assert rem.journal.unfinished() == []


@pytest.mark.parametrize("crash_at", ["after-begin", "after-apply"])
def test_kill_9_between_journal_steps_then_restart_is_consistent(world: World, crash_at: str) -> None:
    _config(world, "auto")
    env = {**os.environ, "ROUTER_POLICY_TOKEN": TOKEN, "SERVING_DOCTOR_CRASH_AT": crash_at,
           "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "doctor.cli", "diagnose", "--config", str(world.config), "--fix",
           "--verify-wait", "0", "--format", "json"]
    killed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    journal = (world.state / "journal.jsonl").read_text()
    assert '"begin"' in journal
    env.pop("SERVING_DOCTOR_CRASH_AT")
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode in (0, 1, 2) and "Traceback" not in again.stderr, again.stderr
    policy = world.policy()
    assert policy["length_limit_tokens"] == 8192 and policy["length_limit_expires_at"] is not None
    rem = remediator(load_config(world.config), world.state, environ={"ROUTER_POLICY_TOKEN": TOKEN})
    # Nothing is left half done: whatever is still open is applied and waits for its verification.
    assert all(r.status == "applied" for r in rem.journal.unfinished())
    events = [json.loads(line)["event"] for line in (world.state / "audit.jsonl").read_text().splitlines()]
    assert events[0] == "begin" and "reconciled" in events


def test_approve_mode_queues_then_a_person_approves_and_rolls_back(world: World) -> None:
    _config(world, "approve")
    _, report = _diagnose(world, "--fix")
    [action] = report["actions"]
    assert action["status"] == "pending" and world.policy()["length_limit_tokens"] is None
    out = io.StringIO()
    assert main_for("actions", ["--config", str(world.config)], out=out) == 0
    assert action["id"] in out.getvalue()
    out = io.StringIO()
    assert main_for("approve", [action["id"][:10], "--config", str(world.config)], out=out) == 0, out.getvalue()
    assert world.policy()["length_limit_tokens"] == 8192
    out = io.StringIO()
    assert main_for("rollback", [action["id"], "--config", str(world.config)], out=out) == 0, out.getvalue()
    assert world.policy()["length_limit_tokens"] is None
