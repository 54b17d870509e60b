"""Log files followed and scanned at their edges (missing, rotated, truncated, binary, huge lines), command
followers, and the log parsers' properties (split from test_logs.py)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.logevents import recognize
from collectors.logfollow import TRUNCATED_MARKER, CommandFollower, FileFollower, LineSplitter, LogSourceError
from collectors.logparse import clock_to_epoch, literal_dict, parse_line, parse_stats
from collectors.logs import scan_file

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1024**3
MIB = 1024**2

# --- scan_file edges -----------------------------------------------------------------------------------------
def test_scan_file_missing_dir_since_and_tail(tmp_path: Path) -> None:
    assert scan_file(tmp_path / "nope.log").error == f"log file {tmp_path / 'nope.log'} does not exist"
    assert "directory" in (scan_file(tmp_path).error or "")
    src = (FIXTURES / "logs_0.8.txt").read_text()
    path = tmp_path / "v.log"
    path.write_text(src)
    later = scan_file(path, since=clock_to_epoch("05-02 10:00:45", 2025), year=2025)
    assert len(later.stats) == 1 and later.counts["before_since"] > 0
    tail = scan_file(path, year=2025, max_bytes=len(src.encode()) // 4)
    assert tail.notices and tail.counts["lines"] < src.count("\n")


def test_scan_file_year_rollover(tmp_path: Path) -> None:
    path = tmp_path / "v.log"
    path.write_text("INFO 12-31 23:59:50 [loggers.py:1] Engine 000: Running: 1 reqs\n"
                    "INFO 01-01 00:00:00 [loggers.py:1] Engine 000: Running: 2 reqs\n")
    jan = clock_to_epoch("01-01 00:00:30", 2026)
    assert jan is not None
    os.utime(path, (jan, jan))
    s = scan_file(path)
    assert [p.timestamp for p in s.stats] == [
        clock_to_epoch("12-31 23:59:50", 2025), clock_to_epoch("01-01 00:00:00", 2026)]


def test_scan_file_binary_and_huge_line(tmp_path: Path) -> None:
    path = tmp_path / "v.log"
    stats = "INFO 05-02 10:00:40 [loggers.py:111] Engine 000: Running: 8 reqs, Waiting: 1 reqs\n"
    path.write_bytes(b"\x00\xff\xfe garbage \x80\x81\n" + b"x" * (10 << 20) + b"\n" + stats.encode())
    s = scan_file(path, year=2025, max_line_bytes=1 << 16)
    assert s.error is None and s.counts["truncated"] == 1 and s.counts["lines"] == 3
    assert [p.values for p in s.stats] == [{"engine": 0.0, "running": 8.0, "waiting": 1.0}]


# --- LineSplitter / FileFollower -----------------------------------------------------------------------------
def test_line_splitter_bounded() -> None:
    sp = LineSplitter(8)
    assert sp.feed(b"ab") == [] and sp.feed(b"c\nde") == ["abc"]
    out = sp.feed(b"fghijklmnop")  # "defghijklmnop" overflows: emitted cut at 8 bytes, the rest dropped
    assert out == ["defghijk" + TRUNCATED_MARKER] and sp.pending_bytes == 0
    assert sp.feed(b"qrs" * 100) == [] and sp.pending_bytes == 0
    assert sp.feed(b"tail\nok\r\n\xff\n") == ["ok", "\ufffd"]
    assert sp.feed(b"end") == [] and sp.flush() == ["end"] and sp.truncated == 1


def test_follower_append_partial_rotate_truncate_delete(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text("old line\n")
    f = FileFollower(path)  # starts at the end, like tail -F
    assert f.poll() == []
    with path.open("a") as fh:
        fh.write("one\ntw")
    assert f.poll() == ["one"]
    with path.open("a") as fh:
        fh.write("o\n")
    assert f.poll() == ["two"]
    # rotation: the rest of the old file, then the new file from its start
    with path.open("a") as fh:
        fh.write("last of old\n")
    path.rename(tmp_path / "vllm.log.1")
    path.write_text("first of new\n")
    assert f.poll() == ["last of old", "first of new"]
    assert any("rotated" in n for n in f.drain_notices())
    # truncation: from the start again
    path.write_text("")
    assert f.poll() == []
    path.write_text("after truncate\n")
    assert f.poll() == ["after truncate"]
    # deletion: [] and one status message, then picked up again from the start
    path.unlink()
    assert f.poll() == [] and f.poll() == []
    assert f.status is not None and "disappeared" in f.status
    assert [n for n in f.drain_notices() if "disappeared" in n] == [f.status]
    path.write_text("back\n")
    assert f.poll() == ["back"] and f.status is None
    f.close()


def test_follower_truncate_while_open_and_missing_at_start(tmp_path: Path) -> None:
    path = tmp_path / "later.log"
    f = FileFollower(path)
    assert f.poll() == [] and f.status is not None and "does not exist" in f.status
    path.write_text("a\nb\n")
    assert f.poll() == ["a", "b"]  # a file that appears later is read from its start
    with path.open("r+") as fh:
        fh.truncate(0)
        fh.write("c\n")  # shorter than before
    assert f.poll() == ["c"]
    assert f.poll() == []
    f.close()
    g = FileFollower(tmp_path)
    assert g.poll() == [] and "directory" in (g.status or "")


def test_follower_binary_and_10mb_line_memory_bounded(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_bytes(b"")
    f = FileFollower(path, start_at_end=False, max_line_bytes=1 << 20, read_chunk=1 << 16)
    with path.open("ab") as fh:
        fh.write(b"\x00\x01\xfe\xff binary\n")
    (line,) = f.poll()
    assert "binary" in line and "\ufffd" in line
    with path.open("ab") as fh:
        for _ in range(10):
            fh.write(b"y" * (1 << 20))  # a 10 MB line, no newline yet
    out = f.poll()
    assert len(out) == 1 and out[0].endswith(TRUNCATED_MARKER) and len(out[0]) == (1 << 20) + len(TRUNCATED_MARKER)
    assert f._splitter.pending_bytes == 0  # nothing of the long line is held
    with path.open("ab") as fh:
        fh.write(b"more of it\nnext\n")
    assert f.poll() == ["next"] and f.truncated_lines == 1
    f.close()


# --- CommandFollower ----------------------------------------------------------------------------------------
async def _collect(follower: CommandFollower) -> list[str]:
    return [line async for line in follower.lines()]


def test_command_follower_lines_and_exit() -> None:
    f = CommandFollower(["sh", "-c", "echo a; echo b; printf c; echo oops >&2; exit 3"])
    assert asyncio.run(_collect(f)) == ["a", "b", "c"]
    assert f.returncode == 3 and f.error is not None and "status 3" in f.error and "oops" in f.error


def test_command_follower_missing_command() -> None:
    f = CommandFollower(["definitely-not-a-command-xyz", "-f"])
    with pytest.raises(LogSourceError, match="command not found"):
        asyncio.run(_collect(f))
    g = CommandFollower([str(Path(sys.executable).parent / "no-such-binary")])
    with pytest.raises(LogSourceError, match="not found"):
        asyncio.run(_collect(g))
    with pytest.raises(ValueError, match="argv is empty"):
        CommandFollower([])


def test_command_follower_stop() -> None:
    async def run() -> list[str]:
        f = CommandFollower(["sh", "-c", "echo first; exec sleep 60"])
        agen = f.lines()
        first = await agen.__anext__()
        await f.stop()
        rest = [line async for line in agen]
        assert f.returncode is not None
        return [first, *rest]

    assert asyncio.run(run()) == ["first"]


# --- literal dicts ------------------------------------------------------------------------------------------
def test_literal_dict_fail_soft() -> None:
    assert literal_dict("{'a': 1, 'b': [1, 2]}") == {"a": 1, "b": [1, 2]}
    assert literal_dict("{'a': <function f at 0x1>, 'b': 'x, y', 'c': Foo(d=1, e=[2])}") == {
        "a": "<function f at 0x1>", "b": "x, y", "c": "Foo(d=1, e=[2])"}
    assert literal_dict("a=1, b='two', c=torch.float16", "=") == {"a": 1, "b": "two", "c": "torch.float16"}
    assert literal_dict("{'unterminated: 1") == {}


# --- properties -----------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parsers_never_raise(text: str) -> None:
    p = parse_line(text, year=2025)
    parse_stats(text)
    if p is not None:
        parse_stats(p.message)
        recognize(p, "x")
    literal_dict(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("Avg prompt throughput: Running reqs Waiting KV cache usage % 0123456789.,"
                                             "{}[]()'\"\x1b=:-")), max_size=300))
def test_parsers_never_raise_on_near_misses(text: str) -> None:
    p = parse_line("(APIServer pid=1) INFO 01-01 00:00:00 [loggers.py:1] " + text, year=2025)
    assert p is not None and p.kind == "vllm"
    parse_stats(text)
    recognize(p, "x")


_counts = st.integers(min_value=0, max_value=10**6)
_rates = st.floats(min_value=0, max_value=1e7, allow_nan=False)
_pcts = st.floats(min_value=0, max_value=100, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(prompt=_rates, gen=_rates, running=_counts, waiting=_counts, kv=_pcts, hit=_pcts, pre=_counts,
       engine=st.integers(min_value=0, max_value=999), order=st.permutations(range(6)))
def test_parse_stats_round_trip(prompt: float, gen: float, running: int, waiting: int, kv: float, hit: float,
                                pre: int, engine: int, order: list[int]) -> None:
    parts = [f"Avg prompt throughput: {prompt:.1f} tokens/s", f"Avg generation throughput: {gen:.1f} tokens/s",
             f"Running: {running} reqs", f"Waiting: {waiting} reqs", f"Preemptions: {pre}",
             f"GPU KV cache usage: {kv:.1f}%"]
    message = f"Engine {engine:03d}: " + ", ".join(parts[i] for i in order) + f", Prefix cache hit rate: {hit:.1f}%"
    got = parse_stats(message)
    assert got is not None
    assert got == pytest.approx({
        "engine": engine, "prompt_tps": float(f"{prompt:.1f}"), "gen_tps": float(f"{gen:.1f}"), "running": running,
        "waiting": waiting, "preemptions": pre, "kv_usage": float(f"{kv:.1f}") / 100,
        "prefix_hit_rate": float(f"{hit:.1f}") / 100})
