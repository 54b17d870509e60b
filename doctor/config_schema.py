"""Checking a parsed TOML document key by key, so that every error names the file, the key path and the line.

`Checker` owns the file name and a line index; `Table` wraps one TOML table with typed getters
(`string`, `integer`, `number`, `ratio`, `duration`, `url`, ...) that raise `ConfigError` saying what is
allowed. The doctor's own schema lives in doctor/config.py.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from doctor.durations import DurationError, format_duration, parse_duration

KeyPath = tuple[str | int, ...]
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
# Ceilings for keys that name none of their own: beyond these a value is a typo (10^29), not a setting.
MAX_DURATION_S = 30 * 86400.0  # 30 days
MAX_INTEGER = 2**53  # the largest whole number JSON readers keep exactly
MAX_NUMBER = 1e15


class ConfigError(ValueError):
    """A config file that cannot be used. The message reads `FILE:LINE: KEY.PATH: what is wrong and allowed`."""

    def __init__(self, file: str, key: str, reason: str, line: int | None = None) -> None:
        self.file, self.key, self.reason, self.line = file, key, reason, line
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {key}: {reason}" if key else f"{where}: {reason}")


def format_path(path: KeyPath) -> str:
    """`engines[1].thresholds.kv_pressure.kv_usage_ratio` (indices from 0; odd names quoted)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if _BARE.match(part) else '"' + part.replace("\\", "\\\\").replace('"', '\\"') + '"'
            out += f".{text}" if out else text
    return out


def describe(value: Any) -> str:
    """A value as the user wrote it, with its TOML type: `"8" (a string)`."""
    kinds = {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "a table"}
    kind = next((k for t, k in kinds.items() if isinstance(value, t)), type(value).__name__)
    shown = repr(value) if not isinstance(value, dict) else "{...}"
    if isinstance(value, str):
        shown = '"' + value + '"'
    elif isinstance(value, bool):
        shown = "true" if value else "false"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{shown} ({kind})"


