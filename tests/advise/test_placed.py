"""The window's finished requests put back from the engine's histograms (doctor.advise.lengths, placed) against
the requests the sim engine really finished: their lengths and their arrivals."""

from __future__ import annotations

import random
from dataclasses import replace

from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot
from collectors.window import window_view
from doctor.advise.lengths import finished_between
from doctor.advise.placed import place
from doctor.advise.workload import draw, profile_of
from sim.harness import Harness
from sim.workload import WorkloadSpec, generate

START, LENGTH = 30.0, 240.0


def _run() -> tuple[list[MetricsSnapshot], Harness]:
    h = Harness(seed=1)
    h.add_engine("e", ["m", "--preset", "a100-13b", "--max-num-seqs", "16"])
    h.load(generate(WorkloadSpec(rate_qps=3.0, duration_s=300, seed=3, prompt_median=600, long_share=0.1)))
    h.run_for(START)
    chain: list[MetricsSnapshot] = []
    for _ in range(int(LENGTH / 5) + 1):
        chain.append(parse_metrics(h.metrics_text("e"), h.now))
        h.run_for(5.0)
    return chain, h


def _gap(a: list[float], b: list[float]) -> float:
    """Mean absolute difference of the two sorted lists (same length)."""
    return sum(abs(x - y) for x, y in zip(sorted(a), sorted(b), strict=True)) / len(a)


def test_placed_requests_are_the_finished_ones() -> None:
    chain, h = _run()
    t0 = chain[0].timestamp
    done = [r for r in h.records if r.finished is not None and t0 < r.finished <= chain[-1].timestamp]
    got = finished_between(chain)
    assert got is not None
    placed = place(got, start=0.0, rng=random.Random(1), top=32768)
    assert len(placed) == len(done)
    true_prompts = [float(r.spec.prompt_tokens) for r in done]
    true_outputs = [float(r.spec.output_tokens) for r in done]
    for true, mine in ((true_prompts, [float(p.prompt_tokens) for p in placed]),
                       (true_outputs, [float(p.output_tokens) for p in placed])):
        assert abs(sum(mine) / sum(true) - 1.0) < 0.01  # each interval's sum is exact
        assert _gap(true, mine) < 0.15 * sum(true) / len(true)  # and each length stays inside its bucket
    true_arrivals = [r.sent - t0 for r in done]
    # placed at finish minus e2e (both within their read interval and e2e bucket): a few seconds off at most
    assert _gap(true_arrivals, [p.arrival_s for p in placed]) < 3.0
    # draw() replays them after synthetic warm-up traffic that stops where the first placed request arrives
    profile = profile_of("e", None, window_view(chain), chain, EngineConfigView())
    assert profile.finished is not None and profile.in_flight_end >= 0
    replayed = draw(profile, duration_s=60.0 + LENGTH, seed=2, replay_from=60.0)
    assert len([r for r in replayed if r.arrival_s >= 60.0 - 40.0]) >= len(done)
    assert sorted(r.arrival_s for r in replayed) == [r.arrival_s for r in replayed]


def test_a_read_without_histograms_falls_back_to_the_window_distributions() -> None:
    chain, _ = _run()
    broken = [*chain[:5], replace(chain[5], histograms={}), *chain[6:]]
    assert finished_between(broken) is None
    profile = profile_of("e", None, window_view(chain), broken, EngineConfigView())
    assert profile.finished is None and profile.intervals  # draw() replays the arrivals per read interval
