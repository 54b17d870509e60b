"""`doctor diagnose`: read every engine, run the playbooks, report findings with evidence.

Exit codes (DESIGN.md): 0 ok, 1 warning, 2 critical, 3 the doctor could not do its job (bad flags
or config, nothing readable at all, its own --timeout, another run holding the lock). This is the
fast path cron runs: it must not import textual or pandas (pandas only comes with --prometheus).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from doctor.durations import DurationError, parse_duration
from doctor.engines import EngineRef, EngineSpecError, engines_from_flags

if TYPE_CHECKING:
    from doctor.pipeline import PlaybookSettings
    from doctor.plan import Plan

EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNUSABLE = 0, 1, 2, 3
FAIL_ON = ("warning", "critical", "never")


class UsageError(Exception):
    """Bad flags or config: exit 3 with the message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor diagnose", description=(
        "Read hot and cold vLLM engines (metrics, health, logs, GPUs, host), run the playbooks and report "
        "findings with evidence. Exit 0 ok, 1 warning, 2 critical, 3 when the doctor could not do its job."))
    p.add_argument("--config", type=Path, help="doctor.toml: engines, roles, thresholds, SLOs, templates")
    p.add_argument("--engine", action="append", default=[], metavar="NAME=URL",
                   help="an engine to read; NAME hot or cold is also its role (repeatable)")
    p.add_argument("--role", action="append", default=[], metavar="NAME=hot|cold", help="role of a named engine")
    p.add_argument("--log", action="append", default=[], metavar="NAME=PATH", help="the engine's log file")
    p.add_argument("--dcgm", action="append", default=[], metavar="NAME=URL",
                   help="dcgm-exporter /metrics URL for the engine's GPUs")
    p.add_argument("--gpus", action="append", default=[], metavar="NAME=0,1",
                   help="GPU indices the engine runs on (NVML on this host)")
    p.add_argument("--prometheus", metavar="URL", help="read history from this Prometheus server")
    p.add_argument("--discover", action="append", default=[], metavar="LABEL=VALUE",
                   help="with --prometheus: its active targets with this label are engines too (repeatable; "
                   "adds to the config's [prometheus] discover), e.g. job=vllm")
    p.add_argument("--router", metavar="URL", help="the hot/cold router in front of the engines (its /metrics)")
    p.add_argument("--sample", help="between the two direct reads of each engine (default 5s); a first run judges "
                   "only this")
    p.add_argument("--window", help="what each run judges: rates, shares and percentiles over this long, opened by "
                   "earlier runs' reads kept in the state directory (default 1m, like PromQL's rate(...[1m]))")
    p.add_argument("--since", help="with --prometheus: judge this much history instead of sampling (e.g. 15m)")
    p.add_argument("--timeout", help="give up after this long overall (default 30s)")
    p.add_argument("--request-timeout", help="timeout of each HTTP read (default 5s)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--fail-on", choices=FAIL_ON, default="warning",
                   help="lowest severity that makes the exit code non-zero (default warning)")
    p.add_argument("--state-dir", type=Path, help="history, playbook state and the lock "
                   "(default $XDG_STATE_HOME/serving-doctor)")
    p.add_argument("--no-history", action="store_true", help="do not read or write the state directory's history "
                   "(engines' /version and /v1/models are still remembered there: identity.json)")
    p.add_argument("--fix", action="store_true",
                   help="apply the first remedy of each finding as the mode allows (observe, dry-run, approve, auto)")
    p.add_argument("--yes", action="store_true", help="with --fix in approve mode: approve from this terminal")
    p.add_argument("--mode", choices=("observe", "dry-run", "approve", "auto"),
                   help="with --fix: the remediation mode for this run (default: the config's, else observe); "
                   "a playbook's own mode in the config still holds")
    p.add_argument("--verify-wait", help="with --fix: wait up to this long to verify (default from config, "
                   "bounded by --timeout; the rest is verified by the next run)")
    p.add_argument("--long-prompt-tokens", type=int, help="hot/cold threshold (default 5120)")
    p.add_argument("--very-long-prompt-tokens", type=int, help="very long prompts (default 8192)")
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
    fail_on: str = "warning"
    window_s: float = 60.0
    min_requests: int = 10
    settings: PlaybookSettings | None = None
    router: str | None = None
    fix: bool = False
    yes: bool = False
    verify_wait_s: float = 0.0
    discover: dict[str, str] = dataclasses.field(default_factory=dict)  # target labels (doctor.discover)
    max_concurrent_reads: int = 64


