"""`doctor playbooks`: the playbook library as a table, JSON, or the runbooks document (docs/runbooks.md).

Everything comes from the registered playbook classes: id, title, severity, signals, alerts, thresholds
(`defaults`), `for_s`, roles and runbook markdown. The remedy kinds a playbook proposes are read from the
`Action("kind", ...)` calls in its `remedies` (and the helpers it calls), in order of appearance.

Regenerate the committed document with `python -m doctor.playbooks_cli --format markdown --out docs/runbooks.md`.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from doctor.jsonout import dumps
from doctor.rules import load_playbooks, runbook_fragment
from doctor.rules_table import duration, num
from playbooks.base import Playbook
from playbooks.model import ACTION_KINDS

DEFAULT_OUT = "docs/runbooks.md"

# The "fires when" column, with thresholds filled in from each playbook's defaults (%(name)s).
FIRES_WHEN: dict[str, str] = {
    "engine_down": "the engine is unreachable, `/health` answers other than 200, or its log shows the engine "
                   "core dying",
    "router_down": "the serving router is configured and none of the run's reads of its `/metrics` was answered "
                   "(one finding per deployment, on the first engine by name)",
    "gpu_fault": "a new Xid error (more than %(xid_errors)s in the window; fatal classes are critical) or more than "
                 "%(ecc_dbe_errors)s double-bit ECC errors",
    "cuda_oom": "more than %(oom_events)s CUDA out-of-memory events in the engine's log",
    "engine_stalled": "`/health` is 200 but generation stays at or below %(generation_tokens_per_s)s tokens/s and "
                      "%(qps)s requests/s while requests run or wait",
    "error_rate": "more than %(error_ratio)s of API requests fail (5xx), or more than %(abort_ratio)s of finished "
                  "requests are aborts (with at least %(min_requests)s requests in the window)",
    "kv_pressure": "KV-cache usage (`kv_cache_usage`, never framebuffer use) above %(kv_usage_ratio)s with "
                   "preemptions above %(preemptions_per_s)s/s or more than %(waiting)s requests waiting "
                   "(critical from %(critical_kv_usage_ratio)s)",
    "p99_spike": "P99 end-to-end latency or TTFT over its SLO (critical), or over %(baseline_factor_ratio)sx its "
                 "baseline (warning); looks for prompts of %(length_limit_tokens)s tokens or more and a prefix "
                 "hit rate under %(prefix_hit_rate_ratio)s",
    "queue_pressure": "more than %(waiting)s requests waiting, or P95 queue time at least %(p95_queue_s)s s "
                      "(or the router's P99 queue time at least %(router_queue_p99_s)s s)",
    "cold_prefill_slow": "cold prefill above %(prefill_s_per_token)s s per prompt token, or P99 prefill above "
                         "%(p99_prefill_s)s s",
    "long_prompt_share": "more than %(long_prompt_ratio)s of the hot engine's prompts at or above the route "
                         "threshold (%(route_threshold_tokens)s tokens), or more than %(misrouted_ratio)s misrouted",
    "hot_decode_jitter": "the hot engine's inter-token latency coefficient of variation (`itl_cv`) above "
                         "%(itl_cv_ratio)s",
    "memory_fragmentation": "GPU memory held beyond the post-warm-up footprint (`memory_growth_ratio`) above "
                            "%(memory_growth_ratio)s",
    "throughput_drop": "throughput more than %(drop_ratio)s below its baseline while demand holds",
    "capacity_scale_out": "more than %(qps)s requests/s on one engine, or sequence slots saturated "
                          "(%(slots_saturated_ratio)s) with requests waiting and KV usage under %(kv_headroom_ratio)s",
    "capacity_scale_in": "a pool holds a replica the doctor added and its load, spread over one fewer, stays "
                         "under the scale-up triggers with headroom (mean KV under 0.70, waiting under 2, batch "
                         "utilization under %(pool_target_utilization_ratio)s), no replica starting",
    "prefix_cache_miss": "prefix-cache hit rate under %(prefix_hit_ratio)s on an engine with prompt templates",
    "api_server_cpu_bound": "the API server process at %(process_cpu_cores)s of a core or more while the GPU idles "
                            "(SM or DRAM utilization under %(gpu_idle_ratio)s)",
    "batch_underutilized": "batch utilization (against the effective cap) under %(batch_utilization_ratio)s while "
                           "requests wait and KV usage is under %(kv_usage_ratio)s",
    "cold_start": "a start less than %(recent_uptime_s)s s ago and P99 TTFT over %(ttft_baseline_factor)sx the "
                  "steady state (or %(ttft_absolute_s)s s without a baseline)",
    "replica_imbalance": "running requests or requests/s over %(imbalance_factor)sx (or under 1/%(imbalance_factor)s "
                         "of) the mean of same-role peers while the group is loaded",
}
SEVERITY_MEANING = {"critical": "users are being hurt now", "warning": "degradation that will hurt",
                    "info": "a chance to do better"}
_ACTION_RE = re.compile(r'Action\(\s*"(\w+)"')
_CALL_RE = re.compile(r"(?:self\.)?\b([A-Za-z_]\w*)\(")


# ---------------------------------------------------------------------------------------- facts

def remedy_kinds(pb: Playbook) -> list[str]:
    """Action kinds `pb.remedies` can propose, in order of appearance (helpers it calls expanded)."""
    module = sys.modules[type(pb).__module__]
    kinds: list[str] = []

    def scan(fn: Callable[..., Any], depth: int) -> None:
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            return
        body = source.split(":", 1)[1] if source.lstrip().startswith("def ") else source
        for m in re.finditer(rf"{_ACTION_RE.pattern}|{_CALL_RE.pattern}", body):
            if m.group(1):
                if m.group(1) in ACTION_KINDS and m.group(1) not in kinds:
                    kinds.append(m.group(1))
            elif depth > 0:
                helper = getattr(type(pb), m.group(2), None) or getattr(module, m.group(2), None)
                if inspect.isfunction(helper) and helper.__module__.startswith("playbooks."):
                    scan(helper, depth - 1)

    scan(type(pb).remedies, 2)
    return kinds


def fires_when(pb: Playbook) -> str:
    text = FIRES_WHEN.get(pb.id)
    params = {k: num(float(v)) for k, v in pb.defaults.items()}
    if text is not None:
        try:
            return text % params
        except (KeyError, ValueError, TypeError):
            pass  # the playbook renamed a parameter: fall back to listing them
    return "thresholds " + (", ".join(f"{k} = {v}" for k, v in params.items()) or "none")


def describe(pb: Playbook) -> dict[str, Any]:
    return {"id": pb.id, "title": pb.title, "severity": pb.severity, "signals": list(pb.signals),
            "alerts": list(pb.alerts), "thresholds": {k: float(v) for k, v in pb.defaults.items()},
            "for_s": float(pb.for_s), "roles": list(pb.roles) if pb.roles is not None else None,
            "fires_when": fires_when(pb), "remedy_kinds": remedy_kinds(pb), "runbook_anchor": pb.runbook_anchor()}


# ---------------------------------------------------------------------------------------- formats

def render_text(playbooks: Mapping[str, Playbook], missing: Sequence[str]) -> str:
    lines = []
    for pb in playbooks.values():
        thresholds = ", ".join(f"{k}={num(float(v))}" for k, v in pb.defaults.items()) or "-"
        roles = f"  roles: {', '.join(pb.roles)}" if pb.roles else ""
        lines += [f"{pb.id}  [{pb.severity}]  {pb.title}",
                  f"    signals: {', '.join(pb.signals) or '-'}{roles}",
                  f"    thresholds: {thresholds}",
                  f"    for: {duration(pb.for_s) if pb.for_s else '0s (at once)'}"]
    if missing:
        lines.append(f"registered but not written yet: {', '.join(missing)}")
    return "\n".join(lines) + "\n"


def render_json(playbooks: Mapping[str, Playbook], missing: Sequence[str]) -> str:
    doc = {"playbooks": [describe(pb) for pb in playbooks.values()], "missing": list(missing),
           "action_kinds": dict(ACTION_KINDS)}
    return dumps(doc, indent=2) + "\n"


FOR_EXPLAINED = (
    "**Windows and `for`.** Each run judges its signals over a window (`window_s`, 1 minute by default, like",
    "PromQL's `rate(...[1m])`): rates, shares and percentiles come from the counters and histograms between the",
    "newest read and the read nearest a minute old, which earlier runs kept in the state directory (a first run,",
    "or `--no-history`, judges only its own two reads `--sample` apart); gauges (running, waiting, KV usage) by",
    "their minimum, mean and maximum over every read in the window. A condition must then hold for the",
    "playbook's `for` (below) across runs before it is a finding, as a Prometheus alert does. Until then it is",
    "reported as **pending**, with its onset and how long it still needs (`pending` in `--format json`, a",
    "`PENDING` line in text); pending conditions never change the exit code. A share or percentile built from",
    "fewer than `min_requests` (10) requests is marked too few to judge: it neither starts, holds nor clears a",
    "`for`, and a condition that would hold on it is reported pending with that note. A condition unseen for",
    "longer than its `for` (or a minute) starts afresh.",
)


def render_markdown(playbooks: Mapping[str, Playbook], missing: Sequence[str]) -> str:
    out = ["# Runbooks", "",
           "<!-- Generated by `doctor playbooks --format markdown`; do not edit by hand. Regenerate with",
           f"     python -m doctor.playbooks_cli --format markdown --out {DEFAULT_OUT} -->", "",
           "One section per playbook of `doctor diagnose`; a finding's `runbook` and each Prometheus rule's",
           "`runbook_url` (deploy/prometheus/rules.yml) point at its anchor. Thresholds are the seed defaults;",
           "the config overrides them per engine. Severity: "
           + "; ".join(f"**{k}**, {v}" for k, v in SEVERITY_MEANING.items()) + ".", "",
           *FOR_EXPLAINED, "",
           "| playbook | severity | for | Prometheus alerts |", "| --- | --- | --- | --- |"]
    for pb in playbooks.values():
        alerts = ", ".join(f"`{a}`" for a in pb.alerts) or "-"
        out.append(f"| [{pb.id}](#{runbook_fragment(pb.id)}) | {pb.severity} | {duration(pb.for_s)} | {alerts} |")
    if missing:
        out += ["", f"Registered but not written yet: {', '.join(f'`{m}`' for m in missing)}."]
    for pb in playbooks.values():
        roles = ", ".join(pb.roles) + " engines" if pb.roles else "every engine"
        thresholds = ", ".join(f"`{k}` = {num(float(v))}" for k, v in pb.defaults.items()) or "none"
        out += ["", f'<a id="{runbook_fragment(pb.id)}"></a>', "", f"## {pb.id}: {pb.title}", "",
                f"**Fires when** {fires_when(pb)}"
                + (f", for {duration(pb.for_s)}." if pb.for_s else " (at once)."), "",
                f"**Severity** {pb.severity}. **Applies to** {roles}. "
                f"**Signals** {', '.join(f'`{s}`' for s in pb.signals) or '-'}. "
                f"**Prometheus alerts** {', '.join(f'`{a}`' for a in pb.alerts) or '-'}. "
                f"**Thresholds** {thresholds}.", "", pb.runbook.strip(), "",
                "**Remedy actions it may propose** (each finding lists its own, in order of preference):", ""]
        out += [f"{i}. `{kind}`: {ACTION_KINDS[kind]}" for i, kind in enumerate(remedy_kinds(pb), 1)] or ["none"]
    out += ["", "## Action kinds", "", "What each remedy kind changes (applying them belongs to the remediation "
            "layer, within its guardrails).", ""]
    out += [f"- `{kind}`: {text}" for kind, text in ACTION_KINDS.items()]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------- CLI

class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """`doctor playbooks [--format text|json|markdown] [--out FILE]`: 0 on success, 3 on bad options."""
    stdout, stderr = out or sys.stdout, err or sys.stderr
    parser = _Parser(prog="doctor playbooks", description="List the doctor's playbooks, or write the runbooks.")
    parser.add_argument("--format", default="text", choices=("text", "json", "markdown"),
                        help="text (default), json, or markdown (the runbooks document)")
    parser.add_argument("--out", metavar="FILE", help=f"write to FILE (e.g. {DEFAULT_OUT}) instead of standard output")
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError as exc:
        print(f"doctor playbooks: {exc}\n{parser.format_usage()}", file=stderr, end="")
        return 3
    except SystemExit as exc:  # --help
        return 0 if not exc.code else 3
    playbooks, missing = load_playbooks()
    renderers = {"text": render_text, "json": render_json, "markdown": render_markdown}
    text = renderers[args.format](playbooks, missing)
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            print(f"doctor playbooks: cannot write {args.out}: {exc.strerror or exc}", file=stderr)
            return 3
        print(f"doctor playbooks: wrote {args.out}", file=stderr)
    else:
        stdout.write(text)
    if missing:
        print(f"doctor playbooks: registered but not written yet: {', '.join(missing)}", file=stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
