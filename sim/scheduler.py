"""vLLM V1 scheduling of one step: running requests first, then waiting ones, within budgets.

Follows vllm/v1/core/sched/scheduler.py: a per-step token budget (`max_num_batched_tokens`) that
running requests use first (decode = 1 token, a partial prefill takes what remains), preemption by
recompute of the newest running request (or the least urgent under `priority`) when KV blocks run
out, then admission of waiting requests (prefix-cache lookup first) while `max_num_seqs` allows and
no preemption happened in this step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.kvcache import KVCache
from sim.request import SimRequest, Status


@dataclass
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    chunked_prefill: bool = True
    policy: str = "fcfs"  # or "priority"
    long_prefill_token_threshold: int = 0


@dataclass
class ScheduledBatch:
    """What one step computes."""

    items: list[tuple[SimRequest, int]] = field(default_factory=list)  # (request, new tokens)
    preempted: list[SimRequest] = field(default_factory=list)
    admitted: list[SimRequest] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)


class Scheduler:
    """Waiting queue, running list and the per-step batch decision."""

    def __init__(self, config: SchedulerConfig, kv: KVCache) -> None:
        self.config = config
        self.kv = kv
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self._seq = 0

    def add(self, req: SimRequest) -> None:
        self._seq += 1
        req.seq = self._seq
        req.status = Status.WAITING
        self.waiting.append(req)

    def remove(self, req: SimRequest) -> None:
        """Drop a request wherever it is (finish or abort) and free its blocks."""
        if req.status is Status.RUNNING:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.free(req)
        req.status = Status.FINISHED

    def preempt_all(self) -> list[SimRequest]:
        """Put every running request back at the head of waiting (used by sleep)."""
        victims = list(self.running)
        for req in reversed(victims):
            self._preempt(req)
        return victims

    def _preempt(self, req: SimRequest) -> None:
        self.running.remove(req)
        self.kv.free(req)
        req.num_computed = 0
        req.block_hashes.clear()
        req.num_preemptions += 1
        req.status = Status.WAITING
        self.waiting.appendleft(req)

    def _victim(self) -> SimRequest:
        if self.config.policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.seq))
        return self.running[-1]

    def _next_waiting(self) -> SimRequest:
        if self.config.policy == "priority":
            return min(self.waiting, key=lambda r: (r.priority, r.seq))
        return self.waiting[0]

    def _cap(self, req: SimRequest, num_new: int, budget: int) -> int:
        threshold = self.config.long_prefill_token_threshold
        if 0 < threshold < num_new:
            num_new = threshold
        return min(num_new, budget)

    def schedule(self) -> ScheduledBatch:
        """Form the next batch."""
        cfg = self.config
        batch = ScheduledBatch()
        budget = cfg.max_num_batched_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = self._cap(req, req.num_tokens - req.num_computed, budget)
            if num_new <= 0:
                i += 1
                continue
            scheduled = True
            while not self.kv.allocate(req, req.num_computed + num_new):
                victim = self._victim()
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            batch.items.append((req, num_new))
            budget -= num_new
            i += 1
        if batch.preempted:
            return batch
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self._next_waiting()
            hits = self.kv.lookup(req, req.num_tokens)
            computed = len(hits) * self.kv.block_size
            num_new = req.num_tokens - computed
            if not cfg.chunked_prefill and num_new > budget:
                break
            num_new = self._cap(req, num_new, budget)
            if not self.kv.can_admit(hits, computed + num_new):
                break
            self.kv.admit(req, hits)
            req.num_computed = computed
            self.kv.allocate(req, computed + num_new)
            if self.waiting[0] is req:
                self.waiting.popleft()
            else:
                self.waiting.remove(req)
            req.status = Status.RUNNING
            self.running.append(req)
            batch.admitted.append(req)
            batch.items.append((req, num_new))
            budget -= num_new
        return batch
