"""cuda_oom: out-of-memory events are critical; the remedy depends on what ran out."""

from __future__ import annotations

from typing import Any

from collectors.types import EngineConfigView, Event, Signals
from playbooks.base import EngineView
from playbooks.cuda_oom import PLAYBOOK
from playbooks.evaluate import evaluate
from playbooks.model import confidence_from

GIB = 1024**3
RUNTIME = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.25 GiB of which 1.19 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and "
           "6.00 GiB is reserved by PyTorch but unallocated.")


def oom(kind: str = "cuda_oom", **details: Any) -> Event:
    return Event(kind, "hot", 990.0, RUNTIME if kind == "cuda_oom" else "startup failure", details)


def view(events: tuple[Event, ...] = (), *, active: bool = False, config: EngineConfigView | None = None
         ) -> EngineView:
    sig = Signals(engine="hot", window_s=60.0, health="ok", health_status=200, values={}, events=events)
    return EngineView(name="hot", role="hot", signals=sig, params=dict(PLAYBOOK.defaults), now=1000.0,
                      active=active, config=config or EngineConfigView(max_num_seqs=256))


def test_runtime_oom_is_critical_with_lower_memory_first() -> None:
    v = view((oom(allocated_bytes=70.0 * GIB, reserved_unallocated_bytes=6.0 * GIB, fragmentation_ratio=6 / 76),))
    cond = PLAYBOOK.check(v)
    assert cond is not None and cond.severity is None and PLAYBOOK.severity == "critical"
    assert "CUDA out of memory" in cond.summary
    count = cond.evidence[0]
    assert (count.signal, count.value, count.threshold) == ("oom_events", 1.0, 0.0)
    frag = cond.evidence[1]
    assert frag.signal == "oom_reserved_unallocated_bytes" and frag.value == 6.0 * GIB
    assert "6.00 GiB" in frag.note and "expandable_segments" in frag.note and "8%" in frag.note
    remedies = PLAYBOOK.remedies(v, cond)
    assert [a.kind for a in remedies] == ["relaunch", "relaunch"]
    assert remedies[0].params == {"gpu_memory_utilization": "lower by 0.05"}
    assert remedies[1].params == {"max_num_seqs": 192} and remedies[1].inverse == {"max_num_seqs": 256}


def test_known_gpu_memory_utilization_gives_a_number() -> None:
    cfg = Event("startup_config", "hot", 900.0, "non-default args: {...}",
                {"non_default_args": {"gpu_memory_utilization": 0.92, "max_num_seqs": 256}})
    v = view((cfg, oom()))
    cond = PLAYBOOK.check(v)
    assert cond is not None and len(cond.evidence) == 1  # no fragmentation figure in the details
    first = PLAYBOOK.remedies(v, cond)[0]
    assert first.params == {"gpu_memory_utilization": 0.87} and first.inverse == {"gpu_memory_utilization": 0.92}


def test_startup_oom_for_free_memory_asks_for_what_is_free() -> None:
    ev = oom("startup_oom", reason="free_memory_at_startup", free_bytes=60.0 * GIB, total_bytes=80.0 * GIB,
             gpu_memory_utilization=0.9, requested_bytes=72.0 * GIB)
    v = view((ev,))
    cond = PLAYBOOK.check(v)
    assert cond is not None and "start-up" in cond.summary
    remedies = PLAYBOOK.remedies(v, cond)
    assert remedies[0].kind == "relaunch" and remedies[0].params == {"gpu_memory_utilization": 0.75}
    assert remedies[-1].kind == "escalate"  # another process may hold the GPU


def test_kv_too_small_lowers_max_model_len_not_memory() -> None:
    ev = oom("startup_oom", reason="kv_too_small_for_max_len", max_model_len=131072, estimated_max_model_len=65536)
    v = view((ev,), config=EngineConfigView(max_model_len=131072))
    cond = PLAYBOOK.check(v)
    assert cond is not None
    remedies = PLAYBOOK.remedies(v, cond)
    assert remedies[0].params == {"max_model_len": 65536} and remedies[0].inverse == {"max_model_len": 131072}
    assert all("gpu_memory_utilization" not in a.params for a in remedies)


def test_model_that_does_not_fit_is_escalated() -> None:
    v = view((oom("startup_oom", reason="no_kv_memory"),))
    cond = PLAYBOOK.check(v)
    assert cond is not None and [a.kind for a in PLAYBOOK.remedies(v, cond)] == ["escalate"]


def test_silent_without_oom_events() -> None:
    other = Event("preemption", "hot", 990.0, "preempted", {})
    assert PLAYBOOK.check(view()) is None
    assert PLAYBOOK.check(view((other,))) is None
    assert PLAYBOOK.check(view(active=True)) is None  # no events: the finding clears even while active


def test_threshold_is_a_count_above_the_parameter() -> None:
    v = view((oom(), oom()))
    assert PLAYBOOK.check(v) is not None
    v.params = {**PLAYBOOK.defaults, "oom_events": 2.0}
    assert PLAYBOOK.check(v) is None


def test_unknown_config_and_odd_details_do_not_crash() -> None:
    v = view((oom(reserved_unallocated_bytes="n/a", gpu_memory_utilization=True),), config=EngineConfigView())
    cond = PLAYBOOK.check(v)
    assert cond is not None
    remedies = PLAYBOOK.remedies(v, cond)
    assert remedies[1].params == {"max_num_seqs": "lower"}


def test_confidence_grows_with_the_fragmentation_figure() -> None:
    plain = PLAYBOOK.check(view((oom(),)))
    frag = PLAYBOOK.check(view((oom(reserved_unallocated_bytes=1.0 * GIB),)))
    assert plain is not None and frag is not None
    assert confidence_from(frag.agreeing, frag.considered) > confidence_from(plain.agreeing, plain.considered)


def test_evaluate_reports_at_once_as_critical() -> None:
    findings = evaluate([view((oom(),))], {}, now=1000.0, playbooks=[PLAYBOOK])
    assert [(f.playbook, f.severity) for f in findings] == [("cuda_oom", "critical")]
    assert findings[0].remedies[0].params["gpu_memory_utilization"] == "lower by 0.05"
