"""How values read on screen: the fleet's columns, sparklines, the router's policy line, a finding's evidence and
remedies. Rich `Text` (styles plus a `!`/`!!` mark, so nothing depends on colour: NO_COLOR terminals read the
marks). Used by the Textual screens and by `--once`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from tui.model import ActionRow, EngineRow, FindingRow, State
from tui.thresholds import judge

SPARK = "▁▂▃▄▅▆▇█"
STYLES = {"crit": "bold reverse red", "warn": "bold yellow", "": ""}
MARKS = {"crit": "!!", "warn": "!", "": ""}
SEVERITY_STYLE = {"critical": "bold reverse red", "warning": "bold yellow", "info": "cyan"}


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def secs(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s" if v < 10 else f"{v:.0f}s"


def rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def count(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def spark(values: Sequence[float], width: int) -> str:
    """The last `width` values as block characters, scaled from 0 to their max."""
    tail = list(values)[-width:]
    if not tail:
        return ""
    top = max(tail)
    if top <= 0:
        return SPARK[0] * len(tail)
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in tail)


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    signal: str  # the value judged for colour ("" for none)
    fmt: Callable[[EngineRow], str]


def _v(signal: str, f: Callable[[float | None], str]) -> Callable[[EngineRow], str]:
    return lambda e: f(e.get(signal))


def _health(e: EngineRow) -> str:
    if e.change_in_progress:
        return "changing"
    return e.health or ("down" if e.reachable is False else "?")


FLEET_COLUMNS: tuple[Column, ...] = (
    Column("name", "engine", "", lambda e: e.name),
    Column("role", "role", "", lambda e: e.role or "-"),
    Column("profile", "vllm", "", lambda e: e.profile or "-"),
    Column("health", "health", "health", _health),
    Column("qps", "QPS", "", _v("qps", rate)),
    Column("ttft50", "TTFT50", "", _v("p50_ttft_s", secs)),
    Column("ttft99", "TTFT99", "p99_ttft_s", _v("p99_ttft_s", secs)),
    Column("e2e50", "E2E50", "", _v("p50_e2e_s", secs)),
    Column("e2e99", "E2E99", "p99_e2e_s", _v("p99_e2e_s", secs)),
    Column("batch", "batch", "batch_utilization", _v("batch_utilization", pct)),
    Column("kv", "KV", "kv_cache_usage", _v("kv_cache_usage", pct)),
    Column("prefix", "prefix", "prefix_cache_hit_rate", _v("prefix_cache_hit_rate", pct)),
    Column("preempt", "preempt/s", "preemptions_per_s", _v("preemptions_per_s", rate)),
    Column("waiting", "wait", "waiting", _v("waiting", count)),
    Column("dram", "DRAM", "", _v("dram_utilization", pct)),
    Column("fb", "FB", "fb_used_ratio", _v("fb_used_ratio", pct)),
    Column("qps_trend", "QPS trend", "", lambda e: spark(e.history.get("qps", ()), 12)),
    Column("ttft_trend", "TTFT99 trend", "", lambda e: spark(e.history.get("p99_ttft_s", ()), 12)),
)


def cell(column: Column, engine: EngineRow) -> Text:
    """One fleet cell, styled and marked at the playbooks' thresholds."""
    text = column.fmt(engine)
    verdict = judge(column.signal, engine) if column.signal else ""
    return Text(text + MARKS[verdict], style=STYLES[verdict])


