"""What `doctor serve` costs: CPU and memory of the daemon watching 2 sim engines at a 1 s interval, beside
`doctor diagnose --fix` started the way cron starts it at the same rate (a new process every second; a run that
overruns delays the next), over the same minutes, on the same engines, each with its own state directory.

Goal: the daemon under 2% of one core and under 150 MB RSS. The cron side's CPU is the sum over its processes
(interpreter start-up included: what a cron line at that rate would cost); its RSS is the largest run's.

    .venv/bin/python bench/daemon_overhead.py [--seconds 180] [--interval 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trials.live import LoadThread, Mix, free_port, spawn_engine  # noqa: E402

ENGINE = ["m", "--time-scale", "0.1", "--max-model-len", "16384", "--max-num-seqs", "8", "--sim-startup-scale", "0"]


def config(work: Path, name: str, engines: dict[str, str], interval: float, port: int) -> Path:
    path = work / f"{name}.toml"
    path.write_text(f'[doctor]\nstate_dir = "{work / name}"\nsample_s = "{interval / 2}s"\n'
                    f'[serve]\nlisten = "127.0.0.1:{port}"\ninterval_s = {interval}\n'
                    + "".join(f'[[engines]]\nname = "{n}"\nrole = "{n}"\nurl = "{u}"\n' for n, u in engines.items()))
    return path


def cron(cfg: Path, interval: float, stop: threading.Event, runs: list[float]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    k = 0
    while not stop.is_set():
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "doctor.cli", "diagnose", "--config", str(cfg), "--fix",
                        "--format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        runs.append(time.monotonic() - t)
        k += 1
        stop.wait(max(0.0, start + k * interval - time.monotonic()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--alone-seconds", type=float, default=60.0,
                    help="first measure the daemon alone this long (0: skip)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="daemon-overhead-"))
    ledger = str(work / "gpus.json")
    engines = {name: spawn_engine(name, ENGINE, gpu=i, ledger=ledger) for i, name in enumerate(("hot", "cold"))}
    loads = [LoadThread(e.url, Mix(rate_qps=2.0, max_tokens=16)).start() for e in engines.values()]
    urls = {n: e.url for n, e in engines.items()}
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "doctor.cli", "serve", "--config",
                               str(config(work, "daemon", urls, args.interval, port)), "--log-level", "warning"],
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    stop = threading.Event()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("the daemon did not become ready")
            time.sleep(0.2)
        proc = psutil.Process(daemon.pid)
        time.sleep(5)  # past start-up
        # First the daemon alone on the host (its cost as deployed), then with cron's runs beside it on the same
        # 2 cores, whose interpreter start-ups also take the daemon's caches and its turns on a core.
        a_cpu0, a_wall0, a_cycles0 = proc.cpu_times(), time.monotonic(), _cycles(port)
        time.sleep(args.alone_seconds)
        a_cpu1, a_wall, a_cycles = proc.cpu_times(), time.monotonic() - a_wall0, _cycles(port) - a_cycles0
        runs: list[float] = []
        cron_cfg = config(work, "cron", urls, args.interval, free_port())
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0, wall0 = proc.cpu_times(), time.monotonic()
        cycles0 = _cycles(port)
        rss: list[int] = []
        thread = threading.Thread(target=cron, args=(cron_cfg, args.interval, stop, runs), daemon=True)
        thread.start()
        while time.monotonic() - wall0 < args.seconds:
            rss.append(proc.memory_info().rss)
            time.sleep(1.0)
        stop.set()
        thread.join(60)
        wall = time.monotonic() - wall0
        cpu1 = proc.cpu_times()
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cycles = _cycles(port) - cycles0
    finally:
        stop.set()
        daemon.terminate()
        daemon.wait(30)
        for load in loads:
            load.stop()
        for e in engines.values():
            e.stop()
    alone = (a_cpu1.user + a_cpu1.system - a_cpu0.user - a_cpu0.system) / a_wall if a_wall else 0.0
    d_cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall
    c_cpu = (children1.ru_utime + children1.ru_stime - children0.ru_utime - children0.ru_stime) / wall
    d_rss, c_rss = max(rss) / 2**20, children1.ru_maxrss / 1024
    print(f"\n2 sim engines, interval {args.interval:g} s, {wall:.0f} s side by side ({cycles} daemon cycles, "
          f"{len(runs)} cron runs, median run {sorted(runs)[len(runs) // 2]:.2f} s)\n")
    print(f"{'':24}{'doctor serve':>14}{'cron diagnose':>15}{'serve / cron':>14}{'goal':>10}")
    print(f"{'CPU, % of one core':24}{100 * d_cpu:13.2f}%{100 * c_cpu:14.2f}%{d_cpu / c_cpu:14.3f}{'< 2%':>10}")
    if args.alone_seconds:
        print(f"{'  the daemon alone':24}{100 * alone:13.2f}%{'':15}{'':14}{'< 2%':>10}"
              f"   ({a_wall:.0f} s, {a_cycles} cycles, before cron started)")
    print(f"{'RSS, MB (peak)':24}{d_rss:14.0f}{c_rss:15.0f}{d_rss / c_rss:14.2f}{'< 150':>10}")
    print(f"{'RSS, MB (mean)':24}{sum(rss) / len(rss) / 2**20:14.0f}")
    return 0


def _cycles(port: int) -> int:
    return int(httpx.get(f"http://127.0.0.1:{port}/v1/state", timeout=10, trust_env=False).json()["cycles"])


if __name__ == "__main__":
    sys.exit(main())
