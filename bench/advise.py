"""Benchmark: `doctor advise` against a sim ground truth, for three workloads (chat-like short prompts, long
documents, a mix), and the spread of the twin's fit over seeds.

For each workload a ground-truth sim engine (preset a100-13b with a step-time scale the advisor is not told,
`--max-num-seqs 64 --max-num-batched-tokens 2048`) serves generated traffic in virtual time; `doctor advise` reads
it through its real entry point (the network, clock and waits are the harness's, trials.sim_io), fits its twin and
searches. Then the ground truth is rerun on the same trace with the current settings, the seed article's rules and
the twin's recommendation, and the three are printed side by side, measured (goodput within the SLOs, P99 TTFT and
e2e), with the twin's prediction and the time the advice took (CPU seconds on this machine, virtual traffic).
`--seeds N` also reruns the ground truth's traffic draw N times and prints the fit errors on P99 TTFT, P99 e2e and
throughput per seed (the must-show bound is 15%).

    .venv/bin/python bench/advise.py [--seeds N | --seed-list 2,4] [--only workloads|seeds] [--draws N]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot
from doctor.advise.cli import main as advise
from doctor.advise.twin import goodput, measure
from sim.workload import RequestSpec, WorkloadSpec, generate
from trials.scenario import ScenarioHarness
from trials.sim_io import SimNetwork, engine_url

HIDDEN_SCALE = "1.6"
TOLD = ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]
WARMUP_S, WINDOW_S = 60.0, 900.0
SLO = {"p99_ttft_s": 2.0, "p99_e2e_s": 30.0}
WORKLOADS = {
    "chat": WorkloadSpec(rate_qps=2.5, duration_s=WARMUP_S + WINDOW_S + 30, prompt_median=250, output_median=60),
    "documents": WorkloadSpec(rate_qps=0.35, duration_s=WARMUP_S + WINDOW_S + 30, prompt_median=3000,
                              prompt_cap=8000, long_share=0.3, long_min=4096, long_max=12000, output_median=150),
    "mix": WorkloadSpec(rate_qps=1.2, duration_s=WARMUP_S + WINDOW_S + 30, prompt_median=700, long_share=0.1,
                        long_min=4096, long_max=8192, output_median=80),
}


def _truth(flags: Sequence[str], requests: Sequence[RequestSpec], told: Sequence[str] = TOLD
           ) -> tuple[ScenarioHarness, SimNetwork]:
    h = ScenarioHarness(seed=5)
    h.add_engine("gt", ["m", "--preset", "a100-13b", "--time-scale", HIDDEN_SCALE, *told, *flags])
    h.engines["gt"].core.seen_batch_classes.update(1 << i for i in range(21))  # long past its start (no cold start)
    h.load(requests)
    h.run_for(WARMUP_S)
    net = SimNetwork(h)
    net.register(engine_url("gt"), "gt")
    return h, net


def _measured(flags: Sequence[str], requests: Sequence[RequestSpec], told: Sequence[str] = TOLD) -> dict[str, Any]:
    h, _ = _truth(flags, requests, told)
    chain: list[MetricsSnapshot] = []
    since = h.now
    while True:
        chain.append(parse_metrics(h.metrics_text("gt"), h.now))
        if h.now >= since + WINDOW_S - 1e-9:
            break
        h.run_for(5.0)
    c = h.engines["gt"].core.config
    p = measure(chain, EngineConfigView(max_num_seqs=c.max_num_seqs, max_num_batched_tokens=c.max_num_batched_tokens))
    return {**p.to_dict(), "goodput_qps": goodput(h.records, since, since + WINDOW_S, SLO)}


def _advise(requests: Sequence[RequestSpec], config: Path, extra: Sequence[str] = (), told: Sequence[str] = TOLD
            ) -> tuple[dict[str, Any], float]:
    h, net = _truth([], requests, told)

    async def wait(s: float) -> None:
        h.run_for(s)

    out = io.StringIO()
    started = time.process_time()
    advise(["--config", str(config), "--sample", f"{WINDOW_S:g}s", "--format", "json", *extra], out=out,
           err=io.StringIO(), transport=net.transport(), clock=lambda: h.now, sleep=wait)
    return json.loads(out.getvalue())["engines"][0], time.process_time() - started


def _config(tmp: Path, seqs: int = 64) -> Path:
    path = tmp / "doctor.toml"
    path.write_text("\n".join(["[[engines]]", 'name = "gt"', f'url = "{engine_url("gt")}"', f"max_num_seqs = {seqs}",
                               "max_num_batched_tokens = 2048", "[engines.slo]",
                               *(f'{k} = "{v}s"' for k, v in SLO.items())]) + "\n")
    return path


def side_by_side(tmp: Path, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    rows = []
    for name, spec in WORKLOADS.items():
        requests = generate(spec)
        e, took = _advise(requests, _config(tmp), extra)
        row: dict[str, Any] = {"workload": name, "advice_cpu_s": round(took, 2), "withheld": e.get("withheld"),
                               "error": e.get("error"), "fit": e.get("fit") and e["fit"]["errors"], "columns": {}}
        if e.get("recommendation"):
            for label, key in (("current", "current"), ("seed rules", "seed_rules"), ("twin", "twin_best")):
                cand = e[key]
                flags = cand["settings"]["vllm_flags"].split()
                row["columns"][label] = {"flags": cand["settings"]["vllm_flags"], "note": cand["note"],
                                         "predicted": cand["predicted"], "measured": _measured(flags, requests)}
        rows.append(row)
    return rows


SPREAD_TOLD = ["--max-num-seqs", "16", "--max-num-batched-tokens", "2048"]  # tests/advise/test_must_show.py's
CHECKED = ("p99_ttft_s", "p99_e2e_s", "qps")


def seed_spread(tmp: Path, seeds: Sequence[int], extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The must-show over traffic draws: fit errors, and the recommendation applied to the ground truth."""
    out = []
    for seed in seeds:
        requests = generate(WorkloadSpec(rate_qps=3.0, duration_s=WARMUP_S + WINDOW_S + 30, seed=seed))
        e, took = _advise(requests, _config(tmp, 16), ["--chunked-grid", "on", "--max-num-seqs-grid", "16,32,64",
                                                       "--batched-tokens-grid", "2048", *extra], SPREAD_TOLD)
        fit = e.get("fit") or {}
        row: dict[str, Any] = {"seed": seed, "time_scale": fit.get("time_scale"), "cpu_s": round(took, 2),
                               "withheld": e.get("withheld"),
                               "errors": {k: (fit.get("errors") or {}).get(k) for k in CHECKED}}
        rec = e.get("recommendation")
        if rec:
            after = _measured(rec["vllm_flags"].split(), requests, SPREAD_TOLD)
            pred = e["twin_best"]["predicted"]
            row["recommended"] = rec["vllm_flags"]
            row["prediction_errors"] = {k: abs(pred[k] - after[k]) / after[k] if after.get(k) else None
                                        for k in CHECKED}
        out.append(row)
    return out


