"""`doctor demo`: the whole loop on loopback, told as a short story with numbers.

A hot and a cold simulated vLLM engine (the seed's settings) sit behind the hot/cold router. Clients
send chat-sized prompts, and part-way through a storm of very long documents arrives. Every few
seconds the doctor runs as cron would (`doctor diagnose --fix`, auto mode, within its guardrails):
it finds the incident, applies the first remedy, and the P99 the clients see recovers. When the storm
is over and the cold engine's backlog has drained (judged over a minute, so after the demo's load as a
rule), the doctor lifts its emergency limit again (after 30 s without a refusal and its 60 s cooldown
here; 10 and 15 minutes by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from doctor import demo_tui
from doctor.remedy.engine_procs import free_port
from router.config import RouterConfig
from router.server import RouterThread
from sim.engine_cli import EngineThread
from sim.gpu import MemoryLedger
from sim.loadgen import RequestResult, run_load
from sim.timeline_file import PhaseMark, write_timeline
from sim.workload import WorkloadSpec, generate

TOKEN = "demo-policy-token"
# CUDA graphs (vLLM's default): captured at start-up, so the engines pay no first-request stalls; each start (and
# a relaunch) pays the modelled start-up before it listens (sim.startup), x --time-scale.
HOT = ["seed-model", "--max-num-seqs", "16", "--max-num-batched-tokens", "5120", "--gpu-memory-utilization", "0.85",
       "--max-model-len", "32768"]
COLD = ["seed-model", "--enable-chunked-prefill", "--max-model-len", "32768", "--max-num-seqs", "2",
        "--gpu-memory-utilization", "0.85"]


def _p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _window_stats(results: list[RequestResult], lo: float, hi: float) -> tuple[float | None, int, int, int]:
    """P99 TTFT of requests sent in [lo, hi) that were served, and counts: served, rejected (413), unfinished."""
    sent = [r for r in results if r.sent_s is not None and lo <= r.sent_s < hi]
    ttfts = [r.ttft_s for r in sent if r.success and r.ttft_s is not None]
    rejected = sum(1 for r in sent if r.status == 413)
    return _p99(ttfts), len(ttfts), rejected, len(sent) - len(ttfts) - rejected


def _fmt(v: float | None) -> str:
    return "   -  " if v is None else f"{v * 1000:6.0f} ms"


async def _doctor_loop(config: Path, seconds: float, every: float, say: Any) -> list[tuple[float, str]]:
    """Run `doctor diagnose --fix` every `every` seconds, narrating findings and actions; returns what was applied."""
    applied: list[tuple[float, str]] = []
    seen_findings: set[str] = set()
    seen_actions: set[tuple[str, str]] = set()
    seen_refusals: set[tuple[str, str]] = set()  # (action, target): a refusal is told once
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        await asyncio.sleep(every)
        # A separate process, as cron runs it.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "doctor.cli", "diagnose", "--config", str(config), "--fix", "--format", "json",
            "--verify-wait", "0", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        try:
            report = json.loads(out.decode())
        except ValueError:
            say(f"doctor could not run: {err.decode().strip()[:300]}")
            continue
        t = time.monotonic() - started
        for f in report["findings"]:
            if f["id"] not in seen_findings and f["severity"] != "info":
                seen_findings.add(f["id"])
                ev = f["evidence"][0]
                say(f"t={t:4.0f}s  doctor: [{f['severity'].upper()}] {f['engine']}: {f['summary']} "
                    f"({ev['signal']} = {ev['value']}, threshold {ev['threshold']})")
        for a in report.get("actions", []):
            if a["status"] == "refused" and (a["action"], a["target"]) not in seen_refusals:
                seen_refusals.add((a["action"], a["target"]))
                say(f"t={t:4.0f}s  doctor: {a['action']} on {a['target']} not done: {a['reason']}")
            key = (a["id"], a["status"])
            if key not in seen_actions and a["status"] not in ("refused",):
                seen_actions.add(key)
                params = ", ".join(f"{k}={v}" for k, v in a["params"].items())
                why = f": {a['reason']}" if a["status"] == "expired" and a.get("reason") else ""
                say(f"t={t:4.0f}s  doctor: {a['action']} on {a['target']} ({params}) -> {a['status']}{why}")
                if a["status"] == "applied":
                    applied.append((t, f"{a['action']} ({params})"))
                elif a["status"] == "expired" and (a.get("reason") or "").startswith("lifted early"):
                    applied.append((t, "lift of the emergency length limit"))
    return applied


def _timeline(path: Path, seconds: float, storm_at: float, storm_for: float) -> None:
    """The demo's timeline for `doctor tui --timeline` (sim.timeline_file), t=0 now: when the load starts."""
    phases = [PhaseMark("baseline", 0.0, "chat traffic, 3% long prompts")] if storm_at > 0 else []
    phases.append(PhaseMark("incident", storm_at, "a storm of 9-16K-token documents (25% of requests)"))
    if storm_for > 0 and storm_at + storm_for < seconds:
        phases.append(PhaseMark("storm over", storm_at + storm_for, "back to chat traffic"))
    write_timeline(path, name="doctor demo", description="a long-document storm on the cold engine",
                   started_at=time.time(), phases=phases, end_s=seconds, expected="p99_spike on cold -> length_limit")