def ago(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    d = max(0.0, now - ts)
    return f"{d:.0f}s ago" if d < 120 else f"{d / 60:.0f}m ago" if d < 7200 else f"{d / 3600:.0f}h ago"


def policy_line(state: State, now: float) -> Text:
    """The router's policy in one line: route threshold, emergency length limit (expiry, refusals), batch timeout,
    upstream states."""
    if state.router_url is None:
        return Text("router: none configured", style="dim")
    if state.policy is None:
        return Text(f"router {state.router_url}: policy unreadable ({state.router_error or 'no answer'})",
                    style="bold yellow")
    p = state.policy
    out = Text("router ")
    out.append(f"route>{p.get('route_threshold_tokens', '?')} tok  ")
    limit = p.get("length_limit_tokens")
    status: dict[str, Any] = p["status"] if isinstance(p.get("status"), dict) else {}
    if limit is None:
        out.append("limit off  ", style="dim")
    else:
        exp = p.get("length_limit_expires_at")
        left = f", {max(0.0, float(exp) - now) / 60:.0f}m left" if isinstance(exp, int | float) else ", no expiry"
        active = status.get("length_limit_active", True)
        refused = max((e.get("length_limit_refusals_total") or 0.0 for e in state.engines), default=0.0)
        said = f", {refused:.0f} refused" if refused else ""
        out.append(f"LIMIT {limit} tok{left}{said}{'' if active else ' (expired)'}  ", style="bold yellow")
    out.append(f"batch {p.get('batch_timeout_ms', 0)}ms  ")
    ups: dict[str, Any] = p["upstreams"] if isinstance(p.get("upstreams"), dict) else {}
    states = [f"{u.get('name')}:{u.get('state')}" for role in ("hot", "cold") for u in ups.get(role, [])
              if isinstance(u, dict)]
    out.append(" ".join(states))
    return out


def evidence_line(e: dict[str, object] | object) -> str:
    if not isinstance(e, dict):
        return str(e)

    def fmt(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else "n/a" if v is None else str(v)

    window = e.get("window_s")
    over = f" over {window:g}s" if isinstance(window, int | float) and window else ""
    note = f" - {e['note']}" if e.get("note") else ""
    return (f"{e.get('signal')} = {fmt(e.get('value'))} ({e.get('comparison', '>')} {fmt(e.get('threshold'))}{over})"
            f"{note}")


def remedy_line(a: dict[str, object] | object) -> str:
    if not isinstance(a, dict):
        return str(a)
    params = a.get("params") if isinstance(a.get("params"), dict) else {}
    args = ", ".join(f"{k}={v}" for k, v in params.items())  # type: ignore[union-attr]
    risk = f" [risk {a.get('risk')}]" if a.get("risk") else ""
    desc = f": {a.get('description')}" if a.get("description") else ""
    return f"{a.get('action')} on {a.get('target')}({args}){risk}{desc}"


def finding_detail(f: FindingRow, action: ActionRow | None, now: float) -> Text:
    """A finding's severity, summary, evidence (value, threshold, window), remedies and its action's state."""
    out = Text()
    out.append(f"{f.severity.upper()}", style=SEVERITY_STYLE.get(f.severity, ""))
    out.append(f" {f.engine} / {f.playbook}  ({f.status}")
    if f.status == "pending" and f.fires_in_s is not None:
        out.append(f"; held {f.held_s or 0:.0f}s of its {f.for_s or 0:.0f}s, fires in {f.fires_in_s:.0f}s")
    elif f.confidence is not None:
        out.append(f"; confidence {f.confidence:.0%}")
    out.append(")\n")
    out.append(f.summary + "\n", style="bold")
    out.append("evidence:\n")
    for e in f.evidence:
        out.append(f"  because {evidence_line(e)}\n")
    out.append("remedies:\n")
    for i, a in enumerate(f.remedies, 1):
        out.append(f"  {i}. {remedy_line(a)}\n")
    if action is not None:
        out.append(f"action {action.id}: {action.status}", style="bold")
        out.append(f" ({action.reason})\n" if action.reason else "\n")
    return out


def action_cells(a: ActionRow, now: float) -> list[Text]:
    style = {"pending": "bold yellow", "failed": "bold red", "rolled_back": "magenta", "verified": "green"}
    return [Text(a.id), Text(a.status, style=style.get(a.status, "")), Text(f"{a.kind} on {a.target}"),
            Text(a.engine), Text(a.trigger), Text(ago(a.updated_at, now)), Text(a.reason[:60])]
