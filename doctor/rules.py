"""`doctor rules`: Prometheus alerting rules for the same conditions as the playbooks.

Driven by the table in `doctor.rules_table` (one entry per playbook and alert name): thresholds come from
each playbook's `defaults` and `for:` from its `for_s`; a registered id whose module is not importable
yet falls back to the issue's seed values written in its entry. Playbooks PromQL cannot express are
comments in the YAML. PyYAML is not a dependency: the YAML is written by hand (strings JSON-quoted,
expressions as literal blocks) and the tests check it with `promtool check rules` / `promtool test rules`.

Regenerate the committed file with `python -m doctor.rules --out deploy/prometheus/rules.yml`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from collectors.names import PROFILE_NAMES
from doctor.rules_table import (
    DEFAULT_SELECTOR,
    NO_RULE,
    RULES,
    SLO_SIGNALS,
    Ctx,
    Options,
    RuleSpec,
    Unavailable,
    duration,
    num,
    strip_braces,
)
from playbooks.base import Playbook
from playbooks.registry import PLAYBOOK_MODULES

DEFAULT_OUT = "deploy/prometheus/rules.yml"
_WINDOW_RE = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def load_playbooks() -> tuple[dict[str, Playbook], list[str]]:
    """Every registered playbook, by id (every one exists: a missing module is an ImportError, not a fallback),
    and an empty list of missing ones (kept for callers)."""
    return {name: importlib.import_module(f"playbooks.{name}").PLAYBOOK for name in PLAYBOOK_MODULES}, []


@dataclass(frozen=True)
class Rule:
    """One generated alerting rule."""

    playbook: str
    alert: str
    expr: str
    for_s: float
    severity: str
    summary: str
    description: str
    runbook_url: str
    thresholds: Mapping[str, float]
    comment: str


def runbook_fragment(playbook_id: str) -> str:
    """The anchor of a playbook's section in docs/runbooks.md (Playbook.runbook_anchor's fragment)."""
    return playbook_id.replace("_", "-")


def _params(spec: RuleSpec, pb: Playbook | None, opts: Options) -> tuple[dict[str, float], list[str]]:
    """Thresholds for one rule (the playbook's defaults, then the rule's own), and notes."""
    if pb is None:
        raise ValueError(f"rule {spec.alert}: no playbook {spec.playbook!r} is registered")
    params: dict[str, float] = {k: float(v) for k, v in pb.defaults.items()}
    unknown = [name for name in spec.params if name not in params]
    if unknown:
        raise ValueError(f"rule {spec.alert} reads {', '.join(unknown)}, which playbook {spec.playbook} does not "
                         "define (doctor/rules_table.py)")
    params.update({k: float(v) for k, v in spec.rule_params.items()})
    return params, []


def _fatal_xids(playbooks: Mapping[str, Playbook], opts: Options) -> Options:
    pb = playbooks.get("gpu_fault")
    codes = getattr(sys.modules.get(type(pb).__module__), "FATAL_XIDS", None) if pb is not None else None
    return replace(opts, fatal_xids=tuple(sorted(int(c) for c in codes))) if codes else opts


def build(opts: Options, playbooks: Mapping[str, Playbook]) -> tuple[list[Rule], list[str]]:
    """The rules, and comment lines for playbooks or alerts without one."""
    opts = _fatal_xids(playbooks, opts)
    rules: list[Rule] = []
    comments: list[str] = []
    for spec in RULES:
        pb = playbooks.get(spec.playbook)
        alert = pb.alerts[spec.alert_index] if pb is not None and len(pb.alerts) > spec.alert_index else spec.alert
        params, notes = _params(spec, pb, opts)
        try:
            expr = spec.expr(Ctx(opts, params, spec.role))
        except Unavailable as exc:
            comments.append(f"{spec.playbook} ({alert}): no rule for profile {opts.profile}: {exc}")
            continue
        if pb is None:
            notes.insert(0, "playbook module not written yet: thresholds, severity and for from the issue's table")
        if spec.note:
            notes.append(spec.note)
        text = {k: num(v) for k, v in params.items()}
        rules.append(Rule(
            playbook=spec.playbook, alert=alert, expr=expr,
            for_s=max(pb.for_s if pb is not None else spec.for_s, spec.min_for_s),
            severity=spec.severity if spec.fixed_severity or pb is None else pb.severity,
            summary=spec.summary % text, description=spec.description % text,
            runbook_url=f"{opts.runbook_base}docs/runbooks.md#{runbook_fragment(spec.playbook)}",
            thresholds={k: params[k] for k in (*spec.params, *spec.rule_params)}, comment="; ".join(notes)))
    comments += [f"{pid}: no rule: {why}" for pid, why in NO_RULE.items()]
    return rules, comments


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def render(opts: Options, playbooks: Mapping[str, Playbook], missing: Sequence[str] = ()) -> str:
    """The rules file as YAML text."""
    rules, comments = build(opts, playbooks)
    sel = strip_braces(opts.selector)
    out = ["# Generated by `doctor rules`; do not edit by hand. Regenerate with",
           f"#   python -m doctor.rules --out {DEFAULT_OUT}",
           f"# vLLM profile {opts.profile}; engines {{{sel}}}; rate window {opts.window}; "
           f"one alert per engine ({', '.join(opts.by)}).",
           "# Each rule's `playbook` label names the doctor playbook it maps to; runbooks in docs/runbooks.md.",
           "# Without a rule:"]
    out += [f"#   - {line}" for line in comments] or ["#   (none)"]
    if missing:
        out.append(f"# Playbook modules not written yet (seed thresholds used): {', '.join(missing)}")
    out += ["groups:", "  - name: serving-doctor", "    rules:"]
    for r in rules:
        if r.comment:
            out.append(f"      # {r.playbook}: {r.comment}")
        out += [f"      - alert: {r.alert}", "        expr: |-"]
        out += [f"          {line}" if line.strip() else "" for line in r.expr.splitlines()]
        if r.for_s > 0:
            out.append(f"        for: {duration(r.for_s)}")
        out += ["        labels:", f"          severity: {r.severity}", f"          playbook: {r.playbook}",
                "        annotations:", f"          summary: {_q(r.summary)}",
                f"          description: {_q(r.description)}", f"          runbook_url: {_q(r.runbook_url)}"]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------- CLI

def _slo(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    if not sep or name not in SLO_SIGNALS:
        raise argparse.ArgumentTypeError(f"wants KEY=SECONDS with KEY one of {', '.join(SLO_SIGNALS)}, not {text!r}")
    raw = value.strip()
    scale = 0.001 if raw.endswith("ms") else 1.0
    try:
        seconds = float(raw.removesuffix("ms").removesuffix("s")) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name}: {value!r} is not a duration such as 0.5, 500ms or 2s") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{name}: must be positive, not {value}")
    return name, seconds


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor rules", description="Print Prometheus alerting rules for the doctor's playbooks "
                "(one rule per playbook condition PromQL can express; each names its playbook).")
    p.add_argument("--profile", default="0.33", help=f"vLLM version profile: {', '.join(PROFILE_NAMES)} (0.33)")
    p.add_argument("--selector", default=DEFAULT_SELECTOR, help=f"label matchers for the engines ({DEFAULT_SELECTOR})")
    p.add_argument("--hot-selector", help="matchers for hot-role engines (default: --selector)")
    p.add_argument("--cold-selector", help="matchers for cold-role engines (default: --selector)")
    p.add_argument("--templates-selector", help="engines with prompt templates configured (default: hot)")
    p.add_argument("--router-selector", default='job="router"', help='the serving router (job="router")')
    p.add_argument("--gpu-selector", default="", help="matchers for dcgm-exporter series (default: none)")
    p.add_argument("--window", default="5m", help="rate window (5m)")
    p.add_argument("--spelling", default="either", choices=("either", "colon", "underscore"),
                   help="vLLM names to match: vllm:x, vllm_x or either (default)")
    p.add_argument("--by", default="job,instance", help="labels that identify one engine (job,instance)")
    p.add_argument("--slo", type=_slo, action="append", default=[], metavar="NAME=SECONDS",
                   help="an SLO as the doctor config's [engines.slo] (p99_ttft_s=500ms, p95_itl_s=0.05, ...); "
                        "each adds a critical SLO-breach rule")
    p.add_argument("--max-num-seqs", type=int, help="the engines' max_num_seqs (batch and slot rules need it)")
    p.add_argument("--max-model-len", type=int, default=32768, help="sets the prompt-length buckets (32768)")
    p.add_argument("--runbook-base", default="", help="prefix for runbook_url, e.g. https://git.example/r/blob/main/")
    p.add_argument("--out", metavar="FILE", help="write the rules to FILE instead of standard output")
    return p


def _check(args: argparse.Namespace) -> tuple[list[str], tuple[str, ...]]:
    problems = []
    if args.profile not in PROFILE_NAMES:
        problems.append(f"--profile {args.profile!r} is not a known profile ({', '.join(PROFILE_NAMES)})")
    if not _WINDOW_RE.match(args.window):
        problems.append(f"--window {args.window!r} is not a Prometheus duration such as 5m")
    by = tuple(b.strip() for b in args.by.split(",") if b.strip())
    if not by or not all(re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", b) for b in by):
        problems.append(f"--by {args.by!r} must be comma-separated label names")
    elif "job" not in by:
        problems.append("--by must include job (replica peers are the engines of one job)")
    if args.max_num_seqs is not None and args.max_num_seqs <= 0:
        problems.append(f"--max-num-seqs must be positive, not {args.max_num_seqs}")
    if args.max_model_len <= 0:
        problems.append(f"--max-model-len must be positive, not {args.max_model_len}")
    for flag in ("selector", "hot_selector", "cold_selector", "templates_selector", "gpu_selector", "router_selector"):
        value = getattr(args, flag)
        if value is not None and ("\n" in value or strip_braces(value).count("{")):
            problems.append(f"--{flag.replace('_', '-')} {value!r} must be label matchers such as job=\"vllm\"")
    return problems, by


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`doctor rules`: 0 on success, 3 on bad options (a message, never a traceback)."""
    stdout, stderr = out or sys.stdout, err or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError as exc:
        print(f"doctor rules: {exc}\n{parser.format_usage()}", file=stderr, end="")
        return 3
    except SystemExit as exc:  # --help
        return 0 if not exc.code else 3
    problems, by = _check(args)
    if problems:
        for line in problems:
            print(f"doctor rules: {line}", file=stderr)
        return 3
    opts = Options(profile=args.profile, selector=args.selector, hot_selector=args.hot_selector,
                   cold_selector=args.cold_selector, templates_selector=args.templates_selector,
                   gpu_selector=args.gpu_selector, router_selector=args.router_selector, window=args.window,
                   spelling=args.spelling, by=by,
                   slo=dict(args.slo), max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                   runbook_base=args.runbook_base)
    playbooks, missing = load_playbooks()
    text = render(opts, playbooks, missing)
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            print(f"doctor rules: cannot write {args.out}: {exc.strerror or exc}", file=stderr)
            return 3
        print(f"doctor rules: wrote {args.out}", file=stderr)
    else:
        stdout.write(text)
    if missing:
        print(f"doctor rules: playbook modules not written yet (seed thresholds used): {', '.join(missing)}",
              file=stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
