"""`doctor tui`: attach to `doctor serve` (`--daemon URL`), or run the doctor's cycle here over `--config` /
`--engine` (standalone); `--once` prints one text frame and exits. Exit 3 when it cannot start (bad flags or
config, an unreadable token file, no state to show)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import getpass
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from doctor.secrets import SecretFileError, add_daemon_client_args, client_verify, daemon_token
from tui.source import DaemonSource, Source, SourceError

EXIT_OK, EXIT_UNUSABLE = 0, 3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor tui", description=(
        "The on-call engineer's screen: the fleet, findings with evidence, actions to approve, reject or roll "
        "back, and a latency heatmap per engine. Attaches to `doctor serve`, or runs the doctor's cycle itself."))
    p.add_argument("--daemon", metavar="URL", help="attach to doctor serve at URL (e.g. http://127.0.0.1:9361)")
    add_daemon_client_args(p)
    p.add_argument("--config", type=Path, help="standalone: doctor.toml (engines, router, mode, state_dir)")
    p.add_argument("--engine", action="append", default=[], metavar="NAME=URL", help="standalone: an engine "
                   "(repeatable; NAME hot or cold is also its role)")
    p.add_argument("--role", action="append", default=[], metavar="NAME=hot|cold")
    p.add_argument("--router", metavar="URL", help="standalone: the hot/cold router (its policy is shown on top)")
    p.add_argument("--state-dir", type=Path, help="standalone: the state directory (default the config's, else "
                   "$XDG_STATE_HOME/serving-doctor)")
    p.add_argument("--timeline", type=Path, metavar="FILE", help="a sim scenario's timeline (written by `doctor "
                   "sim scenario` and `doctor demo`): baseline -> incident -> fix on the fleet screen")
    p.add_argument("--refresh", default="1s", help="between reads of the state (default 1s; + and - change it)")
    p.add_argument("--once", action="store_true", help="print one text frame and exit")
    p.add_argument("--read-only", action="store_true", help="no key that changes anything (approve, reject, "
                   "rollback)")
    p.add_argument("--theme", help="a Textual theme (e.g. textual-light, ansi-dark, nord; ctrl+p lists them)")
    p.add_argument("--who", default=None, help="your name in the audit log (default: the login name)")
    p.add_argument("--width", type=int, default=120, help="with --once: the frame's width (default 120)")
    return p


def _standalone(ns: argparse.Namespace, refresh_s: float) -> Source:
    from doctor.config import ConfigError, DoctorConfig, load_config
    from doctor.config_merge import merge_flags
    from doctor.engines import EngineSpecError, engines_from_flags
    from doctor.state import default_state_dir
    from tui.local import LocalSource, local_plan

    try:
        config = load_config(ns.config) if ns.config else DoctorConfig()
        config = merge_flags(config, engines_from_flags(ns.engine, ns.role))
    except (ConfigError, EngineSpecError) as exc:
        raise UsageError(f"doctor tui: {exc}") from None
    if not config.engines:
        raise UsageError("doctor tui: name the daemon with --daemon URL, or engines with --config or "
                         "--engine NAME=URL")
    if ns.router:
        config = dataclasses.replace(config, router=dataclasses.replace(config.router, url=ns.router))
    state_dir = ns.state_dir or config.state_dir or default_state_dir()
    return LocalSource(config, local_plan(config, Path(state_dir), refresh_s=refresh_s))


def source_of(ns: argparse.Namespace, refresh_s: float) -> Source:
    """The daemon's API when --daemon is given, else the cycle in this process."""
    if ns.daemon:
        if ns.config or ns.engine:
            raise UsageError("doctor tui: --daemon reads the daemon's engines; leave out --config and --engine")
        try:
            token, verify = daemon_token(ns.token_file), client_verify(ns.ca_file)
        except SecretFileError as exc:
            raise UsageError(f"doctor tui: {exc}") from None
        return DaemonSource(ns.daemon, token, verify=verify)
    return _standalone(ns, refresh_s)


async def _once(source: Source, width: int, color: bool, timeline: Path | None = None) -> str:
    from tui.frame import frame
    from tui.model import parse_state
    from tui.timeline import read_timeline

    try:
        doc = await source.state()
    finally:
        await source.aclose()
    return frame(parse_state(doc), source=source.label, now=time.time(), width=width, color=color,
                 timeline=read_timeline(timeline) if timeline is not None else None)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Entry point of `doctor tui`."""
    from doctor.durations import DurationError, parse_duration

    out, err = out or sys.stdout, err or sys.stderr
    try:
        ns = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
        try:
            refresh_s = parse_duration(ns.refresh)
        except DurationError as exc:
            raise UsageError(f"doctor tui: --refresh: {exc}") from None
        if refresh_s <= 0:
            raise UsageError("doctor tui: --refresh must be > 0")
        source = source_of(ns, refresh_s)
    except UsageError as exc:
        print(exc, file=err)
        return EXIT_UNUSABLE
    if ns.once:
        color = out.isatty() and "NO_COLOR" not in os.environ
        try:
            print(asyncio.run(_once(source, ns.width, color, ns.timeline)), file=out, end="")
        except SourceError as exc:
            print(f"doctor tui: {exc}", file=err)
            return EXIT_UNUSABLE
        return EXIT_OK
    from tui.app import DoctorApp

    app = DoctorApp(source, refresh_s=refresh_s, read_only=ns.read_only, who=ns.who or _login(), timeline=ns.timeline)
    if ns.theme:
        if ns.theme not in app.available_themes:
            print(f"doctor tui: --theme {ns.theme!r}: expected one of {', '.join(sorted(app.available_themes))}",
                  file=err)
            return EXIT_UNUSABLE
        app.theme = ns.theme
    if not (sys.stdin.isatty() and out.isatty()):
        print("doctor tui: no terminal here; use --once for a text frame", file=err)
        return EXIT_UNUSABLE
    app.run()
    return EXIT_OK


def _login() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "someone"