def demo_config(work: Path, router_url: str, hot_url: str, cold_url: str, *, tui: bool = False, port: int = 0,
                for_s: float | None = None) -> str:
    """The demo's doctor.toml (the checklist tests read the same deployment: tests/advise/test_checklist_demo.py)."""
    return (
        f'[doctor]\nstate_dir = "{work / "state"}"\nmode = "{"approve" if tui else "auto"}"\nsample_s = "8s"\n'
        'timeout_s = "60s"\n'
        'length_limit_lift_after_s = "30s"\ncooldown_s = "60s"\n\n'
        f'[router]\nurl = "{router_url}"\ntoken_env = "DEMO_ROUTER_TOKEN"\n\n'
        f'[[engines]]\nname = "hot"\nrole = "hot"\nurl = "{hot_url}"\nmax_model_len = 32768\nmax_num_seqs = 16\n'
        '[engines.slo]\np99_ttft_s = 2.0\n\n'
        f'[[engines]]\nname = "cold"\nrole = "cold"\nurl = "{cold_url}"\nmax_model_len = 32768\nmax_num_seqs = 2\n'
        '[engines.slo]\np99_ttft_s = 8.0\n' + (demo_tui.serve_section(work, port) if tui else "")
        + ("" if for_s is None else f'\n[playbooks.p99_spike]\nfor_s = "{for_s:g}s"\n'))