def _f(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.1%}" if pct else f"{v:.3g}"


def render(rows: list[dict[str, Any]], spread: list[dict[str, Any]]) -> str:
    lines = [f"ground truth: a100-13b, hidden --time-scale {HIDDEN_SCALE}, {' '.join(TOLD)}; window {WINDOW_S:g}s; "
             f"SLO TTFT <= {SLO['p99_ttft_s']:g}s, e2e <= {SLO['p99_e2e_s']:g}s per request", ""]
    for r in rows:
        lines.append(f"{r['workload']}: advice took {r['advice_cpu_s']:.1f} CPU s; fit errors "
                     + (", ".join(f"{k} {_f(v, True)}" for k, v in (r["fit"] or {}).items()) or "-"))
        if r["withheld"] or r["error"]:
            lines += [f"  no advice: {r['withheld'] or r['error']}", ""]
            continue
        lines.append(f"  {'':10}{'goodput':>18}{'P99 TTFT s':>18}{'P99 e2e s':>18}   flags")
        lines.append(f"  {'':10}{'meas / pred':>18}{'meas / pred':>18}{'meas / pred':>18}")
        for label, c in r["columns"].items():
            m, p = c["measured"], c["predicted"] or {}
            cells = "".join(f"{_f(m.get(k)) + ' / ' + _f(p.get(k)):>18}" for k in ("goodput_qps", "p99_ttft_s",
                                                                                   "p99_e2e_s"))
            lines.append(f"  {label:10}{cells}   {c['flags']}")
        lines.append("")
    if spread:
        lines.append("must-show over ground-truth seeds (chat-like traffic at 3 req/s, told --max-num-seqs 16; bounds: "
                     "fit 15%, prediction after the change 20%):")
        for s in spread:
            lines.append(f"  seed {s['seed']}: scale {_f(s['time_scale'])} (truth {HIDDEN_SCALE}); fit "
                         + ", ".join(f"{k} {_f(v, True)}" for k, v in s["errors"].items())
                         + (f"; after {s['recommended']}: " + ", ".join(
                             f"{k} {_f(v, True)}" for k, v in s["prediction_errors"].items())
                            if s.get("recommended") else f"; withheld: {s['withheld']}")
                         + f"; {s['cpu_s']:.1f} CPU s")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--seeds", type=int, default=5, help="ground-truth traffic seeds 1..N for the spread")
    p.add_argument("--seed-list", help="these seeds instead, e.g. 2,4")
    p.add_argument("--only", choices=("workloads", "seeds"), help="run one half only")
    p.add_argument("--draws", type=int, help="doctor advise --draws (default: its own)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    ns = p.parse_args(argv)
    import tempfile

    extra = [] if ns.draws is None else ["--draws", str(ns.draws)]
    seeds = [int(x) for x in ns.seed_list.split(",")] if ns.seed_list else list(range(1, ns.seeds + 1))
    with tempfile.TemporaryDirectory() as tmp:
        rows = side_by_side(Path(tmp), extra) if ns.only != "seeds" else []
        spread = seed_spread(Path(tmp), seeds, extra) if ns.only != "workloads" else []
    print(json.dumps({"workloads": rows, "seeds": spread}, indent=1) if ns.format == "json" else render(rows, spread))
    return 0


if __name__ == "__main__":
    sys.exit(main())
