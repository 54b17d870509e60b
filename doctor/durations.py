"""Durations as people write them: "500ms", "5s", "15m", "1h", "1h30m", or plain seconds."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    """A duration that cannot be read."""


def parse_duration(text: str | float | int) -> float:
    """Seconds in a duration; raises DurationError naming the text and the accepted forms."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise DurationError(f"duration must not be negative: {text}")
        return float(text)
    s = str(text).strip().lower()
    try:
        value = float(s)
    except ValueError:
        pass
    else:
        if value < 0:
            raise DurationError(f"duration must not be negative: {text!r}")
        return value
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise DurationError(f"cannot read duration {text!r}: write it like 500ms, 5s, 15m, 1h or 1h30m")
    return total


def format_duration(seconds: float) -> str:
    """Short human form: 0.5s, 45s, 15m, 2h."""
    if seconds < 60:
        return f"{seconds:g}s"
    if seconds < 3600:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"
