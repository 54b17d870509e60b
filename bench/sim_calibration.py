"""Benchmark: the sim's default preset next to the seed article's figures (`doctor sim calibrate`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.calibrate import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
