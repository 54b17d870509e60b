"""collectors.promtext: the fast path gives exactly what prometheus_client's parser gives, or hands over to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collectors import promtext
from router.metrics import RouterMetrics
from sim.exposition import render_metrics
from sim.profiles import PROFILE_NAMES, PROFILES
from sim.stats import new_metrics_state

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = sorted(p for p in FIXTURES.glob("*.txt") if not p.name.startswith("logs_"))


def _library(text: str) -> list[tuple[object, ...]] | type[BaseException]:
    try:
        return [(m.name, m.documentation, m.type, [(s.name, s.labels, repr(float(s.value))) for s in m.samples])
                for m in text_string_to_metric_families(text)]
    except Exception as exc:  # the library raises ValueError, IndexError, KeyError... on garbage
        return type(exc)


def _ours(text: str) -> list[tuple[object, ...]] | type[BaseException]:
    try:
        return [(f.name, f.documentation, f.type, [(s.name, s.labels, repr(float(s.value))) for s in f.samples])
                for f in promtext.families(text)]
    except Exception as exc:
        return type(exc)


def _fast_path(text: str) -> list[promtext.Family]:
    """The fast path alone (fails the test when it would hand the text to the library)."""
    try:
        return promtext._fast(text)[0]
    except promtext._Unusual:
        pytest.fail("the fast path handed a plain scrape to the library")


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_captured_scrape_takes_the_fast_path_and_equals_the_library(path: Path) -> None:
    text = path.read_text()
    fast = [(f.name, f.documentation, f.type, [(s.name, s.labels, repr(float(s.value))) for s in f.samples])
            for f in _fast_path(text)]
    assert fast == _library(text)
    assert len(fast) > 5


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_the_sims_scrape_of_every_version_profile_takes_the_fast_path(name: str) -> None:
    profile = PROFILES[name]
    state = new_metrics_state(profile, max_model_len=8192, created=1_790_000_000.0)
    state.running, state.waiting, state.kv_usage = 3, 1, 0.5
    state.ttft.observe(0.3)
    text = render_metrics(profile, state, model_name="m").decode()
    assert [(f.name, f.type, len(f.samples)) for f in _fast_path(text)] == \
        [(m.name, m.type, len(m.samples)) for m in text_string_to_metric_families(text)]


def test_the_routers_scrape_takes_the_fast_path() -> None:
    metrics = RouterMetrics()
    metrics.request("/v1/completions", "hot", 200)
    metrics.reject("length_limit")
    text = metrics.render().decode()
    assert _ours(text) == _library(text)
    assert any(f.name == "router_requests" for f in _fast_path(text))


@pytest.mark.parametrize("text", [
    'a{x="1\\"2"} 3\n',  # an escaped quote
    'a{x="}"} 3\n',  # a brace inside a value
    'a{__name__="b"} 3\n',
    'a{x="1",x="2"} 3\n',  # duplicate label
    "a 1 # {t=\"e\"} 2\n",  # exemplar
    "a\t1\n",
    "a 1_000\n",
    "a 0x10\n",
    "# HELP a it says \\n\na 1\n",
    "# TYPE a\na 1\n",
    "# TYPE a counter extra\na 1\n",
    "a{x=\"1\"}2\n",
    "a{x = \"1\"} 2\n",
    "a{x=\"é\"} 2\n",
    "a 1\r\nb 2\r\n",
    "a{x=\"1\" y=\"2\"} 2\n",
    "a{,} 1\n",
])
def test_unusual_lines_are_parsed_by_the_library_as_before(text: str) -> None:
    assert _ours(text) == _library(text)


_NAMES = st.sampled_from(["a", "a_total", "a_bucket", "a_sum", "a_count", "b", "vllm:x", "c_created", "9z", ""])
_VALUES = st.sampled_from(["1", "0", "-2.5", "1e3", "+Inf", "-Inf", "NaN", "nan", "1_0", "x", "", "0x1", "1e999"])
_LABEL_VALUE = st.text(alphabet='ab"\\}{,= \t\né', max_size=4)
_LABEL = st.tuples(st.sampled_from(["le", "x", "__n", "9", "model_name"]), _LABEL_VALUE)


def _sample(name: str, labels: list[tuple[str, str]], value: str, stamp: str | None, braces: bool) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{'{' + body + '}' if braces or labels else ''} {value}{' ' + stamp if stamp else ''}"


_LINE = st.one_of(
    st.builds(_sample, _NAMES, st.lists(_LABEL, max_size=3), _VALUES, st.sampled_from([None, "1700000000000", "x"]),
              st.booleans()),
    st.builds(lambda n, d: f"# HELP {n} {d}", _NAMES, st.text(alphabet='ab "\\', max_size=5)),
    st.builds(lambda n, t: f"# TYPE {n} {t}", _NAMES,
              st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "info", "bogus", ""])),
    st.sampled_from(["", "# a comment", "#", "# HELP", "  ", "}", "{"]),
    st.text(max_size=12),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, max_size=12))
def test_generated_texts_parse_the_same_either_way(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    assert _ours(text) == _library(text)


def _with_new_words(lines: list[str], words: list[str]) -> str:
    """Each line with its last word (after its last space; the whole line when it has none) replaced."""
    out = []
    for line, word in zip(lines, words, strict=False):
        head, space, _ = line.rpartition(" ")
        out.append(head + space + word)
    return "\n".join(out + lines[len(words):]) + "\n"


def test_a_scrape_of_a_known_shape_is_read_from_its_shape_and_equals_the_library() -> None:
    profile = PROFILES[PROFILE_NAMES[-1]]
    state = new_metrics_state(profile, max_model_len=8192, created=1_790_000_000.0)
    texts = []
    for running in (1, 7):
        state.running, state.waiting, state.kv_usage = running, running + 1, running / 10
        state.ttft.observe(0.1 * running)
        texts.append(render_metrics(profile, state, model_name="m").decode())
    promtext._SHAPES.clear()
    assert _ours(texts[0]) == _library(texts[0])
    assert len(promtext._SHAPES) == 1
    key = next(iter(promtext._SHAPES))
    assert _ours(texts[1]) == _library(texts[1]) != _library(texts[0])
    assert list(promtext._SHAPES) == [key]  # the second text was read from the first's shape


@pytest.mark.parametrize("second", [
    "# HELP a other words\n# TYPE a gauge\na 2\n\n",  # the help's last word changed: another shape
    "# HELP a says this\n# TYPE a counter\na 2\n\n",  # the type changed
    "# HELP a says this\n# TYPE a gauge\na 2\ngarbage\n",  # a blank line became a line without a space
    "# HELP a says this\n# TYPE a gauge\na 1_0\n\n",  # a value the fast path does not take
    "# HELP a says this\n# TYPE a gauge\na x\n\n",  # not a number
])
def test_a_text_like_a_known_shape_in_all_but_its_last_words_parses_as_the_library_does(second: str) -> None:
    first = "# HELP a says this\n# TYPE a gauge\na 1\n\n"
    promtext._SHAPES.clear()
    assert _ours(first) == _library(first)
    assert promtext._SHAPES
    assert _ours(second) == _library(second)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_LINE, max_size=12), st.lists(st.one_of(_VALUES, st.text(alphabet='ab #"{}_', max_size=4)),
                                              max_size=13))
def test_generated_texts_of_a_known_shape_parse_the_same_either_way(lines: list[str], words: list[str]) -> None:
    first = "\n".join(lines) + "\n"
    assert _ours(first) == _library(first)  # keeps its shape when it was plain
    second = _with_new_words(lines, words)
    assert _ours(second) == _library(second)


def test_control_characters_are_found_as_the_regular_expression_finds_them() -> None:
    import re

    control = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
    for code in range(128):
        text = f"a 1\nb{chr(code)} 2\n"
        assert promtext._has_control(text) == (control.search(text) is not None), code
