"""One request inside the simulated engine core."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


# listener(request, new_tokens, now): called when tokens are emitted or the request ends.
Listener = Callable[["SimRequest", int, float], None]


class SimRequest:
    """Token counts, KV holdings and the timestamps vLLM's metrics are computed from."""

    __slots__ = (
        "arrival_time", "block_hashes", "cached_refs", "committed_blocks", "error", "finish_reason",
        "first_scheduled_time", "first_token_time", "last_token_time", "listener", "max_tokens",
        "num_computed", "num_preemptions", "output_count", "output_seed", "prefix_hit_tokens",
        "priority", "private_blocks", "prompt", "queued_time", "request_id", "seq",
        "status", "target_output",
    )

    def __init__(self, request_id: str, prompt: Sequence[int], *, max_tokens: int, target_output: int,
                 arrival_time: float, priority: int = 0, output_seed: int = 0,
                 listener: Listener | None = None) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.target_output = min(target_output, max_tokens)
        self.arrival_time = arrival_time  # frontend arrival: TTFT and e2e start here
        self.priority = priority
        self.output_seed = output_seed
        self.listener = listener
        self.output_count = 0
        self.num_computed = 0
        self.cached_refs: list[int] = []
        self.private_blocks = 0
        self.block_hashes: list[int] = []
        self.committed_blocks = 0
        self.status = Status.WAITING
        self.seq = 0
        self.queued_time = arrival_time
        # vLLM keeps the first SCHEDULED event (re-admissions after a preemption do not move it).
        self.first_scheduled_time: float | None = None
        self.first_token_time = 0.0
        self.last_token_time = 0.0
        self.num_preemptions = 0
        self.prefix_hit_tokens = -1  # -1 until the first admission
        self.finish_reason: str | None = None
        self.error: str | None = None

    @property
    def num_prompt(self) -> int:
        return len(self.prompt)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + self.output_count

    def token_at(self, position: int) -> int:
        """Token id at a position: the prompt, then deterministic output ids."""
        n = len(self.prompt)
        if position < n:
            return self.prompt[position]
        return (self.output_seed * 1_000_003 + (position - n) * 7919) % 32000 + 100

    def output_token_id(self, index: int) -> int:
        return self.token_at(len(self.prompt) + index)

    def block_content(self, index: int, block_size: int) -> object:
        """A hashable stand-in for the token ids of full block `index` (cheap for synthetic prompts)."""
        start = index * block_size
        end = start + block_size
        if end <= len(self.prompt) and isinstance(self.prompt, SyntheticPrompt):
            return self.prompt.block_key(index, block_size)
        return tuple(self.token_at(p) for p in range(start, end))


class SyntheticPrompt(Sequence[int]):
    """Prompt token ids computed on demand: a shared template head, then request-unique ids."""

    __slots__ = ("length", "prefix_key", "prefix_len", "unique_key")

    def __init__(self, length: int, *, unique_key: int, prefix_key: int | None = None,
                 prefix_len: int = 0) -> None:
        self.length = length
        self.unique_key = unique_key
        self.prefix_key = prefix_key
        self.prefix_len = min(prefix_len, length) if prefix_key is not None else 0

    def __len__(self) -> int:
        return self.length

    def _id(self, i: int) -> int:
        key = self.prefix_key if i < self.prefix_len else self.unique_key
        return ((key or 0) * 2_654_435_761 + i * 40_503) % 31_900 + 100

    def __getitem__(self, i: int) -> int:  # type: ignore[override]
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(i)
        return self._id(i)

    def block_key(self, index: int, block_size: int) -> tuple[object, ...]:
        start, end = index * block_size, (index + 1) * block_size
        if end <= self.prefix_len:
            return (0, self.prefix_key, index)
        if start >= self.prefix_len:
            return (1, self.unique_key, index)
        return (2, self.prefix_key, self.unique_key, index)
