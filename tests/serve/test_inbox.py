"""The durable alert queue: dedupe, a bound, and what survives a restart (or a torn last line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.serve.alerts import Alert, parse
from doctor.serve.inbox import Inbox, QueueFull
from tests.serve.payloads import alert, body


def alerts(*fingerprints: str, status: str = "firing") -> tuple[Alert, ...]:
    return parse(body(*(alert(f, status=status) for f in fingerprints))).alerts


def test_an_alert_seen_before_is_a_duplicate_even_after_it_was_handled(tmp_path: Path) -> None:
    box = Inbox(tmp_path, capacity=10)
    first = box.offer(alerts("a1", "a2", "a1"))
    assert [e.key.split("|")[0] for e in first.accepted] == ["a1", "a2"] and first.duplicates == 1
    box.done(first.accepted[0].key, "confirmed")
    again = box.offer(alerts("a1", "a2"))
    assert again.accepted == () and again.duplicates == 2
    assert len(box.offer(alerts("a1", status="resolved")).accepted) == 1  # another status: another key


def test_a_full_queue_takes_nothing_of_the_post(tmp_path: Path) -> None:
    box = Inbox(tmp_path, capacity=3)
    box.offer(alerts("a1", "a2"))
    with pytest.raises(QueueFull, match="2 of 3"):
        box.offer(alerts("b1", "b2"))
    assert box.depth == 2
    assert len(box.offer(alerts("b1")).accepted) == 1


def test_pending_alerts_and_keys_survive_a_restart(tmp_path: Path) -> None:
    box = Inbox(tmp_path, capacity=10)
    got = box.offer(alerts("a1", "a2", "a3"))
    box.done(got.accepted[1].key, "resolved")
    again = Inbox(tmp_path, capacity=10)
    assert [e.alert.fingerprint for e in again.pending.values()] == ["a1", "a3"]
    assert again.offer(alerts("a2")).duplicates == 1


def test_a_torn_last_line_is_skipped_and_the_next_write_starts_a_fresh_line(tmp_path: Path) -> None:
    box = Inbox(tmp_path, capacity=10)
    box.offer(alerts("a1"))
    with open(box.path, "ab") as f:
        f.write(b'{"op": "put", "key": "x|firing|t", "at": 1, "alert": {"fingerp')
    again = Inbox(tmp_path, capacity=10)
    assert list(again.pending) == [next(iter(box.pending))] and "torn last line" in again.problems[0]
    again.offer(alerts("a2"))
    assert len(Inbox(tmp_path, capacity=10).pending) == 2


def test_compaction_keeps_the_pending_alerts_and_bounds_the_file(tmp_path: Path) -> None:
    box = Inbox(tmp_path, capacity=150, keep_keys=50, compact_lines=200)
    for i in range(300):
        got = box.offer(alerts(f"f{i}"))
        if i % 3:
            box.done(got.accepted[0].key, "confirmed")
    assert box.depth == 100
    lines = box.path.read_text().splitlines()
    assert len(lines) < 400 and len(box.seen) <= box.depth + 1  # keys of queued alerts are never forgotten
    again = Inbox(tmp_path, capacity=150, keep_keys=50)
    assert list(again.pending) == list(box.pending)
