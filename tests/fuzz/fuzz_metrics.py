"""/metrics: parse two scrapes, map the names, detect the version profile and derive the signals.

Contract: parse_metrics raises only ScrapeError; a snapshot holds only finite numbers (non-finite ones are
`rejected`); profile detection and signal derivation never raise, and every signal is finite or None."""

from __future__ import annotations

import math

from collectors.derive import derive_window
from collectors.names import detect_profile
from collectors.scrape import ScrapeError, has_engine_label, parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot

CONFIG = EngineConfigView(max_num_seqs=64, max_num_batched_tokens=2048, num_gpu_blocks=1000, block_size=16)


def _parse(text: str, ts: float) -> MetricsSnapshot | None:
    try:
        snap = parse_metrics(text, ts)
    except ScrapeError:
        return None
    for v in (*snap.gauges.values(), *snap.counters.values()):
        assert math.isfinite(v), v
    for h in snap.histograms.values():
        assert len(h.bounds) == len(h.cumulative) and math.isinf(h.bounds[-1])
        assert all(math.isfinite(c) for c in h.cumulative) and math.isfinite(h.sum) and math.isfinite(h.count)
    detect_profile(None, snap.names_seen, has_engine_label=has_engine_label(snap))
    return snap


def fuzz_one(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    cut = text.find("\n# SPLIT\n")  # a seed may hold two scrapes: before and after
    first, second = (text[:cut + 1], text[cut + 9:]) if cut >= 0 else (text, text)
    prev = _parse(first, 1000.0)
    cur = _parse(second, 1015.0)
    if cur is None:
        return
    for before in (prev, None):
        got = derive_window(before, cur, CONFIG)
        for name, value in got.values.items():
            assert value is None or math.isfinite(value), (name, value)
