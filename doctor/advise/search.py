"""The candidates: the current settings, the seed article's rules, and a small grid searched on the twin.

The seed's decision support (seed-article.txt, 决策支持系统): batch 8 under an average prompt of 512 tokens,
4 from 512 to 2048, 2 above with long texts isolated (the hot/cold split at 5120 tokens). "Batch" maps to
`--max-num-seqs`, the engine's cap on running sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from doctor.advise.twin import Prediction, Settings
from doctor.advise.workload import WorkloadProfile

GOODPUT_TIE = 0.98  # candidates within 2% of the best goodput are judged on their P99 TTFT and e2e
BETTER_BY = 0.05  # a change is recommended only when it beats the current settings by this much


@dataclass(frozen=True)
class Candidate:
    label: str  # "current" | "seed rules" | "twin best" | "grid"
    settings: Settings
    predicted: Prediction | None
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"label": self.label, "settings": settings_dict(self.settings), "note": self.note,
                "predicted": None if self.predicted is None else self.predicted.to_dict()}


def settings_dict(s: Settings) -> dict[str, object]:
    return {"max_num_seqs": s.max_num_seqs, "max_num_batched_tokens": s.max_num_batched_tokens,
            "enable_chunked_prefill": s.enable_chunked_prefill, "vllm_flags": " ".join(s.vllm_flags())}


def seed_batch(profile: WorkloadProfile) -> tuple[int, str]:
    """The seed's batch size for the average prompt length, and the rule that chose it."""
    avg = profile.avg_prompt
    if avg < 512:
        return 8, f"average prompt {avg:.0f} tokens < 512: batch 8"
    if avg <= 2048:
        return 4, f"average prompt {avg:.0f} tokens in 512-2048: batch 4"
    return 2, f"average prompt {avg:.0f} tokens > 2048: batch 2, long texts isolated (hot/cold split at 5120)"


def grid(current: Settings, seqs: Iterable[int], batched: Iterable[int | None], chunked: Iterable[bool]
         ) -> list[Settings]:
    """Each combination once; with chunked prefill off the token budget is vLLM's own (>= max_model_len)."""
    out: list[Settings] = []
    for c in chunked:
        for n in seqs:
            for b in (batched if c else [None]):
                s = replace(current, max_num_seqs=n, max_num_batched_tokens=b, enable_chunked_prefill=c)
                if s not in out:
                    out.append(s)
    return out


def _tails(p: Prediction, ref: Prediction) -> float:
    """P99 TTFT and P99 e2e relative to the reference's, summed (2.0: the same tails; lower is better)."""
    total = 0.0
    for m in ("p99_ttft_s", "p99_e2e_s"):
        v, r = p.get(m), ref.get(m)
        total += 1.0 if v is None or r is None or r <= 0 else v / r
    return total


def ranked(current: Candidate, tried: Sequence[Candidate]) -> list[Candidate]:
    """`tried` in the order `best` prefers them: those within 2% of the top goodput first, by their tails, then
    the rest by goodput."""
    ref = current.predicted
    ok = [c for c in tried if c.predicted is not None]
    if not ok or ref is None:
        return ok
    top = max(c.predicted.goodput_qps or 0.0 for c in ok if c.predicted)

    def key(c: Candidate) -> tuple[int, float, float]:
        assert c.predicted is not None
        g = c.predicted.goodput_qps or 0.0
        near = g >= GOODPUT_TIE * top
        return (0 if near else 1, 0.0 if near else -g, _tails(c.predicted, ref))
    return sorted(ok, key=key)


def best(current: Candidate, tried: Sequence[Candidate]) -> Candidate:
    """The most goodput within the SLOs; among those within 2% of it, the lowest tails (P99 TTFT and e2e relative
    to the current settings'); the current settings unless a change beats them by BETTER_BY in goodput, or in
    tails at no less goodput."""
    ref = current.predicted
    ok = [c for c in tried if c.predicted is not None]
    if not ok or ref is None:
        return current
    top = max(c.predicted.goodput_qps or 0.0 for c in ok if c.predicted)
    near = [c for c in ok if c.predicted and (c.predicted.goodput_qps or 0.0) >= GOODPUT_TIE * top]
    pick = min(near, key=lambda c: _tails(c.predicted, ref) if c.predicted else float("inf"))
    assert pick.predicted is not None
    cur_g, pick_g = ref.goodput_qps or 0.0, pick.predicted.goodput_qps or 0.0
    gains = pick_g > cur_g * (1 + BETTER_BY) or (
        pick_g >= cur_g * GOODPUT_TIE and _tails(pick.predicted, ref) < 2.0 * (1 - BETTER_BY))
    if pick.settings == current.settings or not gains:
        return replace(current, label="twin best", note="no change beats the current settings by "
                       f"{BETTER_BY:.0%} on the twin: keep them")
    return replace(pick, label="twin best")


def search(current: Settings, candidates: Sequence[Settings], runner: Callable[[Settings], Prediction | str]
           ) -> list[Candidate]:
    """Run every candidate on the twin; a candidate the engine would refuse (bad arguments) says why."""
    out = []
    for s in candidates:
        got = runner(s)
        out.append(Candidate("grid", s, None, got) if isinstance(got, str) else Candidate("grid", s, got))
    return out