def parse_options(argv: Sequence[str]) -> Options:
    """Flags (and the config file) into Options; UsageError names what is wrong."""
    ns = build_parser().parse_args(list(argv))
    settings: Any = None
    defaults: dict[str, Any] = {}
    if ns.config is not None:
        from doctor.config import ConfigError, load_config

        try:
            settings = load_config(ns.config)
        except ConfigError as exc:
            raise UsageError(f"doctor diagnose: {exc}") from None
        defaults = {"sample_s": settings.sample_s, "timeout_s": settings.timeout_s, "window_s": settings.window_s,
                    "min_requests": settings.min_requests,
                    "prometheus": settings.prometheus_url, "state_dir": settings.state_dir,
                    "long_prompt_tokens": settings.long_prompt_tokens,
                    "very_long_prompt_tokens": settings.very_long_prompt_tokens,
                    "request_timeout_s": settings.request_timeout_s, "router": settings.router.url,
                    "discover": dict(settings.prometheus_discover),
                    "max_concurrent_reads": settings.max_concurrent_reads}
    try:
        flag_engines = engines_from_flags(ns.engine, ns.role, ns.log, ns.dcgm, ns.gpus)
        engines = _merge_engines(settings, flag_engines)
        sample_s = parse_duration(ns.sample or defaults.get("sample_s", "5s"))
        window_s = parse_duration(ns.window or defaults.get("window_s", "1m"))
        since_s = parse_duration(ns.since) if ns.since else None
        timeout_s = parse_duration(ns.timeout or defaults.get("timeout_s", "30s"))
        request_timeout_s = parse_duration(ns.request_timeout or defaults.get("request_timeout_s", "5s"))
    except (EngineSpecError, DurationError) as exc:
        raise UsageError(f"doctor diagnose: error: {exc}") from None
    discover = {**defaults.get("discover", {}), **_labels(ns.discover)}
    if not engines and not discover:
        raise UsageError("doctor diagnose: error: name at least one engine with --engine NAME=URL (or --config, "
                         "or --discover LABEL=VALUE with --prometheus)")
    prometheus = ns.prometheus or defaults.get("prometheus")
    if discover and not prometheus:
        raise UsageError("doctor diagnose: error: --discover needs --prometheus URL (the targets are its)")
    if since_s is not None and not prometheus:
        raise UsageError("doctor diagnose: error: --since needs --prometheus URL (history comes from Prometheus)")
    if timeout_s <= 0:
        raise UsageError("doctor diagnose: error: --timeout must be > 0")
    if window_s <= 0:
        raise UsageError("doctor diagnose: error: --window must be > 0")
    if sample_s >= timeout_s:
        raise UsageError(f"doctor diagnose: error: --sample ({sample_s:g}s) must be shorter than "
                         f"--timeout ({timeout_s:g}s)")
    state_dir = ns.state_dir or (Path(defaults["state_dir"]) if defaults.get("state_dir") else None)
    try:
        verify_wait_s = parse_duration(ns.verify_wait) if ns.verify_wait else float(
            getattr(settings, "verify_s", 0.0) if ns.fix else 0.0)
    except DurationError as exc:
        raise UsageError(f"doctor diagnose: error: {exc}") from None
    if ns.yes and not ns.fix:
        raise UsageError("doctor diagnose: error: --yes only makes sense with --fix")
    if ns.long_prompt_tokens:  # the hot/cold boundary: one setting, for the shares and the playbooks alike
        from doctor.config import DoctorConfig

        settings = dataclasses.replace(settings if settings is not None else DoctorConfig(),
                                       long_prompt_tokens=ns.long_prompt_tokens)
    if ns.mode is not None:
        if not ns.fix:
            raise UsageError("doctor diagnose: error: --mode only makes sense with --fix")
        from doctor.config import DoctorConfig

        # the global mode for this run; a playbook's own mode in the config still holds (it was set on purpose)
        settings = dataclasses.replace(settings if settings is not None else DoctorConfig(), mode=ns.mode)
    return Options(engines, sample_s, since_s, timeout_s, min(request_timeout_s, timeout_s), prometheus, ns.format,
                   state_dir, not ns.no_history,
                   ns.long_prompt_tokens or int(defaults.get("long_prompt_tokens", 5120)),
                   ns.very_long_prompt_tokens or int(defaults.get("very_long_prompt_tokens", 8192)),
                   ns.fail_on, max(window_s, sample_s), int(defaults.get("min_requests", 10)), settings,
                   ns.router or defaults.get("router"), ns.fix, ns.yes,
                   min(verify_wait_s, max(0.0, timeout_s - 2 * sample_s - 1)), discover,
                   int(defaults.get("max_concurrent_reads", 64)))


