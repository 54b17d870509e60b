"""The one place playbooks are registered. Ids are a contract: JSON output, alert mapping and config use them."""

from __future__ import annotations

import importlib
from functools import cache

from playbooks.base import Playbook

# Module names under playbooks/ (one playbook per file, module-level `PLAYBOOK`), in precedence order:
# when findings propose conflicting actions, the most severe wins, then the earlier playbook here.
PLAYBOOK_MODULES: tuple[str, ...] = (
    "engine_down", "router_down", "gpu_fault", "cuda_oom", "engine_stalled", "error_rate", "kv_pressure", "p99_spike",
    "queue_pressure", "cold_prefill_slow", "long_prompt_share", "hot_decode_jitter", "memory_fragmentation",
    "throughput_drop", "capacity_scale_out", "capacity_scale_in", "prefix_cache_miss", "api_server_cpu_bound",
    "batch_underutilized", "cold_start", "replica_imbalance",
)


class UnknownPlaybookError(KeyError):
    """A playbook id that is not registered."""

    def __str__(self) -> str:
        return f"unknown playbook id {self.args[0]!r}; known ids: {', '.join(PLAYBOOK_MODULES)}"


@cache
def all_playbooks() -> tuple[Playbook, ...]:
    """Every registered playbook, in precedence order."""
    out = []
    for name in PLAYBOOK_MODULES:
        module = importlib.import_module(f"playbooks.{name}")
        playbook: Playbook = module.PLAYBOOK
        if playbook.id != name:
            raise RuntimeError(f"playbooks/{name}.py registers id {playbook.id!r}; the file name must be the id")
        out.append(playbook)
    return tuple(out)


def get(playbook_id: str) -> Playbook:
    for pb in all_playbooks():
        if pb.id == playbook_id:
            return pb
    raise UnknownPlaybookError(playbook_id)


def ids() -> tuple[str, ...]:
    return PLAYBOOK_MODULES


def precedence(playbook_id: str) -> int:
    """Lower is stronger."""
    return PLAYBOOK_MODULES.index(playbook_id)
