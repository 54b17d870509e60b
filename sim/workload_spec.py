"""What a workload is: `RequestSpec` (one request), `WorkloadSpec` (a synthetic workload) and its checks.

Also the §3.5 presets (`workload_preset`), which are `WorkloadSpec`s with names
(../shared/reference/sim-model.md §3). Drawing the requests is `sim.workload.generate`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

ARRIVALS = ("poisson", "gamma")


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload: when it arrives and how big it is."""

    index: int
    arrival_s: float  # offset from the start of the run
    prompt_tokens: int
    output_tokens: int
    long: bool  # prompt_tokens >= long_threshold
    prefix_group: int | None = None
    prefix_tokens: int = 0  # tokens of the shared template at the start of the prompt
    priority: int = 0


# A schedule step: (at time t, rate = rate_qps * m, long_share = s when s is not None).
Step = tuple[float, float, float | None]


@dataclass(frozen=True)
class WorkloadSpec:
    """A synthetic workload (§3.1-3.3): arrivals, prompt and output lengths, prefix sharing.

    The run lasts `duration_s` unless `num_requests` is set, which then wins. `schedule` holds
    incident steps `(t, m, s)`: from time t on the rate is `rate_qps * m` (m is relative to
    `rate_qps`, not cumulative; m = 0 pauses arrivals) and, when s is not None, the long share is s.
    """

    rate_qps: float = 1.0
    duration_s: float | None = 60.0
    num_requests: int | None = None
    arrival: str = "poisson"  # "poisson" | "gamma"
    burstiness: float = 1.0  # gamma shape as vLLM's --burstiness: CV = 1/sqrt(b)
    prompt_median: float = 400.0
    prompt_sigma: float = 0.8
    prompt_cap: int = 4000
    long_share: float = 0.0  # share of prompts drawn from U(long_min, long_max)
    long_min: int = 4096
    long_max: int = 8192
    long_threshold: int = 5120
    output_median: float = 50.0
    output_sigma: float = 0.7
    output_cap: int = 1024
    prefix_share: float = 0.0  # share of requests starting with one of n_templates templates
    n_templates: int = 4
    template_tokens: int = 256
    seed: int = 0
    schedule: tuple[Step, ...] = field(default=())
    normalize: bool = True  # with num_requests and no schedule: last arrival at N/rate, as vLLM

    def __post_init__(self) -> None:
        for problem in _spec_problems(self):
            raise ValueError(problem)


def _spec_problems(s: WorkloadSpec) -> Iterator[str]:
    if not s.rate_qps > 0:  # also catches NaN
        yield f"rate_qps must be > 0, got {s.rate_qps}"
    if s.num_requests is None:
        if s.duration_s is None:
            yield "give duration_s or num_requests"
        elif not s.duration_s > 0:
            yield f"duration_s must be > 0, got {s.duration_s}"
        elif math.isinf(s.rate_qps):
            yield "an infinite rate needs num_requests"
        elif math.isinf(s.duration_s):
            yield "duration_s must be finite"
    elif s.num_requests < 0:
        yield f"num_requests must be >= 0, got {s.num_requests}"
    if s.arrival not in ARRIVALS:
        yield f"arrival must be one of {', '.join(ARRIVALS)}, got {s.arrival!r}"
    if not (s.burstiness > 0 and math.isfinite(s.burstiness)):
        yield f"burstiness must be a positive finite number, got {s.burstiness}"
    for name in ("prompt_median", "output_median"):
        if not getattr(s, name) > 0:
            yield f"{name} must be > 0, got {getattr(s, name)}"
    for name in ("prompt_sigma", "output_sigma"):
        if not getattr(s, name) >= 0:
            yield f"{name} must be >= 0, got {getattr(s, name)}"
    for name in ("prompt_cap", "output_cap", "long_min", "n_templates", "template_tokens"):
        if getattr(s, name) < 1:
            yield f"{name} must be >= 1, got {getattr(s, name)}"
    if s.long_max < s.long_min:
        yield f"long_max ({s.long_max}) must be >= long_min ({s.long_min})"
    for name in ("long_share", "prefix_share"):
        if not 0.0 <= getattr(s, name) <= 1.0:
            yield f"{name} must be within [0, 1], got {getattr(s, name)}"
    last_t = 0.0
    for i, step in enumerate(s.schedule):
        if len(step) != 3:
            yield f"schedule step {i} must be (t, multiplier, long_share or None), got {step!r}"
            continue
        t, m, share = step
        if not (t >= last_t and math.isfinite(t)):
            yield f"schedule step {i}: times must be finite, >= 0 and non-decreasing, got {t}"
        if not (m >= 0 and math.isfinite(m)):
            yield f"schedule step {i}: rate multiplier must be >= 0, got {m}"
        if share is not None and not 0.0 <= share <= 1.0:
            yield f"schedule step {i}: long share must be within [0, 1], got {share}"
        if math.isfinite(t):
            last_t = max(last_t, t)


# Presets of §3.5. Rates are absolute; pick them relative to the engine's capacity.
WORKLOAD_PRESETS = ("healthy-chat", "seed-longtail", "bursty", "surge", "long-surge")


def workload_preset(
    name: str,
    *,
    rate_qps: float = 1.0,
    duration_s: float = 60.0,
    seed: int = 0,
    incident_at_s: float | None = None,
) -> WorkloadSpec:
    """A §3.5 preset; `incident_at_s` (default: half the duration) places surges."""
    base = WorkloadSpec(rate_qps=rate_qps, duration_s=duration_s, seed=seed)
    at = duration_s / 2 if incident_at_s is None else incident_at_s
    if name == "healthy-chat":
        return base
    if name == "seed-longtail":
        return replace(base, long_share=0.1)
    if name == "bursty":
        return replace(base, arrival="gamma", burstiness=0.1)  # CV ≈ 3.2
    if name == "surge":
        return replace(base, schedule=((at, 2.0, None),))
    if name == "long-surge":
        return replace(base, long_share=0.02, schedule=((at, 1.0, 0.25),))
    raise ValueError(f"unknown workload preset {name!r}; known: {', '.join(WORKLOAD_PRESETS)}")
