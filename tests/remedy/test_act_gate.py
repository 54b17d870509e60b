"""The remediator's gate (a standby replica of an elected pair, doctor.leader): asked right before each change, a
reason refuses the apply (recorded, the router untouched), defers a rollback and leaves the journal for later;
with the gate open the same remedy is applied. A real router on loopback, the real actuators."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx

from doctor.config import load_config
from doctor.remedy.setup import remediator
from playbooks.model import Action, Finding
from router.config import RouterConfig
from router.server import router_thread

TOKEN = "gate-test-router-token"
STANDBY = "standby: the leader is b/1-abc (etcd)"


def finding() -> Finding:
    action = Action("length_limit", "router", {"max_tokens": 8192}, inverse={"max_tokens": None}, risk="low")
    return Finding("long_prompt_share", "hot", "warning", 0.9, "long prompts on the hot path", (), (action,), "",
                   onset=time.time() - 120)


def test_a_closed_gate_refuses_defers_and_waits_an_open_one_acts(tmp_path: Path) -> None:
    (tmp_path / "router-token").write_text(TOKEN + "\n")
    (tmp_path / "router-token").chmod(0o600)
    with router_thread(RouterConfig(hot=["http://127.0.0.1:9"], cold=[], policy_file="", port=0),
                       token=TOKEN) as rt:
        (tmp_path / "doctor.toml").write_text(
            f'[doctor]\nstate_dir = "{tmp_path / "state"}"\nmode = "auto"\ncooldown_s = "1s"\n\n'
            f'[router]\nurl = "{rt.url}"\ntoken_file = "router-token"\n\n'
            '[[engines]]\nname = "hot"\nrole = "hot"\nurl = "http://127.0.0.1:9"\nmax_model_len = 16384\n')
        config = load_config(tmp_path / "doctor.toml")
        why: list[str | None] = [STANDBY]
        rem = remediator(config, tmp_path / "state", gate=lambda: why[0])

        def limit() -> object:
            r = httpx.get(rt.url + "/router/policy", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            return r.json()["length_limit_tokens"]

        refused = asyncio.run(rem.fix([finding()], {}))
        assert [(r.status, r.reason) for r in refused] == [("refused", STANDBY)] and limit() is None
        why[0] = None
        applied = asyncio.run(rem.fix([finding()], {}))
        assert [r.status for r in applied] == ["applied"] and limit() == 8192
        why[0] = STANDBY
        asyncio.run(rem.rollback(applied[0], "verification failed"))
        assert applied[0].status == "applied" and limit() == 8192  # deferred: nothing changed on standby
        assert asyncio.run(rem.reconcile({})) == []  # the journal's applied record waits for the next leader
        assert [r.id for r in rem.journal.unfinished()] == [applied[0].id]
        why[0] = None
        asyncio.run(rem.rollback(applied[0], "verification failed"))
        assert applied[0].status == "rolled_back" and limit() is None
    events = [json.loads(x)["event"] for x in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert events[:1] == ["refused"] and "rollback_deferred" in events
    assert events.index("begin") > events.index("refused")  # nothing begun while the gate was closed