def _labels(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        label, sep, want = value.partition("=")
        if not sep or not label.strip() or not want:
            raise UsageError(f"doctor diagnose: error: --discover {value!r}: expected LABEL=VALUE, e.g. job=vllm")
        out[label.strip()] = want
    return out


def _merge_engines(settings: Any, from_flags: list[EngineRef]) -> list[EngineRef]:
    """Flags add engines and replace a config engine's URL, role, log, dcgm and GPUs (doctor.config.merge_flags,
    the one merge; the cycle merges its engines into the remediator's config the same way)."""
    if settings is None and not from_flags:
        return []
    from doctor.config import DoctorConfig
    from doctor.config_merge import merge_flags

    return merge_flags(settings if settings is not None else DoctorConfig(), from_flags).engine_refs()


def plan_of(opts: Options, *, trigger: str = "cron") -> Plan:
    """The cycle's plan from diagnose's flags and config (the state directory defaulted here)."""
    from doctor.plan import Plan
    from doctor.state import default_state_dir

    return Plan(engines=tuple(opts.engines), state_dir=opts.state_dir or default_state_dir(), settings=opts.settings,
                sample_s=opts.sample_s, window_s=opts.window_s, min_requests=opts.min_requests,
                request_timeout_s=opts.request_timeout_s, max_concurrent_reads=opts.max_concurrent_reads,
                long_prompt_tokens=opts.long_prompt_tokens,
                very_long_prompt_tokens=opts.very_long_prompt_tokens, router=opts.router, prometheus=opts.prometheus,
                since_s=opts.since_s, history=opts.history, fix=opts.fix, yes=opts.yes,
                verify_wait_s=opts.verify_wait_s, trigger=trigger)


async def collect(opts: Options, *, clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """One doctor cycle over the engines the flags name (doctor.cycle.run_cycle)."""
    from doctor.cycle import run_cycle

    if opts.discover and opts.prometheus:
        from doctor.discover import discover_engines

        engines = await asyncio.to_thread(discover_engines, opts.prometheus, opts.discover, opts.engines,
                                          timeout_s=opts.request_timeout_s)
        opts = dataclasses.replace(opts, engines=engines)
    plan = plan_of(opts)
    if plan.transport is not None:  # a caller substituted the I/O (tests/badinput/test_hard_deadline.py)
        return (await run_cycle(plan, clock=clock)).report
    from doctor.wire_transport import KeptTransport

    # The run's GETs (/health, /version, /v1/models, /metrics, the router's) over router.wire, as the daemon's:
    # a tenth of httpx's CPU per read (doctor/wire_transport.py); 1,000 engines' reads are most of a fleet run.
    transport = KeptTransport(max_connections=5 * max(1, min(opts.max_concurrent_reads or 64, len(plan.engines))))
    try:
        return (await run_cycle(dataclasses.replace(plan, transport=transport), clock=clock)).report
    finally:
        await transport.close()


def exit_code(report: dict[str, Any], fail_on: str) -> int:
    status = report["status"]
    if status == "unknown":
        return EXIT_UNUSABLE
    actions = report.get("actions", [])
    if any(a["status"] in ("rolled_back", "failed") or "paged" in (a.get("reason") or "") for a in actions):
        return EXIT_CRITICAL  # the fix did not hold, or a person was paged
    fixed = [a for a in actions if a["status"] == "verified"]
    if fixed and {f["id"] for f in report["findings"]} <= {a.get("finding") for a in fixed}:
        return EXIT_OK  # every finding has a verified fix
    if fail_on == "never":
        return EXIT_OK
    if status == "critical":
        return EXIT_CRITICAL
    if status == "warning" and fail_on == "warning":
        return EXIT_WARNING
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None,
         hard_deadline: bool | None = None) -> int:
    """Entry point of `doctor diagnose`. `hard_deadline` (default: when writing to the process's own stdout, as
    the CLI does): past --timeout plus a grace, a watchdog thread ends the process with exit 3 whatever blocks."""
    if hard_deadline is None:
        hard_deadline = out is None
    from doctor.discover import DiscoveryError

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        opts = parse_options(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(exc, file=err)
        return EXIT_UNUSABLE
    from doctor.deadline import Watchdog, grace_s, hard_exit
    from doctor.state import LockHeld, StateDir, default_state_dir

    grace = grace_s(opts.timeout_s)
    fire = hard_exit(err, f"doctor diagnose: gave up after --timeout {opts.timeout_s:g}s (hard deadline: the run "
                          f"was still blocked {grace:g}s later, so it was stopped; the lock is released)")
    try:
        with contextlib.ExitStack() as stack:
            if hard_deadline:
                stack.enter_context(Watchdog(opts.timeout_s + grace, fire))
            stack.enter_context(StateDir(opts.state_dir or default_state_dir()).lock("diagnose"))
            report = asyncio.run(asyncio.wait_for(collect(opts), timeout=opts.timeout_s))
    except LockHeld as exc:
        print(f"doctor diagnose: another run is in progress ({exc}); not starting a second one", file=err)
        return EXIT_UNUSABLE
    except TimeoutError:
        print(f"doctor diagnose: gave up after --timeout {opts.timeout_s:g}s", file=err)
        return EXIT_UNUSABLE
    except DiscoveryError as exc:
        print(f"doctor diagnose: {exc}", file=err)
        return EXIT_UNUSABLE
    except OSError as exc:
        print(f"doctor diagnose: cannot use the state directory: {exc}", file=err)
        return EXIT_UNUSABLE
    from doctor.secrets import REDACT

    report = REDACT.strings(report)  # URLs with user:password, tokens in error texts
    if opts.fmt == "json":
        from doctor.jsonout import dumps

        out.write(dumps(report, indent=2))
        out.write("\n")
    else:
        from doctor.report_text import render_text

        render_text(report, out, colour=out.isatty())
    if report["status"] == "unknown":
        print("doctor diagnose: no engine could be read", file=err)
    return exit_code(report, opts.fail_on)

