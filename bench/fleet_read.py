"""Reading a fleet: N engines through a real Prometheus, and D engines read directly, by the real doctor.

Prometheus (Debian's) holds N engines' series, backfilled with `promtool tsdb create-blocks-from openmetrics`
from the sim's vLLM 0.33 exposition (bench/fleet_data.py: every family the sim exports, each engine's numbers
its own), three scrapes STEP apart. The engines' own HTTP roots (/health, /version, /v1/models, which the doctor
also reads) are cheap exporters on 127.0.0.2, one port each, in one asyncio process; Prometheus lists them as
the scrape targets of job "vllm". Each row is one `doctor diagnose --since STEP` run in its own process:

  grouped     the engines listed in the config (selector instance="..."): one query per point in time
  discovered  no engine listed, `[prometheus.discover] job = "vllm"`: the targets become the engines
  per-engine  the same engines with a two-matcher selector, which the doctor reads one engine at a time

Then D engines read directly (exporters answering the sim's /metrics, a new scrape at each read), one
`doctor diagnose --sample SAMPLE` per bound on concurrent reads. Printed: wall and CPU seconds, peak RSS,
the queries Prometheus answered and its own CPU, ratios against the first row; the signals of every engine
are checked against what was generated (the direct parse of the same exposition, the doctor's derive step).
Goal: 1,000 engines judged in < 10 s and < 500 MB on 2 cores; 200 engines read directly within a 15 s interval.

    .venv/bin/python bench/fleet_read.py [--engines 1000] [--direct 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import psutil  # noqa: E402
from fleet_data import Fleet, scrapes  # noqa: E402

HOST = "127.0.0.2"  # not this host's address to the doctor: no process lookups for the exporters
SCRAPES = 3
SKIP = {"uptime_s", "generation_idle_s"}  # measured against the reader's clock, not the exposition


@dataclass
class Run:
    """One doctor process: what it cost and what it judged."""

    label: str
    wall_s: float
    cpu_s: float
    rss_mb: float
    exit_code: int
    engines: int = 0
    readable: int = 0
    queries: float = 0.0
    prometheus_cpu_s: float = 0.0
    mismatches: list[str] = field(default_factory=list)


def doctor(label: str, config: Path, flags: Sequence[str], work: Path) -> tuple[Run, dict[str, Any]]:
    """`doctor diagnose --config CONFIG FLAGS --format json` in its own process; its cost and its report."""
    out = work / f"{label}.json"
    cmd = [sys.executable, "-c", "import sys; from doctor.cli import main; sys.exit(main(sys.argv[1:]))",
           "diagnose", "--config", str(config), "--format", "json", "--no-history", "--state-dir",
           str(work / "state"), *flags]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    with out.open("w") as stdout:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    try:
        report = json.loads(out.read_text())
    except ValueError:
        raise SystemExit(f"doctor diagnose ({label}) exited {proc.returncode} without a report:\n{err[-2000:]}") \
            from None
    run = Run(label, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode,
              engines=len(report["engines"]), readable=sum(1 for e in report["engines"] if e["reachable"]))
    return run, report


def expected(fleet: Fleet, i: int, points: Sequence[tuple[int, float]], window_s: float) -> dict[str, Any]:
    """The signals the doctor's derive step gives engine i's exposition parsed directly at scrapes (k, t)."""
    from collectors.combine import EngineReading, build_signals
    from collectors.scrape import parse_metrics
    from collectors.types import Sample

    reading = EngineReading(f"e{i}", None, "http://unused")
    reading.samples.extend(Sample("metrics", reading.name, t, metrics=parse_metrics(fleet.exposition(i, k), t))
                           for k, t in points)
    return build_signals(reading, window_s=window_s).values


def mismatches(report: dict[str, Any], want: dict[str, dict[str, Any]], gauges_only: bool = False) -> list[str]:
    """Where the report's signals differ from `want` ({engine name: signals}); an engine missing is one too."""
    got = {e["name"]: e for e in report["engines"]}
    out = []
    for name, values in want.items():
        engine = got.get(name)
        if engine is None or not engine["reachable"]:
            out.append(f"{name}: {'not in the report' if engine is None else engine['errors'][:2]}")
            continue
        signals = engine["signals"]
        keys = ("running", "waiting", "kv_cache_usage") if gauges_only else [k for k in values if k not in SKIP]
        for key in keys:
            a, b = signals.get(key), values.get(key)
            if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-9 * max(1.0, abs(b))):
                out.append(f"{name}.{key}: read {a!r}, generated {b!r}")
        if gauges_only and signals.get("qps") in (None, 0):
            out.append(f"{name}.qps: {signals.get('qps')!r} (two reads of different scrapes give a rate)")
    return out


