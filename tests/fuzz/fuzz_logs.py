"""vLLM logs: the line parser, stats lines, the event detector, and the file scanner over the whole text.

Contract: none of them raises on any text; timestamps and stats values are finite; the scanner reports a
problem as `scan.error` or notices, never an exception."""

from __future__ import annotations

import math
import os
import tempfile

from collectors.logevents import recognize
from collectors.logparse import parse_line, parse_stats
from collectors.logs import scan_file

_DIR = tempfile.mkdtemp(prefix="fuzz-logs-")
_PATH = os.path.join(_DIR, "engine.log")


def fuzz_one(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    for line in text.splitlines()[:200]:
        p = parse_line(line, year=2026)
        if p is None:
            continue
        assert p.timestamp is None or math.isfinite(p.timestamp)
        stats = parse_stats(p.message)
        if stats is not None:
            assert all(isinstance(v, float) for v in stats.values()), stats
        recognize(p, "e", fallback_ts=0.0, include_stats=True)
    with open(_PATH, "wb") as fh:
        fh.write(data)
    scan = scan_file(_PATH, engine="e", year=2026, max_line_bytes=4096, read_chunk=997)
    assert scan.error is None, scan.error  # the file exists and is readable: any text is fine
    for point in scan.stats:
        assert all(isinstance(v, float) for v in point.values.values())