def suggest(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` when something close exists, else ``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


# ---------------------------------------------------------------- line index

_SEG = re.compile(r"""\s*(?:([A-Za-z0-9_-]+)|"((?:[^"\\]|\\.)*)"|'([^']*)')\s*""")
_HEADER = re.compile(r"^\s*(\[\[|\[)(.*?)(\]\]|\])\s*(?:#.*)?$")
_KEYLINE = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
                      r"""(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'))*)\s*=""")


def _split_key(text: str) -> list[str] | None:
    parts: list[str] = []
    for chunk in _split_dots(text):
        m = _SEG.fullmatch(chunk)
        if m is None:
            return None
        parts.append(next(g for g in m.groups() if g is not None))
    return parts


def _split_dots(text: str) -> list[str]:
    out, cur, quote = [], "", ""
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            cur += ch
        elif ch == ".":
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def line_index(text: str) -> dict[KeyPath, int | None]:
    """Key path -> line where it is written (None when it appears more than once: ambiguous).

    A line scanner, not a parser: tomllib has already accepted the document. Headers, `[[arrays]]`
    (with their running index) and `key =` lines are recorded; multi-line strings are skipped.
    """
    index: dict[KeyPath, int | None] = {}
    arrays: dict[KeyPath, int] = {}
    current: KeyPath = ()
    in_string = ""

    def record(path: KeyPath, line: int) -> None:
        index[path] = None if path in index and index[path] != line else line

    def resolve(parts: Sequence[str]) -> KeyPath:
        out: KeyPath = ()
        for p in parts:
            out = (*out, p)
            if out in arrays:
                out = (*out, arrays[out])
        return out

    for lineno, raw in enumerate(text.splitlines(), start=1):
        if in_string:
            if raw.count(in_string) % 2 == 1:
                in_string = ""
            continue
        header = _HEADER.match(raw)
        if header and not _KEYLINE.match(raw):
            parts = _split_key(header.group(2))
            if parts is None:
                continue
            if header.group(1) == "[[":
                base = (*resolve(parts[:-1]), parts[-1])
                arrays[base] = arrays.get(base, -1) + 1
                if base not in index:
                    index[base] = lineno
                current = (*base, arrays[base])
            else:
                current = resolve(parts)
            record(current, lineno)
            continue
        key = _KEYLINE.match(raw)
        if key:
            parts = _split_key(key.group(1))
            if parts:
                path = current
                for p in parts:
                    path = (*path, p)
                    record(path, lineno)
        for quote in ('"""', "'''"):
            if raw.count(quote) % 2 == 1:
                in_string = quote
                break
    return index


# ---------------------------------------------------------------- checking

class Checker:
    """The file being read: makes ConfigErrors with the key's line when it can be found."""

    def __init__(self, file: str, text: str = "") -> None:
        self.file = file
        self._lines = line_index(text) if text else {}

    def line_of(self, path: KeyPath) -> int | None:
        probe = path
        while probe:
            if probe in self._lines:
                return self._lines[probe]
            probe = probe[:-1]
        return None

    def error(self, path: KeyPath, reason: str) -> ConfigError:
        return ConfigError(self.file, format_path(path), reason, self.line_of(path))


def parse_toml(path: Path) -> tuple[dict[str, Any], Checker]:
    """Read and parse a TOML file; a missing file, bad encoding or syntax error is a ConfigError."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(name, "", "no such file") from None
    except IsADirectoryError:
        raise ConfigError(name, "", "is a directory, expected a TOML file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(name, "", f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ConfigError(name, "", f"cannot read it: {e.strerror or e}") from None
    try:
        doc = tomllib.loads(text)
    except RecursionError:  # tomllib recurses per nested array or inline table
        raise ConfigError(name, "", "arrays or inline tables are nested too deeply to read (a config needs a "
                                    "few levels, not hundreds)") from None
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        line = getattr(e, "lineno", None)
        col = getattr(e, "colno", None)
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)", msg)
        if m:
            line, col = line or int(m.group(1)), col or int(m.group(2))
            msg = msg[:m.start()] + msg[m.end():]
        msg = msg.replace(" (at end of document)", " at the end of the file")
        where = f", column {col}" if col else ""
        raise ConfigError(name, "", f"TOML syntax error{where}: {msg}", line) from None
    return doc, Checker(name, text)


_MISSING = object()


class Table:
    """One TOML table at a key path, with typed getters that raise ConfigError."""

    def __init__(self, checker: Checker, data: dict[str, Any], path: KeyPath = ()) -> None:
        self.checker, self.data, self.path = checker, data, path

    def error(self, key: str | int | None, reason: str) -> ConfigError:
        return self.checker.error(self.path if key is None else (*self.path, key), reason)

    def only(self, allowed: Sequence[str]) -> None:
        """Every key must be one of `allowed`."""
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"unknown key '{key}'{suggest(key, allowed)} "
                                      f"(allowed here: {', '.join(allowed)})")

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.error(None, f"missing required key '{key}'")
            return _MISSING
        return self.data[key]

    def sub(self, key: str) -> Table:
        """A sub-table (empty when absent)."""
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table ([{format_path((*self.path, key))}]), got {describe(value)}")
        return Table(self.checker, value, (*self.path, key))

    def tables(self, key: str) -> list[Table]:
        """An array of tables ([[key]]), empty when absent."""
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, f"expected an array of tables ([[{format_path((*self.path, key))}]]), "
                                  f"got {describe(value)}")
        return [Table(self.checker, v, (*self.path, key, i)) for i, v in enumerate(value)]

    def string(self, key: str, default: str | None = None, *, required: bool = False,
               choices: Sequence[str] | None = None) -> str | None:
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if choices is not None:
            if value not in choices:
                hint = suggest(value, choices) if isinstance(value, str) else ""
                raise self.error(key, f"expected one of {', '.join(choices)}, got {describe(value)}{hint}")
            return str(value)
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {describe(value)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {describe(value)}")
        return value

    def integer(self, key: str, default: int | None = None, *, minimum: int | None = None,
                maximum: int | None = MAX_INTEGER) -> int | None:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected a whole number{_range(minimum, maximum)}, got {describe(value)}")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise self.error(key, f"expected a whole number{_range(minimum, maximum)}, got {value}")
        return value

    def number(self, key: str, default: float | None = None, *, minimum: float | None = None,
               maximum: float | None = MAX_NUMBER) -> float | None:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        return check_number(self, key, value, minimum, maximum)

    def ratio(self, key: str, default: float | None = None) -> float | None:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise self.error(key, f"expected a number between 0 and 1 (a ratio: 0.5 is half), got {describe(value)}")
        return float(value)

    def duration(self, key: str, default: float | None = None, *, positive: bool = True,
                 maximum: float = MAX_DURATION_S) -> float | None:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        return check_duration(self, key, value, positive, maximum)

    def url(self, key: str, *, required: bool = False) -> str | None:
        value = self._get(key, required)
        if value is _MISSING:
            return None
        return check_url(self, key, value)

    def strings(self, key: str, *, non_empty: bool = False) -> tuple[str, ...]:
        value = self._get(key, False)
        if value is _MISSING:
            return ()
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of strings, got {describe(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise self.error(key, f"item {i}: expected a non-empty string, got {describe(item)}")
        if non_empty and not value:
            raise self.error(key, "expected at least one string, got an empty list")
        return tuple(value)

    def integers(self, key: str, *, minimum: int = 0, maximum: int = 1 << 16) -> tuple[int, ...]:
        value = self._get(key, False)
        if value is _MISSING:
            return ()
        if not isinstance(value, list):
            raise self.error(key, f"expected a list of whole numbers like [0, 1], got {describe(value)}")
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or not minimum <= item <= maximum:
                raise self.error(key, f"item {i}: expected a whole number between {minimum} and {maximum}, "
                                      f"got {describe(item)}")
        if len(set(value)) != len(value):
            raise self.error(key, f"lists the same value twice: {value}")
        return tuple(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" between {_num(minimum)} and {_num(maximum)}"
    if minimum is not None:
        return f" >= {_num(minimum)}"
    if maximum is not None:
        return f" <= {_num(maximum)}"
    return ""


def check_number(table: Table, key: str, value: Any, minimum: float | None = None,
                 maximum: float | None = MAX_NUMBER) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise table.error(key, f"expected a number{_range(minimum, maximum)}, got {describe(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise table.error(key, f"expected a number{_range(minimum, maximum)}, got {value}")
    return float(value)


def check_duration(table: Table, key: str, value: Any, positive: bool = True,
                   maximum: float = MAX_DURATION_S) -> float:
    """Seconds, or a string like "500ms", "5m", "1h30m", at most `maximum` seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise table.error(key, f"expected a duration in seconds or like \"5m\", got {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise table.error(key, f"expected a finite duration, got {value}")
    try:
        seconds = parse_duration(value)
    except DurationError as e:
        raise table.error(key, str(e)) from None
    if positive and seconds <= 0:
        raise table.error(key, f"expected a duration above zero, got {describe(value)}")
    if not seconds <= maximum:
        raise table.error(key, f"expected a duration {'above' if positive else 'from'} 0 up to "
                               f"{format_duration(maximum)} ({maximum:g} s), got {describe(value)}")
    return seconds


def check_url(table: Table, key: str | int, value: Any) -> str:
    """http(s)://HOST[:PORT][/path], returned without a trailing slash."""
    if not isinstance(value, str):
        raise table.error(key, f"expected a URL like http://HOST:PORT, got {describe(value)}")
    try:
        parts = urlsplit(value)
    except ValueError:  # "Invalid IPv6 URL": an unbalanced [ or ]
        raise table.error(key, f"expected a URL like http://HOST:PORT, got {describe(value)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise table.error(key, f"expected a URL like http://HOST:PORT, got {describe(value)}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise table.error(key, f"bad port in URL {describe(value)}") from None
    return value.rstrip("/")