@contextlib.contextmanager
def exporters(count: int, with_metrics: bool) -> Iterator[list[int]]:
    """`count` cheap engines on HOST (bench/fleet_data.py) in their own process; their ports."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fleet_data.py"), str(count), HOST,
                             "metrics" if with_metrics else "no-metrics", str(SCRAPES)], cwd=ROOT,
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"the exporters exited with {proc.wait(10)} before listening")
        yield json.loads(line)
    finally:
        proc.terminate()
        proc.wait(10)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prometheus(work: Path, targets: Sequence[tuple[str, str]], lookback_s: float) -> Iterator[tuple[str, int]]:
    """Debian's Prometheus over work/data (the backfill), job "vllm" listing `targets` (address, instance);
    their scrapes are hourly, so what it holds is the backfill. Yields (URL, pid)."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    groups = "".join(f"      - {{targets: ['{addr}'], labels: {{instance: {inst}, "
                     f"role: {'hot' if n % 2 else 'cold'}}}}}\n" for n, (addr, inst) in enumerate(targets))
    (work / "prometheus.yml").write_text("global: {scrape_interval: 1h, scrape_timeout: 10s}\nscrape_configs:\n"
                                         "  - job_name: vllm\n    static_configs:\n" + groups)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (work / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                                 f"--query.lookback-delta={lookback_s:.0f}s", "--storage.tsdb.retention.time=1d"],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"Prometheus exited with {proc.returncode}: see {work / 'prometheus.log'}")
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(f"{url}/api/v1/targets", params={"state": "active"}, timeout=5, trust_env=False)
                if r.status_code == 200 and len(r.json()["data"]["activeTargets"]) >= len(targets):
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"Prometheus did not list its {len(targets)} targets within 120 s")
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def query_count(url: str) -> float:
    """Queries (instant and range) Prometheus has answered, from its own /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == "prometheus_http_requests"
               for s in f.samples if s.name.endswith("_total")
               and s.labels.get("handler") in ("/api/v1/query", "/api/v1/query_range"))


def cpu_of(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def engine_table(engines: Sequence[tuple[str, str, str]]) -> str:
    """[[engines]] tables: (name, url, selector or "")."""
    return "".join(f'[[engines]]\nname = "{n}"\nurl = "{u}"\n' + (f"selector = '{s}'\n" if s else "") + "\n"
                   for n, u, s in engines)


def through_prometheus(fleet: Fleet, n: int, work: Path, step_s: float, per_engine: bool) -> list[Run]:
    """The Prometheus rows: backfill n engines, serve, run the doctor each way, check every engine's signals."""
    t_last = float(int(time.time()))
    times = [t_last - step_s * (SCRAPES - 1 - k) for k in range(SCRAPES)]
    started = time.monotonic()
    samples = fleet.write_openmetrics(work / "fleet.om", n, times)
    generated = time.monotonic() - started
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(work / "fleet.om"),
                           str(work / "data")], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"promtool failed: {done.stdout[-1000:]}{done.stderr[-1000:]}")
    (work / "fleet.om").unlink()
    print(f"backfill: {n} engines x {samples // max(1, n * SCRAPES)} series x {SCRAPES} scrapes = {samples} samples "
          f"(generated {generated:.1f} s, promtool {time.monotonic() - started - generated:.1f} s)", flush=True)
    # The doctor reads at now - step and now: the scrapes at times[-2] and times[-1] while now < t_last + step.
    want_points = [(SCRAPES - 2, times[-2]), (SCRAPES - 1, times[-1])]
    want = {fleet.instance(i): expected(fleet, i, want_points, step_s) for i in range(n)}
    runs: list[Run] = []
    with exporters(n, with_metrics=False) as ports:
        urls = [f"http://{HOST}:{p}" for p in ports]
        with prometheus(work, [(f"{HOST}:{p}", fleet.instance(i)) for i, p in enumerate(ports)],
                        lookback_s=2 * step_s) as (url, pid):
            head = f'[prometheus]\nurl = "{url}"\n\n'
            configs = [("grouped", head + engine_table([(fleet.instance(i), urls[i], f'instance="{fleet.instance(i)}"')
                                                        for i in range(n)])),
                       ("grouped, kept", ""),  # the same again, /version and /v1/models remembered (identity.json)
                       ("discovered", head + '[prometheus.discover]\njob = "vllm"\n')]
            if per_engine:
                configs.append(("per-engine", head + engine_table(
                    [(fleet.instance(i), urls[i], f'job="vllm", instance="{fleet.instance(i)}"') for i in range(n)])))
            for label, text in configs:
                if not label.endswith(", kept"):  # each other row reads every engine's identity itself
                    (work / "state" / "identity.json").unlink(missing_ok=True)
                text = text or dict(configs)[label.removesuffix(", kept")]
                if time.time() >= t_last + step_s:
                    raise SystemExit(f"the backfill is {time.time() - t_last:.0f} s old: the doctor's reads would "
                                     f"miss its scrapes (raise --step)")
                config = work / f"{label.replace(', ', '-')}.toml"
                config.write_text(text)
                queries, cpu = query_count(url), cpu_of(pid)
                run, report = doctor(label, config, ["--since", f"{step_s:g}s", "--timeout", "600s",
                                                     "--request-timeout", "60s"], work)
                run.queries = query_count(url) - queries
                run.prometheus_cpu_s = cpu_of(pid) - cpu
                named = {"discovered": {e["name"]: want.get(e["name"]) for e in report["engines"]}}.get(label, want)
                run.mismatches = mismatches(report, {k: v for k, v in named.items() if v is not None})
                if len(named) != n:
                    run.mismatches.append(f"{len(named)} engines judged, {n} generated")
                runs.append(run)
                print(f"  {label}: {run.wall_s:.1f} s", flush=True)
    return runs


