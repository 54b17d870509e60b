"""The heatmap's numbers on hand-made histogram reads: plain deltas, an empty interval, a counter reset, a bucket
layout change across a restart, time columns, the P50/P99 rows, and the drawing (shades, marks) without colour."""

from __future__ import annotations

import math

from tui.heatmap import LAYOUT, RESET, Read, deltas, grid, level, merged, parse_reads, per_bucket, rebin, trimmed
from tui.widgets.heatmap_view import SHADES, render_grid

INF = math.inf
B = (0.1, 0.5, 1.0, INF)


def r(t: float, *cum: float, bounds: tuple[float, ...] = B) -> Read:
    return Read(t, bounds, tuple(cum))


def test_per_bucket_counts_from_cumulative() -> None:
    assert per_bucket([2, 5, 5, 6]) == (2, 3, 0, 1)
    assert per_bucket([2, 1, 3]) == (2, 0, 1)  # a dip counts as nothing, as Prometheus treats it


def test_a_delta_is_what_happened_between_two_reads() -> None:
    [d] = deltas([r(10, 1, 3, 4, 4), r(12, 3, 7, 9, 10)])
    assert (d.start, d.end, d.counts, d.note) == (10, 12, (2, 2, 1, 1), "")


def test_an_empty_interval_is_zeros_not_missing() -> None:
    ds = deltas([r(10, 1, 3, 4, 4), r(12, 1, 3, 4, 4)])
    assert ds[0].counts == (0, 0, 0, 0)
    g = grid([r(10, 1, 3, 4, 4), r(12, 1, 3, 4, 4)], now=12.5, columns=3, column_s=1.0)
    assert g is not None
    assert g.columns == (None, None, (0, 0, 0, 0))  # the read's column is empty; the others were not read
    assert g.quantile_row(2, 0.5) is None and g.peak == 0


def test_a_counter_reset_counts_the_newer_read_since_the_restart() -> None:
    [d] = deltas([r(10, 50, 90, 99, 100), r(12, 1, 2, 2, 3)])
    assert d.note == RESET and d.counts == (1, 1, 0, 1)  # never negative
    # a reset in one bucket only (a partial scrape of a restarted multiprocess engine) is a reset too
    [d2] = deltas([r(10, 5, 5, 6, 6), r(12, 4, 9, 9, 9)])
    assert d2.note == RESET and d2.counts == (4, 5, 0, 0)


def test_a_bucket_layout_change_across_a_restart() -> None:
    old = (0.25, 1.0, INF)
    reads = [r(10, 1, 2, 2, bounds=old), r(12, 3, 5, 6, bounds=old), r(14, 2, 3, 4, 4), r(16, 3, 5, 7, 7)]
    ds = deltas(reads)
    assert [d.note for d in ds] == ["", LAYOUT, ""]
    assert ds[1].counts == (2, 1, 1, 0) and ds[1].bounds == B  # the new layout's counts since the restart
    g = grid(reads, now=16.5, columns=4, column_s=2.0)
    assert g is not None and g.bounds == B  # rows: the newest layout, as the latest scrape gives it
    # the old layout's interval (10 -> 12) rebinned onto the new rows: (0,0.25] -> 0.5, (0.25,1] -> 1, +Inf -> +Inf
    assert g.columns[1] == (0, 2, 1, 1) and g.notes[1] == LAYOUT
    assert g.columns[2] == (2, 1, 1, 0) and g.notes[2] == LAYOUT
    assert g.columns[3] == (1, 1, 1, 0) and g.notes[3] == ""


def test_rebin_keeps_the_total() -> None:
    counts = (3.0, 4.0, 5.0)
    out = rebin(counts, (0.05, 2.0, INF), B)
    assert out == (3, 0, 0, 9) and sum(out) == sum(counts)


def test_intervals_are_summed_into_their_time_column_and_quantile_rows() -> None:
    reads = [r(0, 0, 0, 0, 0), r(1, 10, 10, 10, 10), r(1.5, 10, 10, 10, 11), r(3, 10, 10, 20, 21)]
    g = grid(reads, now=3.9, columns=4, column_s=1.0)
    assert g is not None
    assert g.columns == (None, (10, 0, 0, 1), None, (0, 0, 10, 0))  # the reads at 1 and 1.5 both end in column 1
    assert g.quantile_row(1, 0.5) == 0 and g.quantile_row(3, 0.99) == 2
    q = g.quantile(3, 0.5)
    assert q == 0.75  # interpolated inside (0.5, 1] s, as Prometheus does


def test_reads_as_the_daemon_sends_them() -> None:
    raw = [[12.0, [0.1, 0.5, 1.0, "+Inf"], [3, 7, 9, 10]], [10.0, [0.1, 0.5, 1.0, "+Inf"], [1, 3, 4, 4]],
           ["bad"], [13.0, [0.1], [1, 2]]]
    reads = parse_reads(raw)
    assert [x.t for x in reads] == [10.0, 12.0] and reads[0].bounds[-1] == INF


def test_levels_are_log_scaled_and_one_request_shows() -> None:
    assert level(0, 100, 4) == 0 and level(1, 1000, 4) >= 1 and level(1000, 1000, 4) == 4


def test_trim_and_merge_keep_the_counts() -> None:
    bounds = (*(0.01 * 2 ** i for i in range(12)), INF)
    col = [0.0] * 13
    col[5], col[9] = 4, 1
    reads = [Read(0, bounds, (0.0,) * 13), Read(1, bounds, tuple(sum(col[: i + 1]) for i in range(13)))]
    g = grid(reads, now=1.5, columns=2, column_s=1.0)
    assert g is not None
    first, last = trimmed(g)
    assert (first, last) == (4, 11)
    m = merged(g, first, last, 3)
    assert len(m.bounds) == 3 and sum(m.columns[1] or ()) == 5


def test_drawn_without_colour_the_shades_and_marks_carry_it() -> None:
    reads = [r(0, 0, 0, 0, 0), r(1, 1, 1, 1, 1), r(2, 1, 1, 101, 101)]
    g = grid(reads, now=2.5, columns=3, column_s=1.0)
    text = render_grid(g, width=20, height=10, title="TTFT").plain
    lines = text.splitlines()
    assert lines[0] == "TTFT"
    rows = {line[:6].strip(): line[7:] for line in lines[1:5]}
    assert set(rows) == {"100ms", "500ms", "1s", "+Inf"}
    assert rows["100ms"][0] == "·"  # column 0: no read ended there
    assert rows["100ms"][1] == "9"  # one request under 100 ms: its P50 and P99 bucket (P99 drawn on top)
    assert rows["1s"][2] == "9" and rows["500ms"][2] == " "  # 100 requests in (0.5, 1] s
    assert any(ch in SHADES[1:] or ch in "59" for ch in rows["1s"])
    assert "5 P50, 9 P99" in text
    assert "no histogram yet" in render_grid(None, width=20, height=10, title="TTFT").plain
