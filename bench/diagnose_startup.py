"""Start-up cost of `doctor diagnose`, side by side with a bare interpreter, in one run.

Prints the median of N runs for: `python -c pass`, `doctor diagnose --help`, and the import of
everything the fast path needs (no engine contacted), plus the ratios to the bare interpreter. It
also checks, in the same runs, that neither pandas nor textual is imported on that path.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 7
FAST_PATH_IMPORTS = (
    "import sys, doctor.cli, doctor.diagnose, doctor.reading, collectors.combine, collectors.logs, "
    "collectors.gpu, collectors.host, collectors.history; "
    "print(','.join(m for m in ('pandas', 'textual') if m in sys.modules) or 'none')"
)


def timed(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def main() -> int:
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "doctor diagnose --help": [sys.executable, "-m", "doctor.cli", "diagnose", "--help"],
        "fast-path imports": [sys.executable, "-c", FAST_PATH_IMPORTS],
    }
    results: dict[str, list[float]] = {k: [] for k in cases}
    heavy = ""
    for _ in range(RUNS):  # interleaved so machine noise hits every case alike
        for name, argv in cases.items():
            seconds, last = timed(argv)
            results[name].append(seconds)
            if name == "fast-path imports":
                heavy = last
    base = statistics.median(results["python -c pass"])
    print(f"{'case':28} {'median':>9} {'vs bare python':>15}")
    for name, values in results.items():
        med = statistics.median(values)
        print(f"{name:28} {med * 1000:7.0f}ms {med / base:14.1f}x")
    print(f"heavy modules imported on the fast path: {heavy}")
    return 0 if heavy == "none" else 1


if __name__ == "__main__":
    raise SystemExit(main())
