"""`doctor actions`, `doctor approve ID`, `doctor reject ID`, `doctor rollback ID`: people decide and undo."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

EXIT_OK, EXIT_REFUSED, EXIT_UNUSABLE = 0, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SystemExit(f"{self.prog}: error: {message}")


def _parser(command: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"doctor {command}", description={
        "actions": "List pending and recent actions.",
        "approve": "Approve a pending action and apply it now (guardrails still apply).",
        "reject": "Reject a pending action.",
        "rollback": "Undo an applied action with its inverse.",
    }[command])
    if command != "actions":
        p.add_argument("id", help="action id (a unique prefix is enough)")
    if command == "reject":
        p.add_argument("--reason", default="", help="why (kept in the audit log)")
    p.add_argument("--config", type=Path, help="doctor.toml (router, engines, state_dir)")
    p.add_argument("--state-dir", type=Path, help="default from the config, else $XDG_STATE_HOME/serving-doctor")
    p.add_argument("--router", help="router URL (default from the config)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    return p


def main_for(command: str, argv: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    from doctor.config import ConfigError, DoctorConfig, load_config
    from doctor.remedy.queue import ActionStore, AmbiguousAction, UnknownAction
    from doctor.remedy.setup import remediator
    from doctor.state import default_state_dir

    try:
        ns = _parser(command).parse_args(list(argv))
    except SystemExit as exc:
        if exc.code in (0, None):
            return EXIT_OK
        print(exc, file=err)
        return EXIT_UNUSABLE
    try:
        config = load_config(ns.config) if ns.config else DoctorConfig()
    except ConfigError as exc:
        print(f"doctor {command}: {exc}", file=err)
        return EXIT_UNUSABLE
    state_dir = ns.state_dir or config.state_dir or default_state_dir()
    store = ActionStore(state_dir)
    who = f"person:{getpass.getuser()}"
    try:
        if command == "actions":
            store.expire()
            pending, recent = store.pending(), store.recent(20)
            if ns.format == "json":
                json.dump({"pending": [r.report() for r in pending], "recent": [r.report() for r in recent]}, out,
                          indent=2)
                out.write("\n")
                return EXIT_OK
            print(f"pending ({len(pending)}):", file=out)
            for r in pending:
                print(f"  {r.id}  {r.kind} on {r.target} {dict(r.action['params'])}  for {r.playbook} on {r.engine}",
                      file=out)
            print(f"recent ({len(recent)}):", file=out)
            for r in recent:
                print(f"  {r.id}  {r.kind} on {r.target} -> {r.status}  {r.reason}", file=out)
            return EXIT_OK
        rem = remediator(config, state_dir, router_url=ns.router)
        if command == "reject":
            rec = store.reject(ns.id, who, ns.reason)
            rem.audit.write("rejected", rec, who=who)
            print(f"rejected {rec.id}", file=out)
            return EXIT_OK
        if command == "approve":
            rec = store.approve(ns.id, who)
            rem.audit.write("approved", rec, who=who)
            return asyncio.run(_apply_approved(rem, rec.id, who, out))
        rec = store.get(ns.id)
        if rec.status not in ("applied", "verified") or not rec.inverse:
            print(f"doctor rollback: {rec.id} is {rec.status}; only applied actions with an inverse can be undone",
                  file=err)
            return EXIT_REFUSED
        asyncio.run(rem.rollback(rec, f"rolled back by {who}"))
        print(f"{rec.id}: {rec.status} ({rec.reason})", file=out)
        return EXIT_OK if rec.status == "rolled_back" else EXIT_REFUSED
    except (UnknownAction, AmbiguousAction) as exc:
        print(f"doctor {command}: {exc}", file=err)
        return EXIT_UNUSABLE
    except ValueError as exc:  # e.g. approving an expired or already decided action
        print(f"doctor {command}: {exc}", file=err)
        return EXIT_REFUSED


async def _apply_approved(rem: object, record_id: str, who: str, out: TextIO) -> int:
    """Apply an approved action through the same guardrails as an automatic one."""
    from doctor.remedy.executor import Remediator, _action
    from doctor.remedy.planner import Planned, normalise, verify_spec

    assert isinstance(rem, Remediator)
    rec = rem.store.claim(record_id, who)
    if rec is None:
        print(f"{record_id}: already taken by another run", file=out)
        return EXIT_REFUSED
    action, target = normalise(_action(rec.action))
    from playbooks.model import Finding

    finding = Finding(rec.playbook, rec.engine, "warning", 0.5, rec.reason or "approved action", (), (action,),
                      "", onset=rec.created_at)
    planned = Planned(finding, action, target, verify_spec(rec.playbook, action.kind))
    decision = rem.guard.check(planned, engines_total=max(1, len(rem.ctx.engines)))
    if not decision.allowed:
        rem._end(rec, "refused", decision.reason or "refused by the guardrails", journal=False)
    else:
        await rem.apply(planned, rec)
    print(f"{rec.id}: {rec.status} ({rec.reason})", file=out)
    return EXIT_OK if rec.status == "applied" else EXIT_REFUSED


def main(argv: Sequence[str] | None = None) -> int:
    return main_for("actions", sys.argv[1:] if argv is None else argv)
