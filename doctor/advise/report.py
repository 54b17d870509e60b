"""`doctor advise` as text: per engine the workload, the fit, and current / seed rules / twin best side by side."""

from __future__ import annotations

from typing import Any

ROWS = (("P50 TTFT", "p50_ttft_s", "s"), ("P99 TTFT", "p99_ttft_s", "s"), ("P50 e2e", "p50_e2e_s", "s"),
        ("P99 e2e", "p99_e2e_s", "s"), ("throughput", "qps", "req/s"), ("tokens out", "generation_tokens_per_s",
                                                                           "tok/s"),
        ("goodput", "goodput_qps", "req/s"), ("KV headroom", "kv_headroom", ""))


def _num(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _applied(a: dict[str, Any] | None) -> list[str]:
    """--apply: what the remediation path did, and the prediction against what the engine measured after."""
    if not a:
        return []
    out = [f"  --apply: {a['status']}" + (f" ({a['id']})" if a.get("id") else "") + f": {a.get('reason') or ''}"]
    out += [f"    {step}" for step in a.get("steps", [])]
    p = a.get("prediction")
    if p is None:
        return out
    if not p.get("checked"):
        return [*out, f"    prediction not checked: {p.get('why')}"]
    out.append(f"    after the change, {p['window_s']:.0f}s at {a.get('url')}: {p['requests']} requests; traffic "
               f"{_num(p['traffic_ratio'])}x the advice window's")
    out.append("    " + f"{'':14}{'predicted':>12}{'measured':>12}{'error':>9}")
    for label, key, unit in ROWS:
        if key in p["errors"]:
            err = p["errors"][key]
            out.append("    " + f"{label + (' ' + unit if unit else ''):14}{_num(p['predicted'].get(key)):>12}"
                       f"{_num(p['measured'].get(key)):>12}{'-' if err is None else f'{err:.1%}':>9}")
    r = p.get("replayed") or {}
    if r.get("errors"):
        errs = ", ".join(f"{k} {v:.1%}" for k, v in r["errors"].items() if v is not None)
        out.append(f"    the twin replaying the traffic that came after the change: error {errs}")
    if p.get("note"):
        out.append(f"    note: {p['note']}")
    out.append("    (recorded in the audit log as prediction_checked)")
    return out


def render(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    for e in doc["engines"]:
        w = e.get("workload") or {}
        lines.append(f"engine {e['engine']}" + (f" ({e['role']})" if e.get("role") else "")
                     + f": twin preset {e.get('preset')}")
        if e.get("error"):
            lines += [f"  cannot advise: {e['error']}", ""]
            continue
        lines.append(f"  workload over {w['window_s']:.0f}s: {w['requests']:.0f} requests, {w['rate_qps']:.3g} req/s, "
                     f"burstiness {_num(w['burstiness'])} ({w['burstiness_note']}); prompt avg "
                     f"{w['avg_prompt_tokens']:.0f} tokens ({w['share_over_2048']:.1%} > 2048, "
                     f"{w['share_over_8k']:.1%} > 8K), output avg {w['avg_generation_tokens']:.0f}; prefix-cache "
                     f"hit rate {_num(w['prefix_cache_hit_rate'])}")
        for note in e.get("notes", []):
            lines.append(f"  note: {note}")
        f = e["fit"]
        if f is None:
            lines += [f"  advice withheld: {e['withheld']}", ""]
            continue
        errs = ", ".join(f"{k} {v:.1%}" for k, v in f["errors"].items() if v is not None)
        lines.append(f"  twin fit: step-time scale {f['time_scale']:.3g} after {f['runs']} runs; error {errs}")
        if e.get("withheld"):
            lines += [f"  advice withheld: {e['withheld']}", ""]
            continue
        cols = [("measured", e["measured"]), ("current", e["current"]["predicted"]),
                ("seed rules", (e["seed_rules"] or {}).get("predicted") or {}),
                ("twin best", e["twin_best"]["predicted"])]
        lines.append("  " + f"{'':14}" + "".join(f"{name:>12}" for name, _ in cols))
        for label, key, unit in ROWS:
            lines.append("  " + f"{label + (' ' + unit if unit else ''):14}"
                         + "".join(f"{_num(c.get(key)):>12}" for _, c in cols))
        lines.append(f"  seed rules: {e['seed_rules']['note']} -> {e['seed_rules']['settings']['vllm_flags']}")
        best = e["twin_best"]
        if best.get("note"):
            lines.append(f"  twin: {best['note']}")
        lines.append(f"  recommended: {e['recommendation']['serve_line']}")
        lines.append(f"  (advice took {e['took_s']:.1f}s; {len(e['grid'])} settings tried on the twin)")
        lines += _applied(e.get("applied"))
        lines.append("")
    route = doc.get("route")
    if route and route.get("skipped"):
        lines.append(f"route threshold: not searched: {route['skipped']}")
    elif route:
        lines.append(f"route threshold (hot below, cold at or above): current {route['current']}, seed rules "
                     f"{route['seed_rules']}, twin best {route['best']}")
        for r in route["candidates"]:
            lines.append(f"  {r['threshold']:>6}: goodput {_num(r['goodput_qps'])} req/s; hot P99 TTFT "
                         f"{_num(r['hot']['p99_ttft_s'])}s e2e {_num(r['hot']['p99_e2e_s'])}s; cold P99 TTFT "
                         f"{_num(r['cold']['p99_ttft_s'])}s e2e {_num(r['cold']['p99_e2e_s'])}s"
                         + (f"  ({', '.join(r['labels'])})" if r["labels"] else ""))
    return "\n".join(lines).rstrip() + "\n"
