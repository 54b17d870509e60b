"""The engine model in virtual time: scheduling, KV, preemption, prefix caching, faults, determinism."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.engine import EngineStartError
from sim.harness import Harness, length_router
from sim.kvcache import KVCache
from sim.request import SimRequest, SyntheticPrompt
from sim.testing import ALL_GRAPHED
from sim.workload import RequestSpec, WorkloadSpec, generate


def _spec(i: int, prompt: int, output: int, at: float = 0.0, group: int | None = None,
          prefix: int = 0) -> RequestSpec:
    return RequestSpec(index=i, arrival_s=at, prompt_tokens=prompt, output_tokens=output, long=prompt >= 5120,
                       prefix_group=group, prefix_tokens=prefix)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    found = False
    for (n, lab), v in _samples(text).items():
        if n == name and all(dict(lab).get(k) == val for k, val in labels.items()):
            total += v
            found = True
    assert found, f"{name} not in scrape"
    return total


def test_requests_complete_with_exact_token_counts() -> None:
    h = Harness()
    h.add_engine("e", ["m", "--max-num-seqs", "4"])
    recs = h.load([_spec(i, 100 + i, 20 + i, at=0.01 * i) for i in range(10)])
    h.drain()
    assert all(r.finish_reason == "length" for r in recs)
    assert [r.tokens for r in recs] == [20 + i for i in range(10)]
    text = h.metrics_text("e")
    assert _value(text, "vllm:generation_tokens_total") == sum(20 + i for i in range(10))
    assert _value(text, "vllm:prompt_tokens_total") == sum(100 + i for i in range(10))
    assert _value(text, "vllm:request_success_total", finished_reason="length") == 10
    assert _value(text, "vllm:e2e_request_latency_seconds_count") == 10
    # ITL observations: every token after the first of each request.
    assert _value(text, "vllm:inter_token_latency_seconds_count") == sum(19 + i for i in range(10))


def test_max_num_seqs_caps_running_and_queue_builds() -> None:
    h = Harness()
    engine = h.add_engine("e", ["m", "--max-num-seqs", "4", *ALL_GRAPHED])
    h.load([_spec(i, 200, 200) for i in range(12)])
    h.run_for(0.5)
    assert engine.core.metrics.running == 4
    assert engine.core.metrics.waiting == 8
    h.drain()
    assert engine.core.metrics.running == 0 and engine.core.metrics.waiting == 0


def test_chunked_prefill_splits_long_prompt_across_steps() -> None:
    h = Harness()
    engine = h.add_engine("e", ["m", "--max-num-batched-tokens", "512", "--max-num-seqs", "8"])
    h.load([_spec(0, 4096, 2)])
    h.drain()
    iters = engine.core.metrics.iteration_tokens
    # 4096 prompt tokens in 512-token chunks: 8 prefill steps, then one decode step.
    assert iters.count == 9
    assert iters.sum == 4096 + 1


def test_long_prompt_slows_concurrent_decodes() -> None:
    def mean_itl(with_long: bool) -> float:
        h = Harness()
        h.add_engine("e", ["m", "--max-num-seqs", "16", "--max-num-batched-tokens", "2048", *ALL_GRAPHED])
        specs = [_spec(i, 300, 200) for i in range(8)]
        if with_long:
            specs.append(_spec(99, 4096, 5, at=1.0))
        recs = h.load(specs)
        h.drain()
        gaps = [b - a for r in recs[:8] for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
        return sum(gaps) / len(gaps)

    assert mean_itl(True) > mean_itl(False) * 1.05


def test_kv_pressure_preempts_newest_and_recomputes() -> None:
    h = Harness()
    engine = h.add_engine("e", ["m", "--max-num-seqs", "16", "--num-gpu-blocks-override", "2100",
                                "--max-model-len", "8192", *ALL_GRAPHED])
    recs = h.load([_spec(i, 1500, 800, at=0.001 * i) for i in range(16)])
    h.run_for(5)
    assert engine.core.metrics.kv_usage > 0.7
    h.drain()
    m = engine.core.metrics
    assert m.preemptions > 0
    assert all(r.finish_reason == "length" and r.tokens == 800 for r in recs)
    # Recompute: more prompt work was scheduled than the prompts hold.
    assert m.iteration_tokens.sum > 16 * (1500 + 800)


def test_prefix_cache_hits_shared_templates() -> None:
    h = Harness()
    h.add_engine("e", ["m", "--max-num-seqs", "8"])
    h.load([_spec(i, 600, 5, at=0.5 * i, group=1, prefix=512) for i in range(6)])
    h.drain()
    text = h.metrics_text("e")
    queries = _value(text, "vllm:prefix_cache_queries_total")
    hits = _value(text, "vllm:prefix_cache_hits_total")
    assert queries == 6 * 600
    assert hits == 5 * 512  # every request after the first hits the 32 template blocks


def test_prefix_caching_off_means_no_hits() -> None:
    h = Harness()
    h.add_engine("e", ["m", "--no-enable-prefix-caching"])
    h.load([_spec(i, 600, 5, at=0.5 * i, group=1, prefix=512) for i in range(4)])
    h.drain()
    assert _value(h.metrics_text("e"), "vllm:prefix_cache_hits_total") == 0


def test_kvcache_usage_counts_evictable_blocks_as_free() -> None:
    kv = KVCache(10, 16)
    req = SimRequest("r", SyntheticPrompt(64, unique_key=1), max_tokens=1, target_output=1, arrival_time=0)
    assert kv.allocate(req, 64)
    kv.commit_full_blocks(req, 64)
    assert kv.usage() == pytest.approx(0.4)
    kv.free(req)
    assert kv.usage() == 0.0 and len(kv.evictable) == 4
    assert not kv.allocate(req, 16 * 11)


def test_same_seed_same_numbers_and_different_seed_differs() -> None:
    def run(seed: int) -> tuple[str, list[float | None], list[str]]:
        h = Harness(seed=seed)
        h.add_engine("hot", ["m", "--max-num-seqs", "16", "--seed", str(seed)])
        h.add_engine("cold", ["m", "--max-num-seqs", "2"], env={"CUDA_VISIBLE_DEVICES": "1"})
        specs = generate(WorkloadSpec(rate_qps=6, duration_s=60, long_share=0.05, seed=seed))
        h.load(specs, router=length_router(), ignore_eos=False)
        h.run_until(h.start + 90)
        return h.metrics_text("hot") + h.metrics_text("cold"), [r.e2e for r in h.records], h.log_lines("hot")

    a, b, c = run(7), run(7), run(8)
    assert a == b
    assert a[0] != c[0]


def test_two_engines_on_one_gpu_fail_with_vllm_oom_error() -> None:
    h = Harness()
    h.add_engine("a", ["m", "--gpu-memory-utilization", "0.6", "--max-model-len", "4096"])
    with pytest.raises(EngineStartError) as err:
        h.add_engine("b", ["m", "--gpu-memory-utilization", "0.6", "--max-model-len", "4096"])
    assert "Free memory on device" in str(err.value)
    assert "is less than desired GPU memory utilization (0.6" in str(err.value)
    assert any("Free memory on device" in line for line in err.value.lines)
    h.add_engine("c", ["m", "--gpu-memory-utilization", "0.39", "--max-model-len", "2048"])  # fits beside a


def test_fragmentation_grows_and_sleep_wake_clears_it() -> None:
    h = Harness()
    engine = h.add_engine("e", ["m", "--enable-sleep-mode", "--fault", "fragmentation:0.6",
                                "--gpu-memory-utilization", "0.6", "--max-model-len", "8192"])
    core = engine.core
    h.run_for(1800)
    growth = core.memory_growth_ratio(h.now)
    assert growth == pytest.approx(0.3, rel=0.01)
    fb_before = core.gpu_readings(h.now)[0].used_bytes
    assert fb_before == pytest.approx(core.footprint_bytes * 1.3, rel=0.01)
    freed = engine.runtime.sleep(1, h.now)
    assert freed > 0
    engine.runtime.wake_up(h.now)
    assert core.memory_growth_ratio(h.now) == 0.0
    assert core.gpu_readings(h.now)[0].used_bytes == pytest.approx(core.footprint_bytes, rel=0.01)


def test_sleep_without_sleep_mode_frees_nothing() -> None:
    h = Harness()
    engine = h.add_engine("e", ["m", "--fault", "fragmentation:0.6", "--gpu-memory-utilization", "0.6",
                                "--max-model-len", "8192"])
    h.run_for(600)
    assert engine.runtime.sleep(1, h.now) == 0.0
    engine.runtime.wake_up(h.now)
    assert engine.core.memory_growth_ratio(h.now) > 0


def test_engine_death_fails_inflight_and_health() -> None:
    h = Harness()
    h.add_engine("e", ["m", "--vllm-version", "0.11", "--fault", "engine-death@2"])
    recs = h.load([_spec(i, 300, 2000, at=0.1 * i) for i in range(5)])
    h.run_for(5)
    assert h.health("e") == 503
    assert all(r.error and r.finish_reason == "error" for r in recs)
    assert any("EngineDeadError" in line for line in h.log_lines("e"))
    h2 = Harness()
    h2.add_engine("e", ["m", "--vllm-version", "0.10", "--fault", "engine-death@1"])
    h2.run_for(2)
    assert h2.health("e") == 500


def test_hang_keeps_health_but_stops_progress() -> None:
    h = Harness()
    engine = h.add_engine("e", ["m", "--fault", "hang@3", *ALL_GRAPHED])
    h.load([_spec(i, 300, 10_000, at=0.1 * i) for i in range(4)])
    h.run_for(4)
    before = engine.core.metrics.generation_tokens
    h.load([_spec(10 + i, 300, 50, at=5 + i) for i in range(3)])
    h.run_for(30)
    assert h.health("e") == 200
    assert engine.core.metrics.generation_tokens == before
    assert engine.core.metrics.waiting == 3


def test_fatal_xid_kills_engine_and_shows_in_dcgm() -> None:
    h = Harness()
    h.add_engine("e", ["m", "--fault", "xid@2:79"])
    h.run_for(3)
    assert h.health("e") != 200
    assert re.search(r'DCGM_FI_DEV_XID_ERRORS\{gpu="0".*\} 79', h.gpu_text("e"))


def test_stats_log_line_every_interval_and_idle_suppressed() -> None:
    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED])
    h.load([_spec(i, 300, 100, at=0.2 * i) for i in range(20)])
    h.run_for(120)
    stats = [line for line in h.log_lines("e") if "Avg prompt throughput" in line]
    # Busy for a few intervals, then idle: one zero line is shown, further idle ones are suppressed.
    assert 2 <= len(stats) <= 5
    assert "Running: 0 reqs" in stats[-1]


def test_gpu_metrics_follow_load() -> None:
    h = Harness()
    h.add_engine("e", ["m", "--max-num-seqs", "16", *ALL_GRAPHED])
    h.load([_spec(i, 300, 400, at=0.01 * i) for i in range(16)])
    h.run_for(3)
    busy = _value(h.gpu_text("e"), "DCGM_FI_PROF_DRAM_ACTIVE")
    h.drain()
    h.run_for(5)
    idle = _value(h.gpu_text("e"), "DCGM_FI_PROF_DRAM_ACTIVE")
    assert busy > 0.3 and idle == 0.0


def test_log_stats_interval_env_like_vllm() -> None:
    h = Harness()
    h.add_engine("e", ["m", *ALL_GRAPHED], env={"VLLM_LOG_STATS_INTERVAL": "2"})
    h.load([_spec(i, 300, 400, at=0.1 * i) for i in range(8)])
    h.run_for(9)
    stats = [line for line in h.log_lines("e") if "Avg prompt throughput" in line]
    assert len(stats) == 4  # every 2 s instead of 10
