"""The logs screen's numbers: the tail of an engine's log file (read from the end, bounded), the lines a filter keeps
with context lines around each match, and which lines are events the doctor parsed (so the screen marks them)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor.secrets import REDACT

TAIL_BYTES = 256 * 1024


def tail(path: Path, *, max_bytes: int = TAIL_BYTES, max_lines: int = 2000) -> list[str]:
    """The last lines of a file (at most `max_bytes` read, a cut first line dropped); OSError when unreadable."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]
    return [REDACT.text(line) for line in lines[-max_lines:]]  # vLLM logs its arguments, --api-key included


@dataclass(frozen=True)
class Shown:
    """One line as shown: its number in the tail, the text, whether it matched, whether the doctor parsed it."""

    index: int
    text: str
    match: bool
    event: str | None  # the event kind, when the doctor parsed this line as one
    gap_before: bool = False  # lines were left out before this one


def event_kinds(lines: Sequence[str], events: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Line index -> the kind of the parsed event whose message the line holds (the newest such line)."""
    out: dict[int, str] = {}
    for ev in events:
        message = str(ev.get("message") or "").strip()
        if not message:
            continue
        probe = message[:80]
        for i in range(len(lines) - 1, -1, -1):
            if probe in lines[i]:
                out[i] = str(ev.get("kind") or "event")
                break
    return out


def view(lines: Sequence[str], needle: str, *, context: int = 2, events: Sequence[Mapping[str, Any]] = (),
         last: int = 200) -> list[Shown]:
    """The lines to show: all (the last `last`) without a filter, else each match (case-insensitive) with `context`
    lines either side, and a gap mark where lines were left out."""
    kinds = event_kinds(lines, events)
    low = needle.lower().strip()
    if not low:
        start = max(0, len(lines) - last)
        return [Shown(i, lines[i], False, kinds.get(i)) for i in range(start, len(lines))]
    hits = [i for i, line in enumerate(lines) if low in line.lower()]
    keep: set[int] = set()
    for i in hits:
        keep.update(range(max(0, i - context), min(len(lines), i + context + 1)))
    out: list[Shown] = []
    previous = -1
    for i in sorted(keep)[-last:]:
        out.append(Shown(i, lines[i], i in hits, kinds.get(i), gap_before=previous >= 0 and i != previous + 1))
        previous = i
    return out