def direct(fleet: Fleet, work: Path, count: int, sample_s: float, bounds: Sequence[int]) -> list[Run]:
    """The direct rows: `count` exporters answering /metrics, one doctor run per bound on concurrent reads."""
    runs = []
    for bound in bounds:
        with exporters(count, with_metrics=True) as ports:
            engines = [(fleet.instance(i), f"http://{HOST}:{p}", "") for i, p in enumerate(ports)]
            config = work / f"direct-{bound}.toml"
            config.write_text(f"[doctor]\nmax_concurrent_reads = {bound}\n\n" + engine_table(engines))
            run, report = doctor(f"direct, {bound} at once", config, ["--sample", f"{sample_s:g}s", "--timeout",
                                                                      "120s"], work)
            run.mismatches = mismatches(report, {fleet.instance(i): expected(fleet, i, [(0, 0.0), (1, 1.0)], 1.0)
                                                 for i in range(count)}, gauges_only=True)
            runs.append(run)
            print(f"  direct, {bound} at once: {run.wall_s:.1f} s", flush=True)
    return runs


def table(runs: Sequence[Run], title: str, extra: str = "") -> None:
    base = runs[0]
    print(title)
    print(f"{'how':>20} {'engines':>7} {'read':>5} {'wall s':>7} {'x':>6} {'CPU s':>6} {'x':>6} {'RSS MB':>7} "
          f"{'queries':>7} {'prom CPU s':>10} {'wrong':>5}")
    for r in runs:
        print(f"{r.label:>20} {r.engines:7d} {r.readable:5d} {r.wall_s:7.2f} {r.wall_s / base.wall_s:6.2f} "
              f"{r.cpu_s:6.2f} {r.cpu_s / max(base.cpu_s, 1e-9):6.2f} {r.rss_mb:7.0f} {r.queries:7.0f} "
              f"{r.prometheus_cpu_s:10.2f} {len(r.mismatches):5d}")
    if extra:
        print(extra)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--engines", type=int, default=1000, help="engines in Prometheus (default 1000)")
    p.add_argument("--direct", type=int, default=200, help="engines read directly (default 200; 0: none)")
    p.add_argument("--step", type=float, default=900.0, help="seconds between backfilled scrapes, the doctor's "
                   "--since (default 900)")
    p.add_argument("--sample", type=float, default=5.0, help="direct reads: --sample (default 5)")
    p.add_argument("--bounds", default="64,1", help="direct reads: max_concurrent_reads per run (default 64,1)")
    p.add_argument("--no-per-engine", action="store_true", help="skip the per-engine row")
    p.add_argument("--json", type=Path, help="also write the rows (and any mismatches) here")
    p.add_argument("--workdir", type=Path, help="keep the backfill and reports here (default: a temporary folder)")
    args = p.parse_args(argv)
    if args.engines < 1 or args.direct < 0 or args.step < 60:
        p.error("--engines must be >= 1, --direct >= 0, --step >= 60")
    with contextlib.ExitStack() as stack:
        work = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleet-read-")))
        work.mkdir(parents=True, exist_ok=True)
        fleet = Fleet(scrapes(SCRAPES))
        prom = through_prometheus(fleet, args.engines, work, args.step, not args.no_per_engine)
        bounds = [int(b) for b in args.bounds.split(",")] if args.direct else []
        directs = direct(fleet, work, args.direct, args.sample, bounds) if args.direct else []
    cores = os.cpu_count()
    print(f"\nfleet read: the real doctor (`doctor diagnose`, one process per row) on {cores} cores, load average "
          f"{os.getloadavg()[0]:.1f}; x = against the first row")
    g = prom[0]
    table(prom, f"{args.engines} engines through Prometheus (--since {args.step:g}s; every family the sim exports):",
          f"goal: {args.engines} engines judged in < 10 s ({'met' if g.wall_s < 10 else 'NOT met'}: "
          f"{g.wall_s:.1f} s) and < 500 MB ({'met' if g.rss_mb < 500 else 'NOT met'}: {g.rss_mb:.0f} MB)")
    if directs:
        d = directs[0]
        table(directs, f"{args.direct} engines read directly (two reads --sample {args.sample:g}s apart):",
              f"goal: {args.direct} engines within one 15 s interval ({'met' if d.wall_s < 15 else 'NOT met'}: "
              f"{d.wall_s:.1f} s, of which {args.sample:g} s is the wait between the two reads)")
    wrong = [m for r in (*prom, *directs) for m in r.mismatches]
    for m in wrong[:20]:
        print(f"MISMATCH {m}")
    if args.json:
        args.json.write_text(json.dumps({"prometheus": [asdict(r) for r in prom],
                                         "direct": [asdict(r) for r in directs]}, indent=1))
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
