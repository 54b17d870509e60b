"""kv_pressure: the remedies, more KV first when the engine's GPUs have memory to spare."""

from __future__ import annotations

from collectors.types import EngineConfigView, Signals
from playbooks.base import EngineView
from playbooks.kv_pressure import PLAYBOOK

PRESSURE = {"kv_cache_usage": 0.97, "preemptions_per_s": 0.5, "waiting": 30.0, "running": 12.0}


def view(values: dict[str, float | None], config: EngineConfigView) -> EngineView:
    sig = Signals(engine="hot", window_s=30.0, health="ok", health_status=200, values=values)
    return EngineView(name="hot", role="hot", signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0,
                      config=config)


def remedies(values: dict[str, float | None], config: EngineConfigView) -> list[tuple[str, dict[str, object]]]:
    v = view(values, config)
    cond = PLAYBOOK.check(v)
    assert cond is not None
    return [(a.kind, a.params) for a in PLAYBOOK.remedies(v, cond)]


def test_a_cut_kv_budget_on_an_otherwise_empty_gpu_is_raised_first() -> None:
    # the kv_pressure scenario: --gpu-memory-utilization 0.45, nothing else on the GPU
    config = EngineConfigView(max_num_seqs=16, gpu_memory_utilization=0.45)
    got = remedies({**PRESSURE, "fb_used_ratio": 0.46}, config)
    assert got[0] == ("relaunch", {"gpu_memory_utilization": 0.9})
    assert got[1] == ("relaunch", {"max_num_seqs": 12})
    v = view({**PRESSURE, "fb_used_ratio": 0.46}, config)
    first = PLAYBOOK.remedies(v, PLAYBOOK.check(v))[0]  # type: ignore[arg-type]
    assert first.inverse == {"gpu_memory_utilization": 0.45} and "45% of its GPU memory" in first.description
    assert "54% is free" in first.description


def test_the_raise_keeps_a_margin_of_what_is_free_now() -> None:
    # another process holds 30% of the GPU: 0.45 reserved + 25% free -> up to 0.65
    config = EngineConfigView(max_num_seqs=16, gpu_memory_utilization=0.45)
    assert remedies({**PRESSURE, "fb_used_ratio": 0.75}, config)[0] == ("relaunch", {"gpu_memory_utilization": 0.65})


def test_no_raise_without_room_or_without_knowing() -> None:
    full = EngineConfigView(max_num_seqs=16, gpu_memory_utilization=0.9)
    assert remedies({**PRESSURE, "fb_used_ratio": 0.92}, full)[0] == ("relaunch", {"max_num_seqs": 12})
    shared = EngineConfigView(max_num_seqs=16, gpu_memory_utilization=0.45)
    assert remedies({**PRESSURE, "fb_used_ratio": 0.97}, shared)[0] == ("relaunch", {"max_num_seqs": 12})
    unknown_gpu = EngineConfigView(max_num_seqs=16, gpu_memory_utilization=0.45)
    assert remedies(PRESSURE, unknown_gpu)[0] == ("relaunch", {"max_num_seqs": 12})
    unknown_reserve = EngineConfigView(max_num_seqs=16)
    assert remedies({**PRESSURE, "fb_used_ratio": 0.46}, unknown_reserve)[0] == ("relaunch", {"max_num_seqs": 12})
    # a raise under 5 points is not worth a relaunch
    near = EngineConfigView(max_num_seqs=16, gpu_memory_utilization=0.86)
    assert remedies({**PRESSURE, "fb_used_ratio": 0.87}, near)[0] == ("relaunch", {"max_num_seqs": 12})
