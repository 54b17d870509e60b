"""`doctor diagnose`: read every engine twice over a short window (or from Prometheus) and report.

Exit codes (DESIGN.md): 0 ok, 1 warning, 2 critical, 3 the doctor could not do its job (bad flags
or config, nothing readable at all, its own --timeout). This module is the fast path cron runs: it
must not import textual or pandas (pandas only comes in with --prometheus history).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO

from doctor.durations import DurationError, parse_duration
from doctor.engines import EngineRef, EngineSpecError, engines_from_flags

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNUSABLE = 0, 1, 2, 3
READ_SCHEMA_VERSION = "1"


class UsageError(Exception):
    """Bad flags: exit 3 with the message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor diagnose", description=(
        "Read hot and cold vLLM engines (metrics, health, logs, GPUs, host) and report what they show. "
        "Exit 0 ok, 1 warning, 2 critical, 3 when the doctor could not do its job."))
    p.add_argument("--engine", action="append", default=[], metavar="NAME=URL",
                   help="an engine to read; NAME hot or cold is also its role (repeatable)")
    p.add_argument("--role", action="append", default=[], metavar="NAME=hot|cold", help="role of a named engine")
    p.add_argument("--log", action="append", default=[], metavar="NAME=PATH", help="the engine's log file")
    p.add_argument("--dcgm", action="append", default=[], metavar="NAME=URL",
                   help="dcgm-exporter /metrics URL for the engine's GPUs")
    p.add_argument("--gpus", action="append", default=[], metavar="NAME=0,1",
                   help="GPU indices the engine runs on (NVML on this host)")
    p.add_argument("--prometheus", metavar="URL", help="read history from this Prometheus server")
    p.add_argument("--sample", default="5s", help="window between the two direct reads (default 5s)")
    p.add_argument("--since", help="with --prometheus: judge this much history instead of sampling (e.g. 15m)")
    p.add_argument("--timeout", default="30s", help="give up after this long overall (default 30s)")
    p.add_argument("--request-timeout", default="5s", help="timeout of each HTTP read (default 5s)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--state-dir", type=Path, help="where history is kept (default $XDG_STATE_HOME/serving-doctor)")
    p.add_argument("--no-history", action="store_true", help="do not read or write the signal history")
    p.add_argument("--long-prompt-tokens", type=int, default=5120, help="hot/cold threshold (default 5120)")
    p.add_argument("--very-long-prompt-tokens", type=int, default=8192)
    return p


@dataclass
class Options:
    engines: list[EngineRef]
    sample_s: float
    since_s: float | None
    timeout_s: float
    request_timeout_s: float
    prometheus: str | None
    fmt: str
    state_dir: Path | None
    history: bool
    long_prompt_tokens: int
    very_long_prompt_tokens: int


def parse_options(argv: Sequence[str]) -> Options:
    ns = build_parser().parse_args(list(argv))
    try:
        engines = engines_from_flags(ns.engine, ns.role, ns.log, ns.dcgm, ns.gpus)
        sample_s = parse_duration(ns.sample)
        since_s = parse_duration(ns.since) if ns.since else None
        timeout_s = parse_duration(ns.timeout)
        request_timeout_s = parse_duration(ns.request_timeout)
    except (EngineSpecError, DurationError) as exc:
        raise UsageError(f"doctor diagnose: error: {exc}") from None
    if not engines:
        raise UsageError("doctor diagnose: error: name at least one engine with --engine NAME=URL")
    if since_s is not None and not ns.prometheus:
        raise UsageError("doctor diagnose: error: --since needs --prometheus URL (history comes from Prometheus)")
    if timeout_s <= 0:
        raise UsageError("doctor diagnose: error: --timeout must be > 0")
    if sample_s >= timeout_s:
        raise UsageError(
            f"doctor diagnose: error: --sample ({ns.sample}) must be shorter than --timeout ({ns.timeout})")
    return Options(engines, sample_s, since_s, timeout_s, min(request_timeout_s, timeout_s), ns.prometheus, ns.format,
                   ns.state_dir, not ns.no_history, ns.long_prompt_tokens, ns.very_long_prompt_tokens)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def collect(opts: Options, *, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Read every engine and build the report (reading half: no findings yet)."""
    from doctor.reading import read_all  # imported here: keeps `doctor diagnose --help` fast

    started = clock()
    engines = await read_all(opts, clock=clock)
    from doctor import __version__

    return {
        "schema_version": READ_SCHEMA_VERSION,
        "generated_at": iso(clock()),
        "doctor_version": __version__,
        "window_s": round(clock() - started, 3) if opts.since_s is None else opts.since_s,
        "engines": engines,
    }


def render_text(report: dict[str, Any], out: TextIO) -> None:
    """A short human summary per engine."""
    keys = ("qps", "generation_tokens_per_s", "running", "waiting", "batch_utilization", "kv_cache_usage",
            "prefix_cache_hit_rate", "p99_ttft_s", "p99_e2e_s", "p99_itl_s", "dram_utilization", "fb_used_ratio")
    print(f"serving-doctor {report['doctor_version']} at {report['generated_at']} "
          f"(window {report['window_s']}s)", file=out)
    for e in report["engines"]:
        sig = e["signals"]
        state = sig["health"] if e["reachable"] else "unreachable"
        print(f"\n{e['name']} ({e['role'] or 'no role'}) {e['url']}  health: {state}  "
              f"vLLM {e['version'] or '?'} -> profile {e['version_profile'] or '?'}", file=out)
        for k in keys:
            v = sig.get(k)
            text = "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
            why = "" if v is not None else f"   ({sig['reasons'].get(k, '')})"
            print(f"  {k:26} {text}{why}", file=out)
        for ev in e["events"][-5:]:
            print(f"  event {ev['kind']}: {ev['message'][:140]}", file=out)
        for err in e["errors"]:
            print(f"  ! {err}", file=out)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Entry point of `doctor diagnose`."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        opts = parse_options(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(exc, file=err)
        return EXIT_UNUSABLE
    try:
        report = asyncio.run(asyncio.wait_for(collect(opts), timeout=opts.timeout_s))
    except TimeoutError:
        print(f"doctor diagnose: gave up after --timeout {opts.timeout_s:g}s", file=err)
        return EXIT_UNUSABLE
    if opts.fmt == "json":
        json.dump(report, out, indent=2, sort_keys=False)
        out.write("\n")
    else:
        render_text(report, out)
    if not any(e["reachable"] for e in report["engines"]):
        print("doctor diagnose: no engine could be read", file=err)
        return EXIT_UNUSABLE
    return EXIT_OK
