"""What `doctor tui` costs: CPU of the TUI at a 1 s refresh attached to `doctor serve` watching 2 sim engines
under load, on the fleet screen and on the engine screen (which also reads the latency histograms for the
heatmap); headless (Textual's own rendering, no terminal) and, where tmux is installed, in a real terminal.

Goal: under 5% of one core.

    .venv/bin/python bench/tui_overhead.py [--seconds 60] [--refresh 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from doctor.secrets import write_private  # noqa: E402
from trials.live import LoadThread, Mix, free_port, spawn_engine  # noqa: E402

ENGINE = ["m", "--time-scale", "0.1", "--max-model-len", "16384", "--max-num-seqs", "8", "--sim-startup-scale", "0"]
TOKEN = "bench-token"
HEADLESS = """
import json, sys, time
from tui.app import DoctorApp
from tui.source import DaemonSource
url, token, seconds, refresh, screen = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
app = DoctorApp(DaemonSource(url, token), refresh_s=refresh)
marks = {}
def start():
    if screen == "engine":
        app.open_engine("hot")
    app.set_timer(5.0, lambda: marks.setdefault("t0", (time.process_time(), time.monotonic())))
    app.set_timer(5.0 + seconds, app.exit)
app.call_later(start)
app.run(headless=True, size=(120, 40))
cpu0, wall0 = marks["t0"]
print(json.dumps({"cpu_s": time.process_time() - cpu0, "wall_s": time.monotonic() - wall0, "reads": app.reads,
                  "skipped": app.skipped}))
"""


def config(work: Path, engines: dict[str, str], port: int) -> Path:
    write_private(work / "token", TOKEN + "\n")
    path = work / "doctor.toml"
    path.write_text(f'[doctor]\nstate_dir = "{work / "state"}"\nsample_s = "1s"\n'
                    f'[serve]\nlisten = "127.0.0.1:{port}"\ninterval_s = 2\ntoken_file = "token"\n'
                    + "".join(f'[[engines]]\nname = "{n}"\nrole = "{n}"\nurl = "{u}"\n' for n, u in engines.items()))
    return path


def headless(url: str, seconds: float, refresh: float, screen: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", HEADLESS, url, TOKEN, str(seconds), str(refresh), screen],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=seconds + 120)
    if out.returncode != 0:
        raise SystemExit(f"the headless TUI failed:\n{out.stderr[-2000:]}")
    doc: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


def in_tmux(url: str, token_file: Path, seconds: float, refresh: float, env: dict[str, str],
            keys: tuple[str, ...] = ()) -> dict[str, float]:
    name = f"tui-bench-{os.getpid()}"
    cmd = f"{sys.executable} -m doctor.cli tui --daemon {url} --token-file {token_file} --refresh {refresh}s"
    sock = name  # a tmux server of its own
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-s", name, "-x", "120", "-y", "40", cmd], check=True,
                   env=env, cwd=ROOT)
    try:
        pid = int(subprocess.run(["tmux", "-L", sock, "list-panes", "-t", name, "-F", "#{pane_pid}"],
                                 capture_output=True, text=True, check=True).stdout.split()[0])
        proc = psutil.Process(pid)
        time.sleep(3.0)
        for key in keys:
            subprocess.run(["tmux", "-L", sock, "send-keys", "-t", name, key], check=True)
        time.sleep(2.0)
        t0, w0 = proc.cpu_times(), time.monotonic()
        time.sleep(seconds)
        t1, w1 = proc.cpu_times(), time.monotonic()
        return {"cpu_s": (t1.user + t1.system) - (t0.user + t0.system), "wall_s": w1 - w0}
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--refresh", type=float, default=1.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tui-overhead-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    hot = spawn_engine("hot", [*ENGINE], gpu=0, ledger=str(work / "gpus.json"))
    cold = spawn_engine("cold", [*ENGINE], gpu=1, ledger=str(work / "gpus.json"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cfg = config(work, {"hot": hot.url, "cold": cold.url}, port)
    loads = [LoadThread(e.url, Mix(rate_qps=2.0, long_every=4, long_tokens=6000, short_tokens=100, max_tokens=16))
             .start() for e in (hot, cold)]
    with open(work / "serve.log", "wb") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "doctor.cli", "serve", "--config", str(cfg)], stdout=log,
                                  stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/readyz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit("the daemon did not become ready")
        rows = []
        for screen in ("fleet", "engine"):
            r = headless(url, args.seconds, args.refresh, screen, env)
            rows.append((f"headless, {screen} screen", r["cpu_s"], r["wall_s"], f"{r['reads']:.0f} reads"))
        if shutil.which("tmux"):
            for screen, keys in (("fleet", ()), ("engine", ("Enter",))):
                r = in_tmux(url, work / "token", args.seconds, args.refresh, env, keys)
                rows.append((f"tmux 120x40, {screen} screen", r["cpu_s"], r["wall_s"], "real terminal"))
        else:
            rows.append(("tmux", 0.0, 0.0, "not installed: not measured"))
    finally:
        daemon.terminate()
        daemon.wait(15)
        for lt in loads:
            lt.stop()
        hot.stop()
        cold.stop()
    print(f"\ndoctor tui at a {args.refresh:g} s refresh, attached to doctor serve with 2 sim engines, "
          f"{args.seconds:g} s each (goal < 5% of a core)\n")
    print(f"{'run':<28} {'CPU s':>7} {'wall s':>7} {'% of a core':>12}  note")
    for name, cpu, wall, note in rows:
        share = f"{100 * cpu / wall:.2f}" if wall else "-"
        print(f"{name:<28} {cpu:>7.2f} {wall:>7.1f} {share:>12}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
