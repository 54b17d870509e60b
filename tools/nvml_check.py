"""Check collectors.gpu.NvmlSource against a real GPU (run by hand on a GPU machine; not a test).

    python tools/nvml_check.py --seconds 30 --out nvml_check.json

Phases: idle, then (when torch is installed) `matmul` (compute-bound: SM high) and `copy`
(memory-bound: DRAM high), with 1 GiB more held halfway through `copy` so that memory_growth_ratio
has a known expected value. NvmlSource is read every --interval seconds; a table is printed and
everything is written as JSON. Exit 0 when read, 2 when there is no GPU (the reason is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from collectors.gpu import GpuUnavailable, NvmlSource, engine_fb_bytes, gpu_signals

GIB = 1024**3


class Load(threading.Thread):
    """CUDA work in a thread: `phase` says what runs now ("idle", "matmul", "copy")."""

    def __init__(self, torch: Any, gpu: int) -> None:
        super().__init__(daemon=True)
        self.torch, self.dev = torch, torch.device(f"cuda:{gpu}")
        self.phase, self.stop, self.extra = "idle", False, None
        self.a = torch.randn(8192, 8192, device=self.dev, dtype=torch.bfloat16)
        self.b = torch.randn(8192, 8192, device=self.dev, dtype=torch.bfloat16)
        self.src = torch.empty(GIB // 2, dtype=torch.uint8, device=self.dev)
        self.dst = torch.empty_like(self.src)
        torch.cuda.synchronize(self.dev)

    def grow(self) -> None:
        self.extra = self.torch.ones(GIB, dtype=self.torch.uint8, device=self.dev)
        self.torch.cuda.synchronize(self.dev)

    def run(self) -> None:
        while not self.stop:
            if self.phase == "matmul":
                for _ in range(20):
                    self.a @ self.b
            elif self.phase == "copy":
                for _ in range(20):
                    self.dst.copy_(self.src)
            else:
                time.sleep(0.05)
                continue
            self.torch.cuda.synchronize(self.dev)


def sample(src: NvmlSource, gpu: int, phase: str, t0: float, baseline: float | None, pids: set[int] | None,
           rows: list[dict[str, Any]]) -> None:
    r = src.read([gpu])
    values, reasons = gpu_signals(r, baseline_fb_bytes=baseline, pids=pids)
    g = r[0]
    row = {"t_s": round(time.monotonic() - t0, 2), "phase": phase, "dram": g.dram_utilization,
           "sm": g.sm_utilization, "fb_used_gib": g.fb_used_bytes / GIB, "fb_total_gib": g.fb_total_bytes / GIB,
           "power_w": g.power_w, "temp_c": g.temperature_c, "xid_last": g.xid_last, "ecc_dbe": g.ecc_dbe_total,
           "processes": [list(p) for p in g.processes], "notes": list(g.notes), "signals": values,
           "reasons": reasons}
    rows.append(row)
    fmt = "{:>6.1f} {:<7} {:>5} {:>5} {:>8.2f} {:>8} {:>5} {:>8}"
    pct = lambda v: "-" if v is None else f"{v:.0%}"  # noqa: E731
    growth = values["memory_growth_ratio"]
    print(fmt.format(row["t_s"], phase, pct(g.dram_utilization), pct(g.sm_utilization), row["fb_used_gib"],
                     "-" if g.power_w is None else f"{g.power_w:.0f}", "-" if g.temperature_c is None
                     else f"{g.temperature_c:.0f}", "-" if growth is None else f"{growth:.3f}"), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="load duration (split matmul/copy)")
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--no-load", action="store_true", help="sample an idle GPU only")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    src = NvmlSource()
    out: dict[str, Any] = {"gpu": args.gpu, "pid": os.getpid(), "samples": []}
    try:
        first = src.read([args.gpu])[0]
    except GpuUnavailable as exc:
        print(f"no GPU: {exc.reason}")
        out["unavailable"] = exc.reason
        args.out.write_text(json.dumps(out, indent=1))
        return 2
    out.update(name=first.name, uuid=first.uuid, fb_total_gib=first.fb_total_bytes / GIB)
    print(f"GPU {args.gpu}: {first.name} {first.uuid}, {first.fb_total_bytes / GIB:.1f} GiB")
    load = None
    if not args.no_load:
        try:
            import torch

            load = Load(torch, args.gpu)
            load.start()
        except Exception as exc:  # no torch, or no CUDA in torch
            out["load_error"] = f"{type(exc).__name__}: {exc}"
            print(f"no load ({out['load_error']}): sampling an idle GPU")
    print("{:>6} {:<7} {:>5} {:>5} {:>8} {:>8} {:>5} {:>8}".format("t_s", "phase", "dram", "sm", "fb_GiB",
                                                                     "power_W", "temp", "growth"))
    t0, rows = time.monotonic(), out["samples"]
    baseline: float | None = None
    pids: set[int] | None = None
    plan = [("idle", 3.0)] + ([] if load is None else [("matmul", args.seconds / 2), ("copy", args.seconds / 2)])
    for phase, seconds in plan:
        if load is not None:
            load.phase = phase
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if phase == "copy" and load is not None and load.extra is None and time.monotonic() > end - seconds / 2:
                load.grow()
                out["grown_at_s"] = round(time.monotonic() - t0, 2)
            sample(src, args.gpu, phase, t0, baseline, pids, rows)
            if baseline is None and phase == "matmul":  # post-warm-up footprint: this process, else the GPU
                readings = src.read([args.gpu])
                mine = any(p == os.getpid() for p, _ in readings[0].processes)
                pids = {os.getpid()} if mine else None
                baseline = engine_fb_bytes(readings, pids)
                out.update(baseline_gib=baseline / GIB, own_pid_in_nvml=mine)
                out["expected_growth_after_grow"] = GIB / baseline
            time.sleep(args.interval)
    if load is not None:
        load.stop = True
        load.join(10)
    src.close()
    for phase in ("idle", "matmul", "copy"):
        got = [r for r in rows if r["phase"] == phase and r["dram"] is not None]
        if got:
            out[f"mean_{phase}"] = {k: sum(r[k] for r in got) / len(got) for k in ("dram", "sm", "power_w")
                                    if all(r[k] is not None for r in got)}
            print(f"mean {phase}: " + ", ".join(f"{k}={v:.3f}" for k, v in out[f"mean_{phase}"].items()))
    if rows:
        print("last gpu_signals:", json.dumps(rows[-1]["signals"]))
        print("expected growth after +1 GiB:", out.get("expected_growth_after_grow"))
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
