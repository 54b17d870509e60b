"""Request streams for the sim and for load generation (../shared/reference/sim-model.md §3).

Pure and deterministic: `generate` draws a synthetic workload from a `WorkloadSpec` with Python's
`random` (same seed ⇒ same list), `load_trace` replays a public trace (Azure LLM inference,
BurstGPT, Mooncake or a generic CSV/JSONL), and `prompt_token_ids` / `prompt_text` turn a
`RequestSpec` into the prompt actually sent, with shared templates for prefix groups.

This module draws synthetic workloads (`generate`) and re-exports the rest, one concern a module:
`sim.workload_spec` (the request and workload types, their checks, the §3.5 presets),
`sim.workload_prompts` (prompt ids and text) and `sim.workload_traces` (trace replay).
"""

from __future__ import annotations

import math
import random

from sim.workload_prompts import prompt_text, prompt_token_ids
from sim.workload_spec import ARRIVALS, WORKLOAD_PRESETS, RequestSpec, Step, WorkloadSpec, workload_preset
from sim.workload_traces import MOONCAKE_BLOCK_TOKENS, TraceError, load_trace

__all__ = [
    "ARRIVALS",
    "MOONCAKE_BLOCK_TOKENS",
    "WORKLOAD_PRESETS",
    "RequestSpec",
    "Step",
    "TraceError",
    "WorkloadSpec",
    "generate",
    "load_trace",
    "prompt_text",
    "prompt_token_ids",
    "workload_preset",
]


def _segments(spec: WorkloadSpec) -> list[tuple[float, float, float]]:
    """(start time, rate, long share) pieces of the piecewise-constant schedule."""
    pieces = [(0.0, spec.rate_qps, spec.long_share)]
    for t, m, share in spec.schedule:
        _, _, current_share = pieces[-1]
        piece = (float(t), spec.rate_qps * m, current_share if share is None else share)
        if piece[0] == pieces[-1][0]:
            pieces[-1] = piece
        else:
            pieces.append(piece)
    return pieces


def _arrivals(spec: WorkloadSpec, rng: random.Random) -> list[float]:
    """Arrival offsets: a unit-mean gamma renewal process mapped through the cumulative rate.

    Operational time u grows by Gamma(b, 1/b) gaps (b = 1: Poisson); the arrival is the t where
    the integral of the rate reaches u, which handles rate steps exactly.
    """
    limit = spec.num_requests
    horizon = math.inf if limit is not None else float(spec.duration_s or 0.0)
    if math.isinf(spec.rate_qps):
        return [0.0] * (limit or 0)
    shape = 1.0 if spec.arrival == "poisson" else spec.burstiness
    pieces = _segments(spec)
    out: list[float] = []
    k = 0  # current piece
    cum_at_k = 0.0  # integral of the rate up to pieces[k] start
    u = 0.0
    while limit is None or len(out) < limit:
        gap = rng.expovariate(1.0) if shape == 1.0 else rng.gammavariate(shape, 1.0 / shape)
        u += gap
        # Advance to the piece in which the cumulative rate reaches u.
        while k + 1 < len(pieces):
            start, rate, _ = pieces[k]
            span = (pieces[k + 1][0] - start) * rate
            if cum_at_k + span >= u:
                break
            cum_at_k += span
            k += 1
        start, rate, _ = pieces[k]
        if rate <= 0:  # the last piece has rate 0: no more arrivals ever
            break
        t = start + (u - cum_at_k) / rate
        if t >= horizon:
            break
        out.append(t)
    if (
        spec.normalize
        and limit is not None
        and not spec.schedule
        and out
        and out[-1] > 0
    ):
        factor = (limit / spec.rate_qps) / out[-1]
        out = [t * factor for t in out]
    return out


def _share_at(pieces: list[tuple[float, float, float]], t: float) -> float:
    share = pieces[0][2]
    for start, _, s in pieces:
        if start > t:
            break
        share = s
    return share


def _normal(rng: random.Random) -> float:
    """Box-Muller from exactly two uniforms, so every request consumes the same draws."""
    u1, u2 = rng.random(), rng.random()
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


def _lognormal_int(rng: random.Random, median: float, sigma: float, cap: int) -> int:
    value = median * math.exp(sigma * _normal(rng))
    return max(1, min(cap, round(value)))


def generate(spec: WorkloadSpec) -> list[RequestSpec]:
    """Draw the request list of `spec`, sorted by arrival; same spec (and seed) ⇒ same list.

    Arrivals and sizes use separate streams derived from `random.Random(spec.seed)` and every
    request consumes a fixed number of draws, so changing e.g. long_share keeps the arrival times
    and changes only the requests that flip class.
    """
    master = random.Random(spec.seed)
    arrival_rng = random.Random(master.getrandbits(64))
    size_rng = random.Random(master.getrandbits(64))
    pieces = _segments(spec)
    out: list[RequestSpec] = []
    for index, t in enumerate(_arrivals(spec, arrival_rng)):
        short_len = _lognormal_int(size_rng, spec.prompt_median, spec.prompt_sigma, spec.prompt_cap)
        u_long, u_long_len = size_rng.random(), size_rng.random()
        output = _lognormal_int(size_rng, spec.output_median, spec.output_sigma, spec.output_cap)
        u_prefix, u_group = size_rng.random(), size_rng.random()
        if u_long < _share_at(pieces, t):
            span = spec.long_max - spec.long_min + 1
            prompt = spec.long_min + min(span - 1, int(u_long_len * span))
        else:
            prompt = short_len
        group: int | None = None
        prefix = 0
        if u_prefix < spec.prefix_share:
            group = min(spec.n_templates - 1, int(u_group * spec.n_templates))
            prefix = min(spec.template_tokens, prompt)
        out.append(
            RequestSpec(
                index=index,
                arrival_s=t,
                prompt_tokens=prompt,
                output_tokens=output,
                long=prompt >= spec.long_threshold,
                prefix_group=group,
                prefix_tokens=prefix,
            )
        )
    return out
