"""Every `vllm serve` flag of the imitated release is accepted; the ones that show outside do what they do."""

from __future__ import annotations

import re

import httpx
import pytest

from sim.args import EngineArgsError, parse_engine_args
from sim.profiles import PROFILE_NAMES
from sim.testing import engine_thread
from sim.vllm_flags import release_flags, release_name

FAST = ["--enforce-eager", "--time-scale", "0.1"]
ACCESS = re.compile(r'"(?P<method>\w+) (?P<path>\S+) HTTP/1.1" (?P<status>\d{3}) ')


@pytest.mark.parametrize("version", PROFILE_NAMES)
def test_every_flag_of_the_release_parses(version: str) -> None:
    for flag in release_flags(version):
        argv = ["m", "--vllm-version", version]
        option = next(o for o in flag.options if o not in flag.false_options)
        if flag.kind in ("true", "bool"):
            argv.append(option)
        elif flag.kind in ("value", "+", "*", "append", "strbool", "?"):
            value = flag.choices[0] if flag.choices else {"int": "1", "float": "0.5"}.get(flag.type, "x")
            if flag.kind == "strbool":
                value = "true"
            argv += [option, value]
        try:
            parse_engine_args(argv, env={})
        except EngineArgsError as exc:
            assert "unrecognized arguments" not in str(exc) and "invalid choice" not in str(exc), (flag, exc)


def test_tools_flags_are_accepted_and_ignored_ones_are_named() -> None:
    _, options = parse_engine_args(["m", "--enable-log-requests", "--dtype", "half",
                                    "--disable-access-log-for-endpoints", "/health,/metrics"], env={})
    assert options.log_requests
    assert options.access_log_excluded == frozenset({"/health", "/metrics"})
    assert options.ignored_flags == ["--dtype"]
    assert options.non_default_args["dtype"] == "half"


@pytest.mark.parametrize(("version", "flag"), [("0.8", "--enable-log-requests"),
                                               ("0.12", "--disable-access-log-for-endpoints=/health"),
                                               ("0.33", "--no-such-flag")])
def test_flags_not_in_the_release_are_rejected_like_its_argparse(version: str, flag: str) -> None:
    with pytest.raises(EngineArgsError, match=f"unrecognized arguments: {re.escape(flag)}"):
        parse_engine_args(["m", "--vllm-version", version, flag], env={})


def test_flexible_parser_underscores_and_tables_name_their_release() -> None:
    config, _ = parse_engine_args(["m", "--max_num_seqs", "5"], env={})
    assert config.max_num_seqs == 5
    assert release_name("0.33") == "0.33.0" and release_name("0.6") == "0.6.6.post1"


def test_ignored_flags_warning_and_request_log_lines() -> None:
    argv = ["m", *FAST, "--enable-log-requests", "--dtype", "half", "--vllm-version", "0.33"]
    with engine_thread(argv) as eng, httpx.Client(base_url=eng.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": "m", "prompt": "hello there", "max_tokens": 3})
        rid = r.json()["id"]
        lines = list(eng.logs)
    warn = [x for x in lines if "does not model these vLLM arguments" in x]
    assert len(warn) == 1 and "WARNING" in warn[0] and "--dtype" in warn[0]
    received = [x for x in lines if f"Received request {rid}: params: SamplingParams(n=1," in x]
    assert len(received) == 1 and "max_tokens=3" in received[0] and "lora_request: None." in received[0]
    assert any(x.endswith(f"Added request {rid}.") for x in lines)


@pytest.mark.parametrize(("version", "flags", "logged"), [("0.8", [], True), ("0.8", ["--disable-log-requests"], False),
                                                          ("0.10", [], False), ("0.6", [], True)])
def test_request_logging_default_per_release(version: str, flags: list[str], logged: bool) -> None:
    with engine_thread(["m", *FAST, "--vllm-version", version, *flags]) as eng, \
            httpx.Client(base_url=eng.url, timeout=30) as c:
        c.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2})
        lines = list(eng.logs)
    got = [x for x in lines if "Received request " in x]
    assert bool(got) == logged
    if got and version in ("0.6", "0.8"):
        assert "prompt: 'hi', params: SamplingParams(" in got[0] and "prompt_adapter_request: None." in got[0]


def test_access_log_filters() -> None:
    argv = ["m", *FAST, "--disable-access-log-for-endpoints", "/health,/metrics"]
    with engine_thread(argv) as eng, httpx.Client(base_url=eng.url, timeout=30) as c:
        c.get("/health")
        c.get("/metrics?x=1")
        c.get("/v1/models")
        paths = [m["path"] for x in eng.logs if (m := ACCESS.search(x))]
    assert paths == ["/v1/models"]
    with engine_thread(["m", *FAST, "--disable-uvicorn-access-log"]) as eng, \
            httpx.Client(base_url=eng.url, timeout=30) as c:
        c.get("/v1/models")
        assert not [x for x in eng.logs if ACCESS.search(x)]
