"""The workload as the engine's histograms and counters tell it, against what the sim engine was sent."""

from __future__ import annotations

from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot
from collectors.window import window_view
from doctor.advise.search import seed_batch
from doctor.advise.workload import WorkloadProfile, draw, profile_of
from sim.harness import Harness
from sim.workload import WorkloadSpec, generate


def _window(spec: WorkloadSpec, start: float = 30.0, length: float = 240.0) -> tuple[WorkloadProfile, Harness]:
    h = Harness(seed=1)
    h.add_engine("e", ["m", "--preset", "h100-8b"])
    h.load(generate(spec))
    h.run_for(start)
    chain: list[MetricsSnapshot] = []
    for _ in range(int(length / 5) + 1):
        chain.append(parse_metrics(h.metrics_text("e"), h.now))
        h.run_for(5.0)
    return profile_of("e", "hot", window_view(chain), chain, EngineConfigView()), h


def test_rule_inputs_and_rate_match_what_was_sent() -> None:
    spec = WorkloadSpec(rate_qps=3.0, duration_s=300, seed=2, prompt_median=900, long_share=0.1,
                        long_min=6000, long_max=12000)
    p, h = _window(spec)
    sent = [r.spec for r in h.records if 30.0 <= r.sent - h.start < 270.0]
    assert abs(p.rate_qps - len(sent) / 240.0) / (len(sent) / 240.0) < 0.05
    done = [r.spec for r in h.records if r.finished is not None and 30.0 < r.finished - h.start <= 270.0]
    true_avg = sum(s.prompt_tokens for s in done) / len(done)
    assert abs(p.avg_prompt - true_avg) / true_avg < 0.02  # from the histogram's sum: exact up to the window edges
    over_8k = sum(s.prompt_tokens > 8192 for s in done) / len(done)
    assert abs(p.share_over_8k - over_8k) < 0.03  # interpolated inside the (5000, 10000] bucket
    assert p.burstiness == 1.0, p.burstiness_note  # Poisson is what was sent
    assert true_avg > 2048 and seed_batch(p)[0] == 2  # the seed: batch 2 above 2048, long texts isolated


def test_bursty_arrivals_are_seen_and_draws_keep_the_buckets() -> None:
    p, _ = _window(WorkloadSpec(rate_qps=2.0, duration_s=300, seed=4, arrival="gamma", burstiness=0.1))
    assert p.burstiness is not None and p.burstiness < 0.5, p.burstiness_note
    drawn = draw(p, duration_s=600, seed=1)
    lengths = [r.prompt_tokens for r in drawn]
    lower = 0.0
    for bound, count in zip(p.prompt.bounds, p.prompt.counts, strict=True):
        share = sum(lower < x <= bound for x in lengths) / len(lengths)
        assert abs(share - count / p.prompt.total) < 0.06, (bound, share, count / p.prompt.total)
        lower = bound
    mean = sum(lengths) / len(lengths)
    assert abs(mean - p.avg_prompt) / p.avg_prompt < 0.15
