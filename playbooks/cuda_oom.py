"""cuda_oom: the engine ran out of GPU memory (at start-up or while serving), per its log."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence

_GIB = 1024**3


def _gpu_memory_utilization(view: EngineView) -> float | None:
    """The engine's --gpu-memory-utilization when a log line in the window states it."""
    for event in reversed(view.events_of("startup_oom", "startup_config")):
        d = event.details
        for source in (d, d.get("non_default_args"), d.get("args"), d.get("engine_config")):
            if isinstance(source, Mapping):
                value = source.get("gpu_memory_utilization")
                if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1:
                    return float(value)
    return None


def _num(details: Mapping[str, Any], key: str) -> float | None:
    value = details.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class CudaOom(Playbook):
    id = "cuda_oom"
    title = "CUDA out of memory"
    severity = "critical"
    signals = ("events",)
    alerts = ("VllmCudaOutOfMemory",)
    defaults: ClassVar[dict[str, float]] = {
        "oom_events": 0.0, "gpu_memory_utilization_step_ratio": 0.05, "max_num_seqs_factor_ratio": 0.75}
    runbook = """\
**What it means.** The engine's log shows `torch.OutOfMemoryError: CUDA out of memory` while serving
(activations or the sampler did not fit beside the KV cache vLLM pre-allocated), or a start-up failure
for memory: `Free memory on device ... is less than desired GPU memory utilization` (another process
holds the GPU), `No available memory for the cache blocks`, or `... KV cache is needed, which is larger
than the available KV cache memory` (max model length too large for the KV cache). Requests fail;
an engine that fails at start-up does not come up at all.

**Confirm by hand.** `grep -n -B2 -A8 "out of memory" /var/log/vllm-hot.log`; the OOM message's
`reserved by PyTorch but unallocated` figure is the allocator's fragmentation (if large, set
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`); `nvidia-smi --query-compute-apps=pid,used_memory
--format=csv` for other processes on the GPU.

**Remedies.** Relaunch with `--gpu-memory-utilization` 0.05 lower (more headroom outside the KV
cache for activations), or with a smaller `--max-num-seqs` (fewer concurrent activations). When the
start-up check says the KV cache cannot hold one max-length sequence, relaunch with the
`--max-model-len` the log estimates instead. A memory shortage at start-up because another process
holds the GPU needs a person.
"""

    def check(self, view: EngineView) -> Condition | None:
        events = view.events_of("cuda_oom", "startup_oom")
        if len(events) <= view.params["oom_events"]:
            return None
        last = events[-1]
        evidence: list[Evidence] = [
            Evidence("oom_events", float(len(events)), view.params["oom_events"], view.window_s, ">",
                     f"{last.kind}: {last.message[:200]}"),
        ]
        details: dict[str, float | str] = {"kind": last.kind, "reason": str(last.details.get("reason", "runtime"))}
        unallocated = _num(last.details, "reserved_unallocated_bytes")
        if unallocated is not None:
            ratio = _num(last.details, "fragmentation_ratio")
            evidence.append(Evidence("oom_reserved_unallocated_bytes", unallocated, None, view.window_s, "present",
                                     f"{unallocated / _GIB:.2f} GiB reserved by PyTorch but unallocated"
                                     + (f" ({ratio:.0%} of what it holds)" if ratio is not None else "")
                                     + ": allocator fragmentation; try "
                                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"))
            details["reserved_unallocated_bytes"] = unallocated
        free, total = _num(last.details, "free_bytes"), _num(last.details, "total_bytes")
        if last.kind == "startup_oom" and free is not None and total:
            details["free_ratio"] = free / total
        estimated = _num(last.details, "estimated_max_model_len")
        if estimated is not None:
            details["estimated_max_model_len"] = estimated
        kinds = {e.kind for e in events}
        what = "CUDA out of memory" if "cuda_oom" in kinds else "out of memory at start-up"
        if kinds == {"cuda_oom", "startup_oom"}:
            what = "CUDA out of memory while serving and at start-up"
        return Condition(f"{what} ({len(events)} event{'s' if len(events) != 1 else ''} in the window)",
                         tuple(evidence), agreeing=len(evidence), considered=2, details=details)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        actions: list[Action] = []
        reason = condition.details.get("reason")
        estimated = condition.details.get("estimated_max_model_len")
        if reason == "kv_too_small_for_max_len":
            # Lowering gpu_memory_utilization would make this worse: the KV cache must hold one max-length sequence.
            actions.append(Action("relaunch", view.name,
                                  {"max_model_len": int(estimated) if isinstance(estimated, float) else "lower"},
                                  inverse={"max_model_len": view.config.max_model_len}, risk="medium",
                                  description="the KV cache cannot hold one sequence of max_model_len tokens"))
            return [*actions, Action("escalate", view.name, {"reason": condition.summary})]
        if reason in ("no_kv_memory", "model_load"):
            return [Action("escalate", view.name, {"reason": condition.summary},
                           description="the model (or its KV cache) does not fit at this gpu_memory_utilization "
                                       "and tensor-parallel size")]
        current = _gpu_memory_utilization(view)
        step = view.params["gpu_memory_utilization_step_ratio"]
        lower: float | str = f"lower by {step:g}"
        if current is not None:
            target = current - step
            fits = condition.details.get("free_ratio")
            if isinstance(fits, float):  # start-up: ask for no more than the GPU has free
                target = min(target, math.floor(fits * 100) / 100)
            if target > 0.1:
                lower = round(target, 2)
        actions.append(Action("relaunch", view.name, {"gpu_memory_utilization": lower},
                              inverse={"gpu_memory_utilization": current}, risk="medium",
                              description="leave more GPU memory outside the KV cache for activations"))
        seqs = view.config.max_num_seqs
        actions.append(Action("relaunch", view.name,
                              {"max_num_seqs": max(1, int(seqs * view.params["max_num_seqs_factor_ratio"]))
                               if seqs else "lower"},
                              inverse={"max_num_seqs": seqs}, risk="medium",
                              description="fewer concurrent sequences need less activation memory"))
        if reason == "free_memory_at_startup":
            actions.append(Action("escalate", view.name, {"reason": condition.summary},
                                  description="another process may hold the GPU's memory"))
        return actions


PLAYBOOK = CudaOom()
