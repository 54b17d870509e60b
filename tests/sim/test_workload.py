"""Workload generation, prompts and trace parsing (sim/workload.py)."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.workload import (
    WORKLOAD_PRESETS,
    RequestSpec,
    TraceError,
    WorkloadSpec,
    generate,
    load_trace,
    prompt_text,
    prompt_token_ids,
    workload_preset,
)

# --- generate ---------------------------------------------------------------------------------


def test_same_seed_same_list_and_other_seed_differs() -> None:
    spec = WorkloadSpec(rate_qps=5, duration_s=60, long_share=0.1, prefix_share=0.3, seed=7)
    assert generate(spec) == generate(spec)
    assert generate(spec) != generate(replace(spec, seed=8))


def test_poisson_rate_and_sizes_within_tolerance() -> None:
    reqs = generate(WorkloadSpec(rate_qps=20, duration_s=200, seed=1))
    assert abs(len(reqs) - 4000) < 4 * math.sqrt(4000)
    assert all(0 <= r.arrival_s < 200 for r in reqs)
    assert [r.index for r in reqs] == list(range(len(reqs)))
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(reqs)]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 0.9 < cv < 1.1  # exponential gaps
    prompts = sorted(r.prompt_tokens for r in reqs)
    assert 360 < statistics.median(prompts) < 440
    assert max(prompts) <= 4000 and min(prompts) >= 1
    outputs = [r.output_tokens for r in reqs]
    assert 45 <= statistics.median(outputs) <= 55
    assert max(outputs) <= 1024
    assert not any(r.long for r in reqs)
    assert all(r.prefix_group is None and r.prefix_tokens == 0 for r in reqs)


def test_num_requests_rescaled_to_n_over_rate_like_vllm() -> None:
    reqs = generate(WorkloadSpec(rate_qps=4, num_requests=500, seed=3))
    assert len(reqs) == 500
    assert reqs[-1].arrival_s == pytest.approx(500 / 4)


def test_gamma_burstiness_sets_the_cv() -> None:
    reqs = generate(WorkloadSpec(rate_qps=10, num_requests=4000, arrival="gamma", burstiness=0.25, seed=2))
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(reqs)]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 1.7 < cv < 2.3  # 1/sqrt(0.25) = 2
    regular = generate(WorkloadSpec(rate_qps=10, num_requests=4000, arrival="gamma", burstiness=4, seed=2))
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(regular)]
    assert 0.4 < statistics.pstdev(gaps) / statistics.mean(gaps) < 0.6


def test_infinite_rate_sends_all_at_zero() -> None:
    reqs = generate(WorkloadSpec(rate_qps=math.inf, num_requests=10))
    assert [r.arrival_s for r in reqs] == [0.0] * 10


def test_long_share_statistics() -> None:
    spec = WorkloadSpec(rate_qps=50, duration_s=100, long_share=0.2, seed=4)
    reqs = generate(spec)
    tail = [r for r in reqs if r.prompt_tokens >= spec.long_min]
    assert 0.17 < len(tail) / len(reqs) < 0.23
    assert all(spec.long_min <= r.prompt_tokens <= spec.long_max for r in tail)
    # Class label: prompt >= long_threshold, i.e. about 3/4 of the U(4096, 8192) tail.
    assert all(r.long == (r.prompt_tokens >= 5120) for r in reqs)
    assert 0.12 < sum(r.long for r in reqs) / len(reqs) < 0.18


def test_long_share_change_keeps_arrivals() -> None:
    base = WorkloadSpec(rate_qps=5, duration_s=100, seed=5)
    a, b = generate(base), generate(replace(base, long_share=0.5))
    assert [r.arrival_s for r in a] == [r.arrival_s for r in b]
    assert [r.output_tokens for r in a] == [r.output_tokens for r in b]
    assert sum(x.prompt_tokens != y.prompt_tokens for x, y in zip(a, b, strict=True)) > len(a) // 4


def test_schedule_surge_changes_the_rate() -> None:
    spec = WorkloadSpec(rate_qps=10, duration_s=200, schedule=((100.0, 2.0, None),), seed=6)
    reqs = generate(spec)
    before = sum(r.arrival_s < 100 for r in reqs)
    after = sum(r.arrival_s >= 100 for r in reqs)
    assert abs(before - 1000) < 150 and abs(after - 2000) < 200


def test_schedule_pause_and_recovery() -> None:
    spec = WorkloadSpec(rate_qps=10, duration_s=90, schedule=((30.0, 0.0, None), (60.0, 1.0, None)))
    reqs = generate(spec)
    assert not any(30 <= r.arrival_s < 60 for r in reqs)
    assert any(r.arrival_s >= 60 for r in reqs) and any(r.arrival_s < 30 for r in reqs)


def test_schedule_long_storm() -> None:
    spec = WorkloadSpec(rate_qps=40, duration_s=100, long_share=0.02, schedule=((50.0, 1.0, 0.5),), seed=7)
    reqs = generate(spec)
    early = [r for r in reqs if r.arrival_s < 50]
    late = [r for r in reqs if r.arrival_s >= 50]
    share = lambda rs: sum(r.prompt_tokens >= 4096 for r in rs) / len(rs)  # noqa: E731
    assert share(early) < 0.05 and 0.44 < share(late) < 0.56


def test_presets_build() -> None:
    for name in WORKLOAD_PRESETS:
        assert generate(workload_preset(name, rate_qps=2, duration_s=20))
    with pytest.raises(ValueError, match="unknown workload preset"):
        workload_preset("nope")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rate_qps": 0}, "rate_qps"),
        ({"duration_s": None}, "duration_s or num_requests"),
        ({"arrival": "uniform"}, "arrival"),
        ({"burstiness": 0}, "burstiness"),
        ({"long_share": 1.5}, "long_share"),
        ({"long_min": 9000}, "long_max"),
        ({"schedule": ((10.0, 2.0, None), (5.0, 1.0, None))}, "non-decreasing"),
        ({"schedule": ((10.0, -1.0, None),)}, "multiplier"),
    ],
)
def test_bad_specs_are_rejected(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadSpec(**fields)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(0.1, 50),
    duration=st.floats(0.5, 30),
    arrival=st.sampled_from(["poisson", "gamma"]),
    burstiness=st.floats(0.05, 10),
    sigma=st.floats(0, 3),
    long_share=st.floats(0, 1),
    prefix_share=st.floats(0, 1),
    step=st.one_of(st.none(), st.tuples(st.floats(0, 30), st.floats(0, 5), st.none() | st.floats(0, 1))),
    seed=st.integers(0, 2**32),
)
def test_generate_properties(
    rate: float,
    duration: float,
    arrival: str,
    burstiness: float,
    sigma: float,
    long_share: float,
    prefix_share: float,
    step: tuple[float, float, float | None] | None,
    seed: int,
) -> None:
    spec = WorkloadSpec(
        rate_qps=rate,
        duration_s=duration,
        arrival=arrival,
        burstiness=burstiness,
        prompt_sigma=sigma,
        output_sigma=sigma,
        long_share=long_share,
        prefix_share=prefix_share,
        schedule=(step,) if step else (),
        seed=seed,
    )
    reqs = generate(spec)
    arrivals = [r.arrival_s for r in reqs]
    assert arrivals == sorted(arrivals)
    assert all(0 <= t < duration for t in arrivals)
    for r in reqs:
        assert 1 <= r.prompt_tokens <= max(spec.prompt_cap, spec.long_max)
        assert 1 <= r.output_tokens <= spec.output_cap
        assert r.long == (r.prompt_tokens >= spec.long_threshold)
        assert 0 <= r.prefix_tokens <= r.prompt_tokens
        assert (r.prefix_group is None) == (r.prefix_tokens == 0)


# --- prompts ----------------------------------------------------------------------------------


def _req(index: int, prompt: int, group: int | None = None, prefix: int = 0) -> RequestSpec:
    return RequestSpec(index, 0.0, prompt, 10, False, group, prefix)


def test_prefix_groups_share_token_ids() -> None:
    a, b, c = _req(0, 300, 1, 128), _req(1, 200, 1, 128), _req(2, 300, 2, 128)
    ids_a, ids_b, ids_c = (prompt_token_ids(r, seed=9) for r in (a, b, c))
    assert (len(ids_a), len(ids_b), len(ids_c)) == (300, 200, 300)
    assert ids_a[:128] == ids_b[:128]
    assert ids_a[128:160] != ids_b[128:160]
    assert ids_a[:16] != ids_c[:16]
    assert prompt_token_ids(a, seed=9) == ids_a
    assert prompt_token_ids(a, seed=10) != ids_a
    assert all(100 <= t < 32000 for t in ids_a)
    plain = [prompt_token_ids(_req(i, 64), seed=9) for i in range(3)]
    assert plain[0][:16] != plain[1][:16] != plain[2][:16]


def test_prompt_text_counts_exactly_and_shares_templates() -> None:
    piece = re.compile(r"\w+|[^\w\s]")  # one token per word or punctuation mark
    a, b = _req(0, 500, 3, 200), _req(1, 250, 3, 200)
    ta, tb = prompt_text(a, 1), prompt_text(b, 1)
    assert len(piece.findall(ta)) == 500 and len(piece.findall(tb)) == 250
    assert ta.split()[:200] == tb.split()[:200]
    assert ta.split()[200:210] != tb.split()[200:210]
    assert prompt_text(a, 1) == ta and prompt_text(a, 2) != ta


@settings(max_examples=50, deadline=None)
@given(prompt=st.integers(1, 3000), prefix=st.integers(0, 3000), index=st.integers(0, 10**6))
def test_prompt_lengths_are_exact(prompt: int, prefix: int, index: int) -> None:
    spec = _req(index, prompt, 0 if prefix else None, prefix)
    assert len(prompt_token_ids(spec, seed=0)) == prompt
    assert len(re.findall(r"\w+|[^\w\s]", prompt_text(spec, 0))) == prompt


# --- traces -----------------------------------------------------------------------------------


def test_azure_csv(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,6000,0\n"
        "2023-11-16 18:15:47.1805900,1020,129\n"
    )
    reqs = load_trace(path)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(374, 44), (1020, 129), (6000, 1)]
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 0.5, 4.314579])
    assert [r.long for r in reqs] == [False, False, True]
    assert [r.index for r in reqs] == [0, 1, 2]
    half = load_trace(path, time_scale=0.5)
    assert half[1].arrival_s == pytest.approx(0.25)


def test_burstgpt_csv_skips_failures(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,API log\n"
    )
    reqs = load_trace(path)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [(0, 472, 18), (113, 417, 276)]


def test_generic_csv_with_prefix_columns(tmp_path: Path) -> None:
    path = tmp_path / "generic.csv"
    path.write_text(
        "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens,priority\n"
        "0.0,100,10,1,64,0\n0.5,200,20,,,2\n"
    )
    a, b = load_trace(path)
    assert (a.prefix_group, a.prefix_tokens) == (1, 64)
    assert (b.prefix_group, b.prefix_tokens, b.priority) == (None, 0, 2)


def test_mooncake_jsonl_and_prefixes(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 2000, "output_length": 10, "hash_ids": [1, 2, 3, 4]},
        {"timestamp": 1500, "input_length": 1500, "output_length": 20, "hash_ids": [1, 2, 9]},
        {"timestamp": 2500, "input_length": 600, "output_length": 30, "hash_ids": [7, 8]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    reqs = load_trace(path)
    assert [r.arrival_s for r in reqs] == [0.0, 1.5, 2.5]
    assert [r.output_tokens for r in reqs] == [10, 20, 30]
    assert reqs[0].prefix_group == reqs[1].prefix_group is not None
    assert reqs[0].prefix_tokens == reqs[1].prefix_tokens == 1024
    assert reqs[2].prefix_group is None


def test_generic_jsonl_gzipped(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write('{"arrival_s": 1.0, "prompt_tokens": 10, "output_tokens": 5}\n')
        fh.write('{"arrival_s": 3.0, "prompt_tokens": 7000, "output_tokens": 2}\n')
    reqs = load_trace(path, long_threshold=6000)
    assert [(r.arrival_s, r.long) for r in reqs] == [(0.0, False), (2.0, True)]


@pytest.mark.parametrize(
    ("name", "text", "line", "what"),
    [
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,abc,5\n", 3, "not a number"),
        ("b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n\n1,10\n", 4, "columns"),
        ("c.csv", "foo,bar\n1,2\n", 1, "unrecognized CSV header"),
        ("d.csv", "arrival_s,prompt_tokens,output_tokens\n0,-3,5\n", 2, "negative"),
        ("e.csv", "arrival_s,prompt_tokens,output_tokens\n0,2.5,5\n", 2, "whole number"),
        ("f.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", 2, "date-time"),
        ("g.jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n{oops\n', 2, "invalid JSON"),
        ("h.jsonl", '{"timestamp": 0, "input_length": 5}\n', 1, "output_length"),
        ("i.jsonl", "[1, 2]\n", 1, "JSON object"),
    ],
)
def test_trace_errors_name_file_and_line(tmp_path: Path, name: str, text: str, line: int, what: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError, match=what) as info:
        load_trace(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_trace_errors_for_missing_empty_and_binary(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "missing.csv")
    (tmp_path / "empty.csv").write_text("\n\n")
    with pytest.raises(TraceError, match="empty"):
        load_trace(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("arrival_s,prompt_tokens,output_tokens\n")
    with pytest.raises(TraceError, match="no requests"):
        load_trace(tmp_path / "header.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "bin.csv")
