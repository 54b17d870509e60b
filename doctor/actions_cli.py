"""`doctor actions`, `doctor approve ID`, `doctor reject ID`, `doctor rollback ID`: people decide and undo."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from doctor.jsonout import dumps
from doctor.secrets import add_daemon_client_args

if TYPE_CHECKING:
    from doctor.remedy.model import ActionRecord

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
    p.add_argument("--daemon", metavar="URL", help="ask a running `doctor serve` at URL (e.g. http://127.0.0.1:9361) "
                   "instead of reading the state directory")
    add_daemon_client_args(p)
    return p


def main_for(command: str, argv: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    from doctor.config import ConfigError, DoctorConfig, load_config

    try:
        ns = _parser(command).parse_args(list(argv))
    except SystemExit as exc:
        if exc.code in (0, None):
            return EXIT_OK
        print(exc, file=err)
        return EXIT_UNUSABLE
    who = f"person:{getpass.getuser()}"
    if ns.daemon:
        return _via_daemon(command, ns, who, out, err)
    try:
        config = load_config(ns.config) if ns.config else DoctorConfig()
    except ConfigError as exc:
        print(f"doctor {command}: {exc}", file=err)
        return EXIT_UNUSABLE
    from doctor.remedy.queue import ActionStore
    from doctor.state import default_state_dir

    state_dir = ns.state_dir or config.state_dir or default_state_dir()
    if command == "actions":
        store = ActionStore(state_dir)
        store.expire()
        return _print_actions(store.pending(), store.recent(20), ns.format, out)
    from doctor.remedy.decisions import decide
    from doctor.remedy.setup import remediator

    rem = remediator(config, state_dir, router_url=ns.router)
    decided = asyncio.run(decide(rem, command, ns.id, who, getattr(ns, "reason", "")))
    return _said(command, decided.result, decided.text, out, err)


def _said(command: str, result: str, text: str, out: TextIO, err: TextIO) -> int:
    if result == "ok":
        print(text, file=out)
        return EXIT_OK
    print(f"doctor {command}: {text}", file=err)
    return EXIT_UNUSABLE if result == "unknown" else EXIT_REFUSED


def _print_actions(pending: list[ActionRecord], recent: list[ActionRecord], fmt: str, out: TextIO) -> int:
    if fmt == "json":
        out.write(dumps({"pending": [r.report() for r in pending], "recent": [r.report() for r in recent]}, indent=2))
        out.write("\n")
        return EXIT_OK
    print(f"pending ({len(pending)}):", file=out)
    for r in pending:
        print(f"  {r.id}  {r.kind} on {r.target} {dict(r.action['params'])}  for {r.playbook} on {r.engine}", file=out)
    print(f"recent ({len(recent)}):", file=out)
    for r in recent:
        print(f"  {r.id}  {r.kind} on {r.target} -> {r.status}  {r.reason}", file=out)
    return EXIT_OK


def _via_daemon(command: str, ns: argparse.Namespace, who: str, out: TextIO, err: TextIO) -> int:
    """The same commands against a running `doctor serve` (its API), with the token from a file or the env."""
    from doctor.remedy.model import ActionRecord
    from doctor.serve.client import DaemonClient, DaemonError

    try:
        client = DaemonClient(ns.daemon, token_file=ns.token_file, ca_file=ns.ca_file)
        if command == "actions":
            doc = client.actions()
            return _print_actions([ActionRecord.from_dict(r) for r in doc["pending"]],
                                  [ActionRecord.from_dict(r) for r in doc["recent"]], ns.format, out)
        answer = client.decide(command, ns.id, who, getattr(ns, "reason", ""))
    except DaemonError as exc:
        print(f"doctor {command}: {exc}", file=err)
        return EXIT_UNUSABLE
    return _said(command, str(answer.get("result")), str(answer.get("text")), out, err)


def main(argv: Sequence[str] | None = None) -> int:
    return main_for("actions", sys.argv[1:] if argv is None else argv)
