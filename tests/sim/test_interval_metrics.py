"""Request interval histograms under preemption, as vLLM's RequestStateStats computes them."""

from __future__ import annotations

import pytest

from sim.harness import Harness
from sim.workload import RequestSpec

KV_STARVED = ["m", "--max-num-seqs", "16", "--num-gpu-blocks-override", "2100", "--max-model-len", "8192",
              "--enforce-eager"]


def _specs() -> list[RequestSpec]:
    return [RequestSpec(index=i, arrival_s=0.001 * i, prompt_tokens=1500, output_tokens=800, long=False)
            for i in range(16)]


@pytest.mark.parametrize("version", ["0.33", "0.10", "0.6"])
def test_prefill_plus_decode_is_inference_under_preemption(version: str) -> None:
    h = Harness()
    engine = h.add_engine("e", [*KV_STARVED, "--vllm-version", version])
    h.load(_specs())
    h.drain()
    m = engine.core.metrics
    assert m.preemptions > 0
    assert m.inference.count == 16
    # Prefill spans first SCHEDULED to first token and decode first to last token, so they tile the
    # inference interval (first SCHEDULED to last token) even when a request was preempted.
    assert m.prefill.sum + m.decode.sum == pytest.approx(m.inference.sum, abs=1e-4)


def test_queue_and_prefill_end_at_first_token_under_preemption() -> None:
    h = Harness()
    engine = h.add_engine("e", KV_STARVED)
    specs = _specs()
    recs = h.load(specs)
    h.drain()
    core = engine.core
    assert core.metrics.preemptions > 0
    frontend = sum(core.frontend_delay(s.prompt_tokens) for s in specs)
    ttft = sum(r.first_token - r.sent for r in recs if r.first_token is not None)
    # V1: QUEUED at the engine core, first SCHEDULED, first token: queue + prefill = TTFT - frontend time.
    m = core.metrics
    assert m.queue.sum + m.prefill.sum == pytest.approx(ttft - frontend, abs=1e-4)
    assert m.queue.sum + m.inference.sum == pytest.approx(m.e2e.sum - frontend, abs=1e-4)


def test_v0_queue_starts_at_arrival() -> None:
    h = Harness()
    engine = h.add_engine("e", [*KV_STARVED, "--vllm-version", "0.6"])
    recs = h.load(_specs())
    h.drain()
    m = engine.core.metrics
    ttft = sum(r.first_token - r.sent for r in recs if r.first_token is not None)
    # vllm/engine/llm_engine.py: queue = first_scheduled_time - arrival_time, prefill = first token - that.
    assert m.queue.sum + m.prefill.sum == pytest.approx(ttft, abs=1e-4)
