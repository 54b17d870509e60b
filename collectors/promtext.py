"""Prometheus text exposition (0.0.4) into metric families: prometheus_client's parser, with a fast path in front.

Why not the library alone: its parser walks every label character by character in Python. On a loaded sim
engine's /metrics (~460 samples) it took 7.5 ms of CPU per scrape here, and the daemon reads two engines every
second: the parse alone was more than the whole daemon's budget (2% of a core). The fast path below handles the
plain shape every vLLM release, the router and dcgm-exporter write (legacy names, quoted label values without
escapes, `value [timestamp]`) with two regular expressions per series, parsed once per process (a series comes
back in every scrape with only its value changed), and hands the whole text to the library as
soon as one line is anything else (an escape, a quote in a comment, an exemplar, `__name__`, a control
character...), so an odd body is parsed exactly as before and an invalid one raises the library's error.
An engine's next scrape has the same lines with new values, so the grouping of the last texts is kept by their
shape (every line's text before its last space, plus the comments' last words): a text of a known shape is only
split and its values read (0.9 -> ~0.3 ms a scrape, measured on a sim engine's 425 samples).
`tests/collectors/test_promtext.py` holds both paths equal on every captured scrape and on generated texts.
The family grouping mirrors `prometheus_client.parser.text_fd_to_metric_families` (0.26) step for step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
_HEAD = re.compile(rf"({_NAME})(?:\{{([^{{}}]*)\}})?")
_SAMPLE = re.compile(rf"({_NAME})(?:\{{([^{{}}]*)\}})? +([^ \t]+)(?: +([^ \t]+))?")
_LABELS = re.compile(rf'(?:{_LABEL_NAME}="[^"]*",)*(?:{_LABEL_NAME}="[^"]*")?')  # the text has no backslash
_PAIR = re.compile(rf'({_LABEL_NAME})="([^"]*)"')
_COMMENT = re.compile(rf"# +(HELP|TYPE) +({_NAME})(?: +(.*))?")
# Control characters but tab and newline, for bytes.translate: deleting them from an ASCII text is ~6x cheaper
# than searching it with re `[\x00-\x08\x0b-\x1f\x7f]` (0.04 against 0.26 ms on a 48 KB scrape, measured).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f])
_TYPES = frozenset({"counter", "gauge", "summary", "histogram", "untyped", "unknown", "info", "stateset",
                    "gaugehistogram"})  # what prometheus_client.Metric takes ("untyped" becomes "unknown")
_ALLOWED = {"counter": ("",), "gauge": ("",), "summary": ("_count", "_sum", ""),
            "histogram": ("_count", "_sum", "_bucket")}


class Sample(NamedTuple):
    """One sample line: its name (a counter's with `_total`), labels and value."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Family:
    """One metric family: its name (a counter's without `_total`), help text, type and samples."""

    name: str
    documentation: str
    type: str
    samples: list[Sample] = field(default_factory=list)


# `name{labels}` -> (name, labels) as parsed before: the same series come back in every scrape with a new value
# (the labels dicts are shared between scrapes: read-only). Cleared when it outgrows _HEADS_MAX.
_HEADS: dict[str, tuple[str, dict[str, str]]] = {}
_HEADS_MAX = 50_000
# `# HELP|TYPE name rest` -> (HELP|TYPE, name, rest), likewise: the same comments come back in every scrape.
_COMMENTS: dict[str, tuple[str, str, str]] = {}


# A text's shape (each line's text before its last space) -> how its families were grouped. Bounded: cleared when
# it outgrows _SHAPES_MAX (a fleet read directly has one shape per engine whose label values differ).
_SHAPES: dict[tuple[str, ...], _Shape] = {}
_SHAPES_MAX = 256


class _Shape(NamedTuple):
    """A text's grouping: per family its name, help, type and (line index, sample name, labels) of its samples;
    the comments' (line index, last word), which the shape's key leaves out."""

    families: tuple[tuple[str, str, str, tuple[tuple[int, str, dict[str, str]], ...]], ...]
    comments: tuple[tuple[int, str], ...]


class _Unusual(Exception):
    """A line the fast path does not take: the library parses the whole text."""


def families(text: str) -> list[Family]:
    """Every family in `text`; the library's ValueError (or other parse error) for a text that is not Prometheus."""
    if text.isascii() and "\\" not in text and not _has_control(text):
        try:
            return _shaped(text)
        except _Unusual:
            pass
    return [Family(m.name, m.documentation, m.type, [Sample(s.name, s.labels, s.value) for s in m.samples])
            for m in text_string_to_metric_families(text)]


def _has_control(ascii_text: str) -> bool:
    """Whether an ASCII text holds a control character but tab and newline (the regular expression above)."""
    return len(ascii_text.encode("ascii").translate(None, _CONTROL_BYTES)) != len(ascii_text)


def _value(token: str) -> float:
    """The library's value rule (no `_`; an integer or a float), as a float (the library keeps integers as int:
    every consumer here treats them as numbers)."""
    if "_" in token:
        raise _Unusual
    try:
        return float(token)
    except ValueError:
        raise _Unusual from None


def _labels(body: str) -> dict[str, str]:
    if _LABELS.fullmatch(body) is None:
        raise _Unusual
    pairs = _PAIR.findall(body)
    labels = dict(pairs)
    if len(labels) != len(pairs) or ("__" in body and any(name.startswith("__") for name in labels)):
        raise _Unusual  # a duplicate or reserved label name: the library says what is wrong
    return labels


def _head(head: str) -> tuple[str, dict[str, str]] | None:
    """`name{labels}` parsed (and remembered); None when `head` is not exactly that."""
    m = _HEAD.fullmatch(head)
    if m is None:
        return None
    parsed = (m.group(1), _labels(m.group(2)) if m.group(2) else {})
    _HEADS[head] = parsed
    return parsed


def _build(name: str, documentation: str, typ: str, samples: list[Sample]) -> Family:
    if typ == "counter":
        if name == "_total":
            raise _Unusual  # an empty family name: the library says so
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [Sample(s.name + "_total", s.labels, s.value) for s in samples]
    return Family(name, documentation, "unknown" if typ == "untyped" else typ, samples)


def _shaped(text: str) -> list[Family]:
    """`_fast(text)`, from the kept grouping when a text of the same shape was parsed before."""
    parts = [line.rpartition(" ") for line in text.split("\n")]
    key = tuple([p[0] for p in parts])
    shape = _SHAPES.get(key)
    if shape is None or any(parts[i][2] != word for i, word in shape.comments):
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        out, shape = _fast(text, parts)
        if shape is not None:
            _SHAPES[key] = shape
        return out
    value = _value
    return [Family(name, documentation, typ, [Sample(sname, labels, value(parts[i][2])) for i, sname, labels in rows])
            for name, documentation, typ, rows in shape.families]


def _fast(text: str, parts: list[tuple[str, str, str]] | None = None) -> tuple[list[Family], _Shape | None]:
    """The families of `text` and, when every line was plain (`parts`: each line's rpartition at its last space),
    its shape for `_shaped`."""
    out: list[Family] = []
    grouped: list[tuple[str, str, str, tuple[tuple[int, str, dict[str, str]], ...]]] = []
    marks: list[tuple[int, str]] = []  # lines the shape's key does not pin down: comments, blank lines
    shaped = parts is not None
    name, documentation, typ = "", "", "untyped"
    samples: list[Sample] = []
    rows: list[int] = []
    allowed: tuple[str, ...] = ()
    sample_match = _SAMPLE.fullmatch
    heads, comments = _HEADS, _COMMENTS
    if len(heads) > _HEADS_MAX:
        heads.clear()
    if len(comments) > _HEADS_MAX:
        comments.clear()

    def emit(fam_name: str, fam_doc: str, fam_type: str, fam_samples: list[Sample], fam_rows: list[int]) -> None:
        family = _build(fam_name, fam_doc, fam_type, fam_samples)
        out.append(family)
        if shaped:
            grouped.append((family.name, family.documentation, family.type,
                            tuple((i, s.name, s.labels) for i, s in zip(fam_rows, family.samples, strict=True))))

    for index, raw in enumerate(text.split("\n")):
        line = raw.strip()
        if not line:
            marks.append((index, raw.rpartition(" ")[2]))
            continue
        if line[0] == "#":
            marks.append((index, raw.rpartition(" ")[2]))  # with the key's head, the whole line
            comment = comments.get(line)
            if comment is None:
                if '"' in line:
                    raise _Unusual
                c = _COMMENT.fullmatch(line)
                if c is None:
                    words = line.split(None, 3)
                    if (len(words) > 2 and words[1] not in ("HELP", "TYPE")) or len(words) < 2:
                        continue  # a plain comment: the library skips it too
                    raise _Unusual
                comment = comments[line] = (c.group(1), c.group(2), c.group(3) or "")
            kind, candidate, rest = comment
            if kind == "HELP":
                if candidate != name:
                    if name:
                        emit(name, documentation, typ, samples, rows)
                    name, typ, samples, rows, allowed = candidate, "untyped", [], [], (candidate,)
                documentation = rest
            else:
                if rest not in _TYPES:
                    raise _Unusual
                if candidate != name:
                    if name:
                        emit(name, documentation, typ, samples, rows)
                    name, documentation, samples, rows = candidate, "", [], []
                typ = rest
                allowed = tuple(name + suffix for suffix in _ALLOWED.get(typ, ("",)))
            continue
        if shaped and line != raw:
            shaped = False  # a sample's value is read from the unstripped line: keep no shape for this text
        head, _, token = line.rpartition(" ")
        parsed = heads.get(head)
        if parsed is None:
            parsed = _head(head)
        if parsed is not None:
            sample_name, labels = parsed
            sample = Sample(sample_name, labels, _value(token))
        else:  # not `name{labels} value`: a timestamp, several spaces, a space inside a label value...
            shaped = False
            m = sample_match(line)
            if m is None:
                raise _Unusual
            sample_name, body, value, stamp = m.groups()
            if stamp is not None:
                _value(stamp)
            sample = Sample(sample_name, _labels(body) if body else {}, _value(value))
        if sample_name in allowed:
            samples.append(sample)
            rows.append(index)
            continue
        if name:
            emit(name, documentation, typ, samples, rows)
        name, documentation, typ, samples, rows, allowed = "", "", "untyped", [], [], ()
        emit(sample_name, "", "untyped", [sample], [index])
    if name:
        emit(name, documentation, typ, samples, rows)
    return out, (_Shape(tuple(grouped), tuple(marks)) if shaped else None)
