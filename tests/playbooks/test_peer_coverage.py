"""Every check of the peer `vllm-doctor` has a playbook here that fires on what the peer would flag.

docs/peer-coverage.md is the table; each case below is one row: a Signals fixture the peer flags, the
playbook id it maps to, and what that playbook must report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from collectors.types import Signals
from playbooks import registry
from playbooks.base import EngineView, Playbook

DOC = Path(__file__).resolve().parents[2] / "docs" / "peer-coverage.md"


class History:
    def __init__(self, **baselines: float) -> None:
        self.baselines = baselines

    def series(self, signal: str, since_s: float) -> list[tuple[float, float]]:
        return []

    def baseline(self, signal: str, window_s: float, exclude_recent_s: float) -> float | None:
        return self.baselines.get(signal)


def view(pb: Playbook, values: Mapping[str, float | None], **kw: Any) -> EngineView:
    signals = Signals(engine="hot", window_s=60.0, health="ok", values=dict(values))
    return EngineView(name="hot", role="hot", signals=signals, params=dict(pb.defaults), now=10_000.0, **kw)


# (peer check, playbook id, the peer-flagged fixture, extra EngineView fields)
CASES: list[tuple[str, str, dict[str, float | None], dict[str, Any]]] = [
    ("waiting > 5", "queue_pressure", {"waiting": 8.0, "running": 60.0}, {}),
    ("queue P95 >= 1 s", "queue_pressure", {"p95_queue_s": 1.5, "waiting": 1.0}, {}),
    ("KV >= 0.9", "kv_pressure", {"kv_cache_usage": 0.92, "waiting": 3.0}, {}),
    ("preemptions", "kv_pressure", {"preemptions_per_s": 0.5, "kv_cache_usage": 0.85}, {}),
    ("low throughput", "throughput_drop",
     {"prompt_tokens_per_s": 5.0, "generation_tokens_per_s": 30.0, "running": 1.0, "waiting": 0.0, "qps": 2.0},
     {"history": History(generation_tokens_per_s=1000.0, qps=2.0)}),
    ("error rate >= 5%", "error_rate", {"error_rate": 0.08, "abort_rate": 0.0, "qps": 5.0}, {}),
    ("abort rate >= 10%", "error_rate", {"error_rate": 0.0, "abort_rate": 0.2, "qps": 5.0}, {}),
    ("TTFT P95 >= 2 s", "p99_spike", {"p95_ttft_s": 2.5, "p99_ttft_s": 3.0},
     {"slo": {"p95_ttft_s": 2.0}}),
    ("TPOT P95 >= 0.2 s", "p99_spike", {"p95_itl_s": 0.25, "p99_itl_s": 0.3},
     {"slo": {"p95_tpot_s": 0.2}}),
    ("prefix hit < 0.5", "prefix_cache_miss", {"prefix_cache_hit_rate": 0.4}, {"templates_configured": True}),
]


@pytest.mark.parametrize(("check", "playbook_id", "values", "extra"), CASES, ids=[c[0] for c in CASES])
def test_peer_flagged_fixture_fires(check: str, playbook_id: str, values: dict[str, float | None],
                                    extra: dict[str, Any]) -> None:
    pb = registry.get(playbook_id)
    cond = pb.check(view(pb, values, **extra))
    assert cond is not None, f"{playbook_id} does not fire on the peer's '{check}' fixture"
    assert cond.evidence, "a finding carries its evidence"
    assert pb.remedies(view(pb, values, **extra), cond), "and at least one remedy"


def test_latency_over_slo_is_critical() -> None:
    pb = registry.get("p99_spike")
    cond = pb.check(view(pb, {"p95_ttft_s": 2.5, "p99_ttft_s": 3.0}, slo={"p95_ttft_s": 2.0}))
    assert cond is not None and cond.severity == "critical"


def test_ttft_without_slo_needs_a_baseline() -> None:
    pb = registry.get("p99_spike")
    values = {"p95_ttft_s": 2.5, "p99_ttft_s": 3.0, "qps": 1.0}
    assert pb.check(view(pb, values, history=History(p99_ttft_s=1.0))) is not None
    assert pb.check(view(pb, values)) is None  # an absolute number without an SLO or a baseline says nothing


def test_replica_imbalance() -> None:
    pb = registry.get("replica_imbalance")
    a = view(pb, {"running": 10.0})
    b = dataclasses.replace(a, name="b", signals=dataclasses.replace(a.signals, engine="b",
                                                                      values={"running": 4.0}))
    a.peers, b.peers = [b], [a]
    assert pb.check(a) is not None and pb.check(b) is not None


# Where we deliberately do not follow the peer (docs/peer-coverage.md explains each).

def test_idle_engine_without_a_baseline_is_not_a_finding() -> None:
    pb = registry.get("throughput_drop")
    idle = {"prompt_tokens_per_s": 5.0, "generation_tokens_per_s": 30.0, "running": 1.0, "waiting": 0.0}
    assert pb.check(view(pb, idle)) is None


def test_low_prefix_hit_rate_without_templates_is_not_a_finding() -> None:
    values = {"prefix_cache_hit_rate": 0.4}
    for playbook_id in ("prefix_cache_miss", "p99_spike"):
        pb = registry.get(playbook_id)
        assert pb.check(view(pb, values)) is None


def test_prefix_thresholds_one_per_purpose() -> None:
    miss, spike = registry.get("prefix_cache_miss"), registry.get("p99_spike")
    assert miss.defaults["prefix_hit_ratio"] == 0.7
    assert spike.defaults["prefix_hit_rate_ratio"] == 0.6
    other = [pb.id for pb in registry.all_playbooks() if pb.id not in ("prefix_cache_miss", "p99_spike")
             and any("prefix" in k for k in pb.defaults)]
    assert other == [], f"a third prefix hit-rate threshold would contradict these: {other}"


def test_kv_high_alone_is_a_cache_doing_its_job() -> None:
    pb = registry.get("kv_pressure")
    assert pb.check(view(pb, {"kv_cache_usage": 0.92, "waiting": 0.0, "preemptions_per_s": 0.0})) is None


def test_doc_names_every_peer_check_and_playbook() -> None:
    text = DOC.read_text()
    for name in ("waiting", "P95 queue", "kv_cache_usage_perc >= 0.9", "Preemptions", "Low throughput",
                 "Error rate", "P95 TTFT", "P95 TPOT", "< 0.5", "Replica imbalance", "gpu_cache_usage_perc",
                 "length"):
        assert name in text, name
    for playbook_id in {c[1] for c in CASES} | {"replica_imbalance"}:
        assert f"`{playbook_id}`" in text
        registry.get(playbook_id)  # a registered id
