"""Benchmark: detection accuracy of the playbooks over the incident scenarios (virtual time, sim.harness).

Runs every scenario of `sim.scenarios` for a few seeds through `trials.accuracy.run_in_harness` and
prints, per scenario: how often the expected playbook fired after the symptom onset, its first remedy,
the detection delay (onset to the first evaluation that reported it; median and worst over seeds),
and a confusion table (expected playbook vs every playbook that fired a warning or critical finding,
counted per run; info findings in brackets). Healthy runs at three load levels show false alarms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim.scenarios import SCENARIOS, Scenario, healthy
from trials.accuracy import ScenarioResult, run_in_harness


def _fmt_delay(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.0f} / {max(values):.0f}"


def _runs(scenarios: list[Scenario], seeds: list[int], eval_every_s: float) -> dict[str, list[ScenarioResult]]:
    out: dict[str, list[ScenarioResult]] = {}
    for sc in scenarios:
        out[sc.name] = [run_in_harness(sc, seed=s, eval_every_s=eval_every_s) for s in seeds]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--seeds", type=int, default=3, help="seeds per scenario (default 3)")
    p.add_argument("--eval-every", type=float, default=30.0, help="seconds between doctor runs (default 30)")
    p.add_argument("--scenario", action="append", default=[], help="only these scenarios (repeatable)")
    p.add_argument("--live", type=float, default=180.0, metavar="SECONDS",
                   help="also run a subset over HTTP at real rates for this long (0: skip; default 180)")
    p.add_argument("--live-interval", type=float, default=15.0, help="seconds between live cron runs (default 15)")
    ns = p.parse_args(argv)
    if ns.seeds < 1:
        p.error("--seeds must be >= 1")
    unknown = [n for n in ns.scenario if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}")
    seeds = list(range(ns.seeds))
    chosen = [SCENARIOS[n] for n in (ns.scenario or SCENARIOS)]
    if not ns.scenario:
        chosen += [healthy(0.2), healthy(0.7)]
    t0 = time.perf_counter()
    results = _runs(chosen, seeds, ns.eval_every)
    wall = time.perf_counter() - t0

    print(f"{len(chosen)} scenarios x {len(seeds)} seeds, a doctor run every {ns.eval_every:g}s of virtual time; "
          f"{wall:.1f}s wall")
    missing = next(iter(results.values()))[0].missing_playbooks
    if missing:
        print(f"playbooks not written yet (not evaluated): {', '.join(missing)}")
    print()
    print(f"{'scenario':<22} {'expected':<21} {'detected':>8} {'delay s med/max':>16} {'first remedy':<20} "
          f"{'false alarms (runs)':<30}")
    for name, runs in results.items():
        sc = runs[0].scenario
        delays = [r.detection_delay_s for r in runs if r.detection_delay_s is not None]
        remedies = Counter(r.first_remedy for r in runs if r.first_remedy is not None)
        remedy = ", ".join(f"{k}" + (f" x{v}" if len(remedies) > 1 else "") for k, v in remedies.most_common())
        fps = Counter(fp for r in runs for fp in {f"{x.playbook}/{x.engine}" for x in r.false_positives})
        fp_text = ", ".join(f"{k} ({v})" for k, v in fps.most_common()) or "-"
        expected = sc.expected_playbook or "(none)"
        detected = f"{len(delays)}/{len(runs)}" if sc.expected_playbook else "-"
        ok = "" if not sc.expected_playbook or remedy.startswith(sc.expected_remedy or "") else " (!)"
        print(f"{name:<22} {expected:<21} {detected:>8} {_fmt_delay(delays):>16} {remedy + ok or '-':<20} "
              f"{fp_text:<30}")

    print()
    print("confusion: runs in which each playbook fired (warning/critical; [info]), by scenario")
    fired_ids: list[str] = []
    per: dict[str, Counter[str]] = {}
    for name, runs in results.items():
        c: Counter[str] = Counter()
        for r in runs:
            seen: set[str] = set()
            for ev in r.evaluations:
                for f in ev.findings:
                    seen.add(f.playbook if f.severity != "info" else f"[{f.playbook}]")
            c.update(seen)
        per[name] = c
        for k in c:
            if k not in fired_ids:
                fired_ids.append(k)
    fired_ids.sort(key=lambda k: (k.startswith("["), k))
    short = {k: k.strip("[]")[:12] + ("*" if k.startswith("[") else "") for k in fired_ids}
    print(f"{'scenario -> fired':<22} " + " ".join(f"{short[k]:>13}" for k in fired_ids))
    for name, c in per.items():
        exp = results[name][0].scenario.expected_playbook
        cells = []
        for k in fired_ids:
            n = c.get(k, 0)
            mark = "<" if k == exp else " "
            cells.append(f"{(str(n) + mark) if n else '.':>13}")
        print(f"{name:<22} " + " ".join(cells))
    print("(* info severity; < the expected playbook; counts are runs out of "
          f"{len(seeds)})")
    if ns.live > 0:
        from live_detection import run_live

        print()
        print("\n".join(run_live(ns.live_interval, ns.live)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
