"""Benchmark: `collectors.logs.scan_file` lines/s against `grep -c 'Avg prompt throughput'` on one file.

Generates a realistic vLLM log (default 500k lines: stats lines, uvicorn access lines, request and
engine noise, a few tracebacks and faults) in a temporary directory with the sim's formatter for one
release, then times both readers on it (best of --repeat runs) and prints lines/s and their ratio.
Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collectors.logs import scan_file
from sim.logfmt import LogFormatter, StartupInfo
from sim.profiles import PROFILE_NAMES, get_profile

T0 = 1_760_000_000.0


def generate(path: Path, lines: int, profile: str, seed: int = 7) -> int:
    """Write about `lines` log lines; return the number of stats lines written."""
    rng = random.Random(seed)
    fmt = LogFormatter(get_profile(profile), api_pid=4021, core_pid=4100)
    stats_lines = 0
    written = 0
    now = T0
    with path.open("w", encoding="utf-8") as fh:
        for line in fmt.startup(now, StartupInfo()):
            fh.write(line + "\n")
            written += 1
        while written < lines:
            now += 0.05
            r = rng.random()
            if r < 0.10:
                out = fmt.stats(now, prompt_tps=rng.uniform(0, 9000), gen_tps=rng.uniform(0, 4000),
                                running=rng.randint(0, 256), waiting=rng.randint(0, 64), kv_usage=rng.random(),
                                prefix_hit_rate=rng.random(), preemptions_in_interval=rng.choice((0, 0, 0, 3)))
                stats_lines += sum(1 for x in out if "Avg prompt throughput" in x)
            elif r < 0.70:
                status = rng.choice((200,) * 30 + (400, 500))
                path_ = rng.choice(("/v1/chat/completions", "/v1/completions", "/metrics", "/health"))
                out = fmt.access(now, f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}:{rng.randint(1024, 65535)}",
                                 "POST" if path_.startswith("/v1") else "GET", path_, status)
            elif r < 0.9995:
                out = fmt.emit(now, f"Added request chatcmpl-{rng.getrandbits(64):016x}.", tag="async_llm.py:252")
            else:
                out = fmt.nccl_timeout(now) if rng.random() < 0.5 else fmt.preemption_warning_v0(now, "x", 51)
            for line in out:
                fh.write(line + "\n")
            written += len(out)
    return stats_lines


def best_of(repeat: int, fn: object) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=500_000)
    ap.add_argument("--profile", default="0.20", choices=PROFILE_NAMES)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    grep = shutil.which("grep")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vllm.log"
        expected = generate(path, args.lines, args.profile)
        size = os.path.getsize(path)
        with path.open("rb") as fh:
            total = sum(1 for _ in fh)
        scan = scan_file(path, engine="hot", max_bytes=size + 1)
        assert len(scan.stats) == expected, (len(scan.stats), expected)
        t_scan = best_of(args.repeat, lambda: scan_file(path, engine="hot", max_bytes=size + 1))
        print(f"file: {total} lines, {size / 1e6:.1f} MB, profile {args.profile}, {expected} stats lines, "
              f"{len(scan.events)} events, counts {dict(sorted(scan.counts.items()))}")
        print(f"scan_file : {t_scan:8.3f} s  {total / t_scan:12,.0f} lines/s")
        if grep is None:
            print("grep not found; no comparison")
            return 0

        def run_grep() -> None:
            res = subprocess.run([grep, "-c", "Avg prompt throughput", str(path)], capture_output=True, text=True,
                                 check=False)
            assert int(res.stdout.strip()) == expected

        t_grep = best_of(args.repeat, run_grep)
        print(f"grep -c   : {t_grep:8.3f} s  {total / t_grep:12,.0f} lines/s")
        print(f"ratio     : scan_file is {t_scan / t_grep:.1f}x slower than grep -c "
              f"(it parses every line, every stats field and every event; grep counts one substring)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
