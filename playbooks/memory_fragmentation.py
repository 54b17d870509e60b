"""memory_fragmentation: the engine holds much more GPU memory than right after its warm-up."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action


class MemoryFragmentation(Playbook):
    id = "memory_fragmentation"
    title = "GPU memory fragmentation"
    severity = "warning"
    signals = ("memory_growth_ratio", "fb_used_ratio")
    alerts = ("VllmMemoryFragmentation",)
    defaults: ClassVar[dict[str, float]] = {"memory_growth_ratio": 0.15, "fb_used_ratio": 0.95}
    for_s = 120.0
    runbook = """\
**What it means.** The engine's processes hold more than 15% more framebuffer than the footprint
recorded after warm-up (`memory_growth_ratio`). vLLM reserves its KV pool up front, so growth beyond
that is the PyTorch caching allocator keeping fragmented segments (odd-sized activations, CUDA graphs
captured late, a leak). Left alone it ends in `torch.OutOfMemoryError` (see `cuda_oom`), worst when the
framebuffer is already near full. There is no `nvidia-smi frag` and no `/proc/driver/nvidia/.../defrag`:
the only way to give the memory back is to release it from inside the engine or restart it.

**Confirm by hand.** `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` over time against the
footprint after start-up; `nvidia-smi --query-gpu=memory.used,memory.total --format=csv`; in the log,
`Memory profiling takes` / `the current vLLM instance can use total_gpu_memory` lines give the start-up
budget. `vllm:kv_cache_usage_perc` is *not* this number (it counts KV blocks, not framebuffer).

**Remedies.** Defragment: drain the engine at the router, `POST /sleep?level=1` then `POST /wake_up`
(dev mode with `--enable-sleep-mode`), and verify that the freed memory is really back (sleep has freed
far less than expected in some releases); when it is not, relaunch. Relaunch (blue/green when a spare
GPU exists) is the fallback and the remedy when sleep mode is not enabled.
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress:
            return None  # the doctor is sleeping/waking or relaunching it: growth is expected meanwhile
        growth = view.above("memory_growth_ratio", "memory_growth_ratio")
        if growth is None:
            return None
        supporting = [e for e in (view.above("fb_used_ratio", "fb_used_ratio"),) if e is not None]
        summary = f"engine holds {growth.value:.0%} more GPU memory than after warm-up"
        if supporting:
            summary += f", framebuffer {supporting[0].value:.0%} full"
        return Condition(summary, (growth, *supporting), agreeing=1 + len(supporting), considered=2)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        return [
            Action("defragment", view.name,
                   {"sleep_level": 1, "min_freed_ratio": view.params["memory_growth_ratio"], "fallback": "relaunch"},
                   risk="medium",
                   description="drain at the router, /sleep + /wake_up, verify the memory came back, else relaunch"),
            Action("relaunch", view.name, {"reason": "memory fragmentation"}, risk="medium",
                   description="relaunch with the same arguments (blue/green when a spare GPU exists), then warm up"),
        ]


PLAYBOOK = MemoryFragmentation()
