"""The readable report: findings first (most severe first), then a short table per engine."""

from __future__ import annotations

from typing import Any, TextIO

_COLOURS = {"critical": "\x1b[1;31m", "warning": "\x1b[33m", "info": "\x1b[36m", "ok": "\x1b[32m",
            "unknown": "\x1b[35m", "dim": "\x1b[2m", "reset": "\x1b[0m"}
KEY_SIGNALS = ("qps", "generation_tokens_per_s", "running", "waiting", "waiting_max", "seq_cap", "batch_utilization",
               "kv_cache_usage", "kv_cache_usage_max",
               "prefix_cache_hit_rate", "preemptions_per_s", "p99_ttft_s", "p99_e2e_s", "p99_itl_s",
               "dram_utilization", "fb_used_ratio", "memory_growth_ratio")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_text(report: dict[str, Any], out: TextIO, *, colour: bool = False) -> None:
    """Colour on a terminal, plain in a pipe."""

    def c(name: str, text: str) -> str:
        return f"{_COLOURS[name]}{text}{_COLOURS['reset']}" if colour else text

    status = report["status"]
    print(f"{c(status if status in _COLOURS else 'unknown', status.upper())}  serving-doctor "
          f"{report['doctor_version']} at {report['generated_at']} (window {report['window_s']}s, "
          f"{len(report['findings'])} finding(s)"
          + (f", {len(report.get('pending', []))} pending" if report.get("pending") else "") + ")", file=out)
    for f in report["findings"]:
        print(f"\n{c(f['severity'], f['severity'].upper())} {f['engine']}: {f['summary']}  "
              f"[{f['playbook']}, confidence {f['confidence']:.0%}]", file=out)
        for e in f["evidence"]:
            window = f" over {e['window_s']:g}s" if e.get("window_s") else ""
            note = f" - {e['note']}" if e.get("note") else ""
            print(f"    because {e['signal']} = {_fmt(e['value'])} ({e['comparison']} {_fmt(e['threshold'])}"
                  f"{window}){note}", file=out)
        for i, r in enumerate(f["remedies"], 1):
            params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
            print(f"    remedy {i}: {r['action']} on {r['target']}" + (f" ({params})" if params else ""), file=out)
        print(c("dim", f"    runbook: {f['runbook']}  id: {f['id']}"), file=out)
    for f in report.get("pending", []):
        held = f"held {f['held_s']:.0f}s of its {f['for_s']:.0f}s `for`, reported in {f['fires_in_s']:.0f}s if it holds"
        print(f"\n{c('dim', 'PENDING')} {f['severity']} {f['engine']}: {f['summary']}  [{f['playbook']}; {held}]",
              file=out)
        if f.get("note"):
            print(f"    note: {f['note']}", file=out)
        for e in f["evidence"]:
            window = f" over {e['window_s']:g}s" if e.get("window_s") else ""
            print(f"    because {e['signal']} = {_fmt(e['value'])} ({e['comparison']} {_fmt(e['threshold'])}"
                  f"{window})", file=out)
    for a in report.get("actions", []):
        print(f"\naction {a['id']}: {a['action']} on {a['target']} -> {a['status']}"
              + (f" ({a['reason']})" if a.get("reason") else ""), file=out)
    router = _router_line(report)
    if router:
        print(f"\n{router}", file=out)
    for e in report["engines"]:
        sig = e["signals"]
        state = sig["health"] if e["reachable"] else "unreachable"
        busy = "  [change in progress by the doctor]" if e.get("change_in_progress") else ""
        window = f"  window {e['window_s']:g}s" if e.get("window_s") else ""
        print(f"\n{e['name']} ({e['role'] or 'no role'}) {e['url']}  health: {state}  "
              f"vLLM {e['version'] or '?'} (profile {e['version_profile'] or '?'}){window}{busy}", file=out)
        for k in KEY_SIGNALS:
            v = sig.get(k)
            why = c("dim", f"   ({sig['reasons'].get(k, '')})") if v is None else ""
            print(f"  {k:26} {_fmt(v)}{why}", file=out)
        for ev in e["events"][-5:]:
            print(f"  event {ev['kind']}: {ev['message'][:140]}", file=out)
        for err in e["errors"]:
            print(c("dim", f"  ! {err}"), file=out)


def _router_line(report: dict[str, Any]) -> str:
    """The router's emergency length limit, when the router was read ('' when it was not)."""
    values = [e["signals"] for e in report["engines"] if e["signals"].get("length_limit_tokens") is not None]
    if not values:
        return ""
    tokens, idle = values[0]["length_limit_tokens"], values[0].get("length_limit_idle_s")
    if not tokens:
        return "router: no emergency length limit in force"
    quiet = f", refused nothing for {idle:.0f} s" if isinstance(idle, int | float) else ""
    return f"router: emergency length limit in force: prompts over {tokens:.0f} tokens get 413{quiet}"