async def run_demo(seconds: float, rate: float, storm_at: float, storm_for: float, seed: int,
                   time_scale: float, tui: bool = False, for_s: float | None = None) -> int:
    say = print
    ledger = MemoryLedger()
    scale = ["--time-scale", str(time_scale)]
    say("starting the engines (vLLM start-up: weights, profiling, torch.compile, CUDA graphs) ...")
    hot = EngineThread([*HOT, *scale], ledger=ledger).launch()
    cold = EngineThread([*COLD, *scale], env={"CUDA_VISIBLE_DEVICES": "1"}, ledger=ledger).launch()
    hot.wait_ready()
    cold.wait_ready()
    router = RouterThread(RouterConfig(hot=[hot.url], cold=[cold.url], policy_file="", port=0), token=TOKEN).start()
    work = Path(tempfile.mkdtemp(prefix="doctor-demo-"))
    config = work / "doctor.toml"
    port = free_port("127.0.0.1")
    config.write_text(demo_config(work, router.url, hot.url, cold.url, tui=tui, port=port, for_s=for_s))
    os.environ["DEMO_ROUTER_TOKEN"] = TOKEN
    try:
        say("serving-doctor demo: hot and cold vLLM engines (simulated) behind the hot/cold router, on loopback.")
        say(f"  hot : {' '.join(HOT[1:])}\n  cold: {' '.join(COLD[1:])}\n  router: {router.url} "
            f"(prompts >= 5120 tokens go cold)\n  doctor: "
            f"{'`doctor serve` every 2 s, approve mode' if tui else '`doctor diagnose --fix` every 12 s, auto mode'}, "
            f"config {config}\n          (shortened for the demo: cooldown 60 s, an emergency limit lifted after 30 s "
            "without a refusal; defaults 15 and 10 minutes)")
        spec = WorkloadSpec(rate_qps=rate, duration_s=seconds, long_share=0.03, long_min=5200, long_max=8000,
                            seed=seed, schedule=((storm_at, 1.0, 0.25), (storm_at + storm_for, 1.0, 0.03)))
        storm_specs = generate(spec)
        # The storm's long prompts are documents of 9-16K tokens (over the 8192 emergency limit).
        specs = [s if not (s.long and storm_at <= s.arrival_s < storm_at + storm_for) else
                 type(s)(s.index, s.arrival_s, 9000 + (s.index * 7919) % 7000, s.output_tokens, True)
                 for s in storm_specs]
        say(f"\nload: {len(specs)} requests over {seconds:.0f} s at {rate} req/s; from t={storm_at:.0f}s to "
            f"t={storm_at + storm_for:.0f}s a storm of 9-16K-token documents (25% of requests)\n")
        if tui:
            say("opening doctor tui on doctor serve (approve mode): press 2 for the findings, a to approve a fix, "
                "q to quit")
            timeline = work / "timeline.json"

            def start_load() -> Any:
                _timeline(timeline, seconds, storm_at, storm_for)
                return run_load(router.url, specs, seed=seed, timeout_s=seconds * 3)

            return await demo_tui.run(config, work, port, start_load, say, timeline=timeline)
        load = asyncio.ensure_future(run_load(router.url, specs, seed=seed, timeout_s=seconds * 3))
        applied = await _doctor_loop(config, seconds, 12.0, say)
        result = await load
        say("\nwhat the clients saw: P99 time to first token of the requests sent in each 15 s that were served"
            "\n(served / rejected with 413 / still unfinished when the load ended):")
        step = 15.0
        lo = 0.0
        while lo < seconds:
            p_all, n, rej, pending = _window_stats(result.results, lo, lo + step)
            window = [r for r in result.results if r.sent_s is not None and lo <= r.sent_s < lo + step]
            short = [r for r in window if not r.long]
            long = [r for r in window if r.long]
            p_short = _p99([r.ttft_s for r in short if r.success and r.ttft_s is not None])
            p_long = _p99([r.ttft_s for r in long if r.success and r.ttft_s is not None])
            say(f"  t={lo:3.0f}-{lo + step:3.0f}s  all {_fmt(p_all)}  short {_fmt(p_short)}  long {_fmt(p_long)}"
                f"  ({n} / {rej} / {pending})")
            lo += step
        for t, what in applied:
            before = _window_stats(result.results, max(0.0, t - 30), t)
            after = _window_stats(result.results, t + 15, t + 45)
            if what.startswith("lift"):
                later = [r for r in result.results if r.sent_s is not None and r.sent_s >= t and r.long]
                say(f"\nat t={t:.0f}s the doctor lifted its emergency length limit (the storm was over): "
                    f"{sum(1 for r in later if r.success)} long prompts sent after it served, "
                    f"{sum(1 for r in later if r.status == 413)} rejected")
                continue
            say(f"\nat t={t:.0f}s the doctor applied {what}: P99 TTFT of served requests "
                f"{_fmt(before[0]).strip()} in the 30 s before -> {_fmt(after[0]).strip()} 15-45 s after "
                f"({after[2]} rejected with 413, {after[3]} still waiting behind the backlog)")
        audit = work / "state" / "audit.jsonl"
        if audit.exists():
            say(f"\naudit log: {audit} ({len(audit.read_text().splitlines())} entries)")
    finally:
        router.stop()
        hot.stop()
        cold.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="doctor demo", description=__doc__)
    parser.add_argument("--seconds", type=float, default=240.0, help="length of the load (default 240)")
    parser.add_argument("--rate", type=float, default=4.0, help="requests per second (default 4)")
    parser.add_argument("--storm-at", type=float, default=10.0, help="when the long-document storm starts")
    parser.add_argument("--storm-for", type=float, default=170.0, help="how long it lasts (default 170 s)")
    parser.add_argument("--time-scale", type=float, default=0.5, help="engines' time scale (default 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--for", dest="for_s", type=float, metavar="SECONDS",
                        help="how long the storm's finding (p99_spike) must hold before it is reported "
                        "(default: the playbook's own 90 s)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--tui", dest="shown", action="store_const", const="tui",
                       help="watch it in doctor tui, approving the fix yourself (the default with a terminal)")
    shown.add_argument("--headless", dest="shown", action="store_const", const="headless",
                       help="tell it as text (the default without a terminal, and always under CI=true)")
    args = parser.parse_args(argv)
    tui = demo_tui.wants_tui(args.shown, stdin_tty=sys.stdin.isatty(), stdout_tty=sys.stdout.isatty(),
                             environ=os.environ)
    if args.shown == "tui" and not tui:
        print("doctor demo: --tui needs a terminal (and not CI=true); telling it as text instead", file=sys.stderr)
    if args.seconds <= 0 or args.rate <= 0 or args.time_scale <= 0 or args.storm_for < 0 or args.storm_at < 0:
        parser.error("--seconds, --rate and --time-scale must be > 0, --storm-at and --storm-for >= 0")
    if args.for_s is not None and not 0 <= args.for_s < float("inf"):
        parser.error("--for must be a number of seconds >= 0")
    try:
        return asyncio.run(run_demo(args.seconds, args.rate, args.storm_at, args.storm_for, args.seed,
                                    args.time_scale, tui, args.for_s))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
