"""`doctor advise --apply`: the recommended change through the remediation path, then the prediction checked.

The change is a finding of playbook `advise` whose remedy is a `relaunch` with the recommended arguments, handed to
the same `Remediator.fix` that `doctor diagnose --fix` uses (mode, approval, guardrails, the launcher: blue/green
where spare GPUs exist, else in place). Once it is applied (the launcher returns when the new engine answers
/health and is warmed up), the engine is read again over a window under the traffic it gets, and the twin's
prediction is compared with what it measured: the error per metric goes to the output and to the audit log
(event `prediction_checked`), so the twin's trust is measured, not assumed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from collectors.window import window_view
from doctor.advise import AdviseError
from doctor.advise.fit import errors
from doctor.advise.read import EngineWindow, read_windows
from doctor.advise.twin import Prediction, measure
from doctor.advise.workload import profile_of
from playbooks.model import Action, Evidence, Finding

PLAYBOOK = "advise"
KEYS = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")
SAME_TRAFFIC = 0.2  # after/before arrival rates further apart than this: the comparison is not like for like

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class ApplyOptions:
    yes: bool  # approve mode: approved from this terminal
    check_s: float  # the window read after the change
    every_s: float
    settle_s: float  # wait this long after the engine is back before the check window opens
    timeout_s: float  # of each HTTP read
    min_requests: int


def change_params(result: Mapping[str, Any]) -> dict[str, Any]:
    """The vLLM arguments the recommendation changes against the current settings (None: the engine's default)."""
    rec = result.get("recommendation") or {}
    cur = ((result.get("current") or {}).get("settings")) or {}
    out: dict[str, Any] = {}
    for k in KEYS:
        v = rec.get(k)
        if v is not None and v != cur.get(k):
            out[k] = v
    return out


def advice_finding(result: Mapping[str, Any], now: float) -> Finding | None:
    """The advice as a finding the remediator plans like any other (None: no change recommended)."""
    rec = result.get("recommendation")
    params = change_params(result)
    if not rec or not rec.get("change") or not params:
        return None
    best = (result.get("twin_best") or {}).get("predicted") or {}
    cur = (result.get("current") or {}).get("predicted") or {}
    window = float((result.get("workload") or {}).get("window_s") or 0.0)
    evidence = tuple(Evidence(f"predicted {m}", best.get(m), cur.get(m), window, comparison="vs current",
                              note="twin: recommended vs current settings")
                     for m in ("goodput_qps", "p99_ttft_s", "p99_e2e_s") if best.get(m) is not None)
    action = Action("relaunch", str(result["engine"]), {**params, "reason": "doctor advise: " + rec["serve_line"]},
                    risk="medium", description="relaunch with the settings the twin recommends")
    return Finding(PLAYBOOK, str(result["engine"]), "warning", 0.5,
                   f"the twin predicts {' '.join(rec['vllm_flags'].split()[:6])} ... does better on this traffic",
                   evidence, (action,), "docs/advise.md", onset=now, title="doctor advise: a better setting")


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def check(predicted: Mapping[str, Any], before: EngineWindow, after: EngineWindow,
          replayed: Callable[[EngineWindow], Prediction | str] | None = None) -> dict[str, Any]:
    """What the engine measured after the change against the twin's prediction, and whether the traffic stayed
    the same (arrival rate within SAME_TRAFFIC). `replayed`: the twin (fitted, the new settings) on the after
    window's own workload, so the twin's error is told apart from the traffic's change."""
    if len(after.chain) < 2:
        return {"checked": False, "why": f"{len(after.chain)} read(s) of /metrics after the change: nothing to "
                "compare" + (f" ({'; '.join(after.problems)})" if after.problems else "")}
    measured = measure(after.chain, after.config)
    pred = Prediction({k: v for k, v in predicted.items() if isinstance(v, int | float)}, None, None, 0)
    errs = errors(pred, measured)
    rates: list[float | None] = []
    for w in (before, after):
        try:
            rates.append(profile_of(w.ref.name, w.ref.role, window_view(w.chain), w.chain, w.config).rate_qps)
        except AdviseError:  # no requests finished in that window
            rates.append(None)
    ratio = rates[1] / rates[0] if rates[0] and rates[1] is not None else None
    known = [e for e in errs.values() if e is not None]
    out: dict[str, Any] = {
        "checked": True, "window_s": round(after.chain[-1].timestamp - after.chain[0].timestamp, 3),
        "requests": measured.requests, "measured": measured.to_dict(),
        "predicted": {m: predicted.get(m) for m in errs},
        "errors": {k: None if v is None else round(v, 4) for k, v in errs.items()},
        "worst_error": round(max(known), 4) if known else None,
        "traffic_ratio": None if ratio is None else round(ratio, 4),
        "same_traffic": ratio is not None and abs(ratio - 1) <= SAME_TRAFFIC,
    }
    if replayed is not None and measured.requests > 0:
        again = replayed(after)
        if isinstance(again, str):
            out["replayed"] = {"why": again}
        else:
            rerr = errors(again, measured)
            rknown = [e for e in rerr.values() if e is not None]
            out["replayed"] = {"predicted": {m: again.get(m) for m in rerr},
                               "errors": {k: None if v is None else round(v, 4) for k, v in rerr.items()},
                               "worst_error": round(max(rknown), 4) if rknown else None}
    if measured.requests < 1:
        out["note"] = "no request finished in the window after the change"
    elif not out["same_traffic"]:
        out["note"] = (f"the arrival rate changed ({rates[0]} -> {rates[1]} req/s): the prediction was made for the "
                       "traffic before the change, so the error is not like for like")
    return out


async def apply_advice(results: list[dict[str, Any]], windows: list[EngineWindow], remediator: Any,
                       opts: ApplyOptions, *, clock: Callable[[], float] = time.time, sleep: Sleep,
                       transport: httpx.AsyncBaseTransport | None = None,
                       replay: Callable[[str, EngineWindow], Prediction | str] | None = None) -> None:
    """For each engine whose advice is a change: plan, apply within the guardrails, check the prediction.
    Each result gets an `applied` object (what happened, and the check when it was applied)."""
    by_name = {w.ref.name: w for w in windows}
    for result in results:
        finding = advice_finding(result, clock()) if not result.get("error") and not result.get("withheld") \
            else None
        if finding is None:
            if result.get("recommendation") is not None or result.get("withheld"):
                result["applied"] = {"status": "nothing", "reason": "advice withheld" if result.get("withheld")
                                     else "no change recommended: nothing to apply"}
            continue
        records = await remediator.fix([finding], {}, trigger="advise", yes=opts.yes)
        if not records:
            result["applied"] = {"status": "observe", "reason": "observe mode: nothing applied (set [doctor] mode, "
                                 "or give --mode dry-run|approve|auto)"}
            continue
        rec = records[0]
        out: dict[str, Any] = {"id": rec.id, "status": rec.status, "reason": rec.reason, "steps": list(rec.steps),
                               "params": dict(finding.remedies[0].params)}
        result["applied"] = out
        if rec.status != "applied":
            continue
        await remediator.verify([rec], _nothing, wait_s=0.0)  # advise's relaunch has no signal to verify: the
        # prediction check below is its verification, recorded with the record
        target = remediator.ctx.engines[result["engine"]]
        before = by_name[result["engine"]]
        ref = dataclasses.replace(before.ref, url=target.url, config={
            **before.ref.config, **{k: v for k, v in target.args.items()
                                    if isinstance(v, int | float) and not isinstance(v, bool)}})
        out["url"] = target.url
        if opts.settle_s > 0:
            await sleep(opts.settle_s)
        (after,) = await read_windows([ref], state_dir=None, sample_s=opts.check_s, every_s=opts.every_s,
                                      window_s=opts.check_s + opts.every_s, timeout_s=opts.timeout_s, clock=clock,
                                      sleep=sleep, transport=transport)
        predicted = (result.get("twin_best") or {}).get("predicted") or {}
        got = check(predicted, before, after, functools.partial(replay, str(result["engine"])) if replay else None)
        if got.get("checked") and got["requests"] < opts.min_requests:
            got["note"] = (f"{got['requests']} requests finished in the window after the change, fewer than "
                           f"{opts.min_requests}: the error is noisy")
        out["prediction"] = got
        remediator.audit.write("prediction_checked", rec, **{k: got.get(k) for k in (
            "checked", "why", "window_s", "requests", "predicted", "measured", "errors", "worst_error",
            "traffic_ratio", "same_traffic", "replayed", "note")})
        out["status"] = rec.status
        out["reason"] = ("applied; prediction checked: worst error " + (
            f"{got['worst_error']:.1%}" if got.get("worst_error") is not None else "unknown")
            if got.get("checked") else f"applied; prediction not checked: {got.get('why')}")


async def _nothing() -> dict[str, Any]:
    return {}
