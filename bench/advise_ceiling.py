"""Benchmark: how far the ground truth's own P99 moves when its workload is replayed only as well as its metrics
can tell it, the ceiling on what a twin that redraws the workload can fit.

The ground truth of the must-show (tests/advise's: preset a100-13b, hidden --time-scale 1.6, told --max-num-seqs 16
--max-num-batched-tokens 2048, 3 req/s of chat-like traffic, a 900 s window read every 5 s as the doctor reads it)
is run on its own trace, then again on that trace changed the way a replay from the engine's metrics changes it:
(a) each arrival moved to a random time inside its own 5 s read interval (what arrivals per read tell), (b) the
lengths redrawn from the same distribution (what a length histogram tells), (c) both. Printed: the change of the
measured P99 TTFT, P99 e2e and throughput against the run on the true trace, per seed.

    .venv/bin/python bench/advise_ceiling.py [--seeds N] [--format text|json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from advise import SPREAD_TOLD, WARMUP_S, WINDOW_S, _measured  # bench/advise.py's ground truth and its reading

from sim.workload import RequestSpec, WorkloadSpec, generate

READ_EVERY_S = 5.0
CHECKED = ("p99_ttft_s", "p99_e2e_s", "qps")


def _spec(seed: int) -> WorkloadSpec:
    return WorkloadSpec(rate_qps=3.0, duration_s=WARMUP_S + WINDOW_S + 30, seed=seed)


def moved(requests: Sequence[RequestSpec], rng: random.Random) -> list[RequestSpec]:
    """Each arrival at a random time inside its own read interval (reads every 5 s from the window's start)."""
    out = []
    for r in requests:
        k = (r.arrival_s - WARMUP_S) // READ_EVERY_S
        out.append(replace(r, arrival_s=max(0.0, WARMUP_S + (k + rng.random()) * READ_EVERY_S)))
    out.sort(key=lambda r: r.arrival_s)
    return [replace(r, index=i) for i, r in enumerate(out)]


def redrawn(requests: Sequence[RequestSpec], seed: int) -> list[RequestSpec]:
    """The same arrivals with lengths from another draw of the same distribution."""
    other = generate(replace(_spec(seed), duration_s=None, num_requests=len(requests), normalize=False))
    return [replace(r, prompt_tokens=o.prompt_tokens, output_tokens=o.output_tokens, long=o.long,
                    prefix_group=o.prefix_group, prefix_tokens=o.prefix_tokens)
            for r, o in zip(requests, other, strict=True)]


def ceiling(seeds: Sequence[int]) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        trace = generate(_spec(seed))
        truth = _measured([], trace, SPREAD_TOLD)
        variants = {"arrivals moved": moved(trace, random.Random(seed)),
                    "lengths redrawn": redrawn(trace, 1000 + seed)}
        variants["both"] = moved(variants["lengths redrawn"], random.Random(seed))
        row: dict[str, Any] = {"seed": seed, "truth": {k: truth[k] for k in CHECKED}, "changes": {}}
        for name, reqs in variants.items():
            got = _measured([], reqs, SPREAD_TOLD)
            row["changes"][name] = {k: got[k] / truth[k] - 1.0 if truth.get(k) else None for k in CHECKED}
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["the ground truth against itself (must-show traffic, 3 req/s, told --max-num-seqs 16): change of the "
             "measured figure", f"{'seed':>4}  {'variant':16}{'P99 TTFT':>10}{'P99 e2e':>10}{'qps':>8}"]
    for r in rows:
        t = r["truth"]
        lines.append(f"{r['seed']:>4}  {'(true trace)':16}{t['p99_ttft_s']:>9.2f}s{t['p99_e2e_s']:>9.1f}s"
                     f"{t['qps']:>8.3f}")
        for name, c in r["changes"].items():
            lines.append(f"{'':4}  {name:16}" + "".join(f"{v:>+10.1%}" if i < 2 else f"{v:>+8.1%}"
                                                         for i, v in enumerate(c[k] for k in CHECKED)))
    for name in ("arrivals moved", "lengths redrawn", "both"):
        for k in CHECKED:
            vs = [r["changes"][name][k] for r in rows]
            lines.append(f"{name} {k}: {min(vs):+.1%} .. {max(vs):+.1%}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--format", choices=("text", "json"), default="text")
    ns = p.parse_args(argv)
    rows = ceiling(range(1, ns.seeds + 1))
    print(json.dumps(rows, indent=1) if ns.format == "json" else render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
