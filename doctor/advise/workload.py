"""The workload an engine served over a window, from its counters and histograms (never its requests).

`profile_of` reads a `WindowView` (collectors.window) through the collectors' own derivations; `draw`
turns a profile back into requests for the twin: with `replay_from`, the window's finished requests placed where
they were (doctor.advise.placed: each read interval's observed lengths at finish minus e2e) after synthetic
warm-up traffic; where the reads cannot say (a reset, a histogram missing), the window's arrivals per read interval
with lengths drawn from its histograms; without `replay_from`, synthetic arrivals (Poisson or gamma at the
measured rate) with drawn lengths.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from collectors.derive import derive_window
from collectors.quantiles import share_at_or_above
from collectors.types import EngineConfigView, HistogramData, MetricsSnapshot
from collectors.window import WindowView
from doctor.advise import AdviseError
from doctor.advise.lengths import Finished, finished_between
from doctor.advise.placed import place
from sim.workload import RequestSpec, WorkloadSpec, generate

TEMPLATE_TOKENS = 256


@dataclass(frozen=True)
class LengthDist:
    """A length histogram's buckets over the window: (lower, upper] bounds, counts, and the mean."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    mean: float

    @property
    def total(self) -> float:
        return sum(self.counts)


@dataclass(frozen=True)
class WorkloadProfile:
    """What the engine served over the window (the twin's input and the seed's rule inputs)."""

    engine: str
    role: str | None
    window_s: float
    requests: float  # finished in the window
    rate_qps: float  # arrivals: finished plus the growth of running + waiting (qps alone misses a backlog)
    burstiness: float | None  # gamma shape (1 = Poisson); None when the window has too few reads to tell
    burstiness_note: str
    prompt: LengthDist
    generation: LengthDist
    prefix_hit_rate: float | None
    share_over_2048: float
    share_over_8k: float
    intervals: tuple[tuple[float, float, int], ...] = ()  # (offset, length, arrivals) per read interval
    finished: tuple[Finished, ...] | None = None  # per read interval, what finished (None: the reads cannot say)
    in_flight_end: int = 0  # running + waiting at the window's last read

    @property
    def avg_prompt(self) -> float:
        return self.prompt.mean

    def to_dict(self) -> dict[str, object]:
        return {"engine": self.engine, "role": self.role, "window_s": round(self.window_s, 3),
                "requests": self.requests, "rate_qps": round(self.rate_qps, 4),
                "burstiness": None if self.burstiness is None else round(self.burstiness, 3),
                "burstiness_note": self.burstiness_note, "avg_prompt_tokens": round(self.prompt.mean, 1),
                "avg_generation_tokens": round(self.generation.mean, 1),
                "prefix_cache_hit_rate": self.prefix_hit_rate,
                "share_over_2048": round(self.share_over_2048, 4), "share_over_8k": round(self.share_over_8k, 4)}


def _dist(h: HistogramData | None, what: str) -> LengthDist:
    if h is None or h.count <= 0:
        raise AdviseError(f"no {what} finished in the window (its histogram did not grow)")
    counts, prev = [], 0.0
    for c in h.cumulative:
        counts.append(max(0.0, c - prev))
        prev = c
    return LengthDist(tuple(h.bounds), tuple(counts), h.sum / h.count)


def _intervals(chain: Sequence[MetricsSnapshot]) -> tuple[tuple[float, float, int], ...]:
    """(start offset, length, arrivals) of each read interval: the window's traffic shape at the reads' grain."""
    t0 = chain[0].timestamp
    return tuple((a.timestamp - t0, b.timestamp - a.timestamp, round(n))
                 for a, b, n in zip(chain, chain[1:], _arrivals(chain), strict=False) if b.timestamp > a.timestamp)


def _arrivals(chain: Sequence[MetricsSnapshot]) -> list[float]:
    """Requests that arrived between reads: those finished plus the growth of running + waiting."""
    def finished(s: MetricsSnapshot) -> float:
        return sum(v for k, v in s.counters.items() if k.startswith("request_success{"))

    def inside(s: MetricsSnapshot) -> float:
        return s.gauges.get("running", 0.0) + s.gauges.get("waiting", 0.0)

    out = []
    for a, b in itertools.pairwise(chain):
        done = finished(b) - finished(a)
        if done >= 0:  # a counter reset (restart) drops the interval
            out.append(max(0.0, done + inside(b) - inside(a)))
    return out


def _burstiness(chain: Sequence[MetricsSnapshot]) -> tuple[float | None, str]:
    """Gamma shape from the arrivals between reads: their index of dispersion estimates the gaps' CV^2."""
    counts = _arrivals(chain)
    if len(counts) < 8:
        return None, f"{len(counts)} read intervals (fewer than 8): arrivals assumed Poisson"
    mean = sum(counts) / len(counts)
    if mean <= 0:
        return None, "no requests between reads: arrivals assumed Poisson"
    var = sum((c - mean) ** 2 for c in counts) / (len(counts) - 1)
    dispersion = min(max(var / mean, 0.05), 20.0)
    noise = 2.0 * math.sqrt(2.0 / (len(counts) - 1))  # two standard errors of a Poisson process's dispersion
    seen = f"index of dispersion {dispersion:.2f} of arrivals over {len(counts)} read intervals"
    if abs(dispersion - 1.0) <= noise:
        return 1.0, f"{seen}: within {noise:.2f} of 1, Poisson"
    return 1.0 / dispersion, seen


def profile_of(engine: str, role: str | None, view: WindowView, chain: Sequence[MetricsSnapshot],
               config: EngineConfigView) -> WorkloadProfile:
    """The workload of one engine over `view` (built by collectors.window.window_view over `chain`)."""
    got = derive_window(view.base, view.cur, config, gauges=view.gauges, resets=view.resets)
    qps = got.values.get("qps")
    if qps is None or view.length_s <= 0:
        raise AdviseError(f"{engine}: no request rate over the window ({got.reasons.get('qps', 'unknown')})")
    prompt_h = view.cur.histograms.get("prompt_len")
    base_h = view.base.histograms.get("prompt_len")
    prompt = _dist(_delta(base_h, prompt_h), "prompts")
    gen = _dist(_delta(view.base.histograms.get("generation_len"), view.cur.histograms.get("generation_len")),
                "generations")
    delta_prompt = _delta(base_h, prompt_h)
    assert delta_prompt is not None
    over_2k, _ = share_at_or_above(delta_prompt, 2048)
    over_8k, _ = share_at_or_above(delta_prompt, 8192)
    chain = sorted(chain, key=lambda s: s.timestamp)
    b, note = _burstiness(chain)
    arrived = _arrivals(chain)
    rate = sum(arrived) / view.length_s if arrived and sum(arrived) > 0 else float(qps)
    last = chain[-1].gauges
    return WorkloadProfile(engine, role, view.length_s, prompt.total, rate, b, note, prompt, gen,
                           got.values.get("prefix_cache_hit_rate"), over_2k or 0.0, over_8k or 0.0,
                           _intervals(chain) if len(arrived) == len(chain) - 1 else (), finished_between(chain),
                           round(last.get("running", 0.0) + last.get("waiting", 0.0)))


def _delta(base: HistogramData | None, cur: HistogramData | None) -> HistogramData | None:
    if cur is None:
        return None
    if base is None or base.bounds != cur.bounds:
        return cur
    return HistogramData(cur.bounds, tuple(c - b for c, b in zip(cur.cumulative, base.cumulative, strict=True)),
                         cur.sum - base.sum, cur.count - base.count)


def _buckets(d: LengthDist, top: int) -> list[tuple[float, float, float]]:
    """(count, lower, upper) per bucket, lower >= 1; the +Inf bucket reaches to twice its bound (at most `top`)."""
    out, lower = [], 0.0
    for bound, count in zip(d.bounds, d.counts, strict=True):
        upper = max(lower + 1.0, min(float(top), 2.0 * lower)) if math.isinf(bound) else bound
        out.append((count, max(1.0, lower), max(1.0, lower, upper)))
        lower = bound
    return out


TAIL = 0.05  # density beyond the last non-empty bucket, relative to it: the tail falls off inside that bucket


def _draw_lengths(d: LengthDist, n: int, rng: random.Random, top: int) -> list[int]:
    """n lengths: a bucket by its share (so the twin's histogram is the measured one), then inside it a density
    of log(length) that runs log-linearly between the geometric means of its and its neighbours' densities, then
    scaled (each inside its bucket) so that their mean is the histogram's."""
    buckets = _buckets(d, top)
    dens = [c / math.log(hi / lo) if hi > lo else 0.0 for c, lo, hi in buckets]
    shapes: list[tuple[float, float, float]] = []  # (lower, log width, log-density slope)
    for i, (_, lo, hi) in enumerate(buckets):
        width = math.log(hi / lo) if hi > lo else 0.0
        g = dens[i]
        before = dens[i - 1] if i > 0 and dens[i - 1] > 0 else g * TAIL
        after = dens[i + 1] if i + 1 < len(dens) and dens[i + 1] > 0 else g * TAIL
        k = 0.5 * math.log(after / before) / width if width > 0 and g > 0 else 0.0
        shapes.append((lo, width, k))
    picks = rng.choices(range(len(buckets)), weights=[c for c, _, _ in buckets], k=n)
    raw: list[float] = []
    for i in picks:
        lo, width, k = shapes[i]
        u = rng.random()
        t = u * width if abs(k * width) < 1e-9 else math.log1p(u * math.expm1(k * width)) / k
        raw.append(lo * math.exp(t))
    # The histogram's sum is exact: scale inside the buckets (each length stays in its own) toward its mean.
    for _ in range(4):
        mean = sum(raw) / n if n else 0.0
        if mean <= 0 or abs(mean / d.mean - 1.0) < 0.002:
            break
        f = d.mean / mean
        raw = [min(buckets[i][2], max(buckets[i][1], x * f)) for i, x in zip(picks, raw, strict=True)]
    return [max(1, min(top, math.ceil(x))) for x in raw]


def _replayed(profile: WorkloadProfile, start: float, rng: random.Random) -> list[float]:
    """Arrival offsets after `start` with each read interval's measured count, uniform inside the interval."""
    out: list[float] = []
    for offset, length, n in profile.intervals:
        out += sorted(start + offset + rng.random() * length for _ in range(n))
    return out


def _in_flight(profile: WorkloadProfile, start: float, rng: random.Random) -> list[float]:
    """Arrivals of the requests still inside at the window's end: uniform over its last mean e2e latency."""
    assert profile.finished is not None
    tail = [f for f in profile.finished[-12:] if f.e2e.total]
    mean_e2e = sum(f.e2e.mean * f.e2e.total for f in tail) / max(1, sum(f.e2e.total for f in tail))
    span = min(profile.window_s, max(1.0, mean_e2e))
    end = start + profile.window_s
    return sorted(end - rng.random() * span for _ in range(profile.in_flight_end))


def draw(profile: WorkloadProfile, *, duration_s: float, seed: int = 0, max_len: int = 32768,
         rate_qps: float | None = None, replay_from: float | None = None) -> list[RequestSpec]:
    """Requests like the window's: arrivals at its rate and burstiness (with `replay_from`: synthetic until then,
    then the window's own requests placed where they were, or its arrivals per read interval), lengths from its
    histograms (placed: each interval's own)."""
    rate = profile.rate_qps if rate_qps is None else rate_qps
    share = 0.0
    if profile.prefix_hit_rate and profile.avg_prompt > 0:
        share = min(1.0, profile.prefix_hit_rate * profile.avg_prompt / TEMPLATE_TOKENS)
    rng = random.Random(seed * 7919 + 1)
    placed = (place(profile.finished, start=replay_from, rng=rng, top=max_len)
              if replay_from is not None and profile.finished else [])
    warm_end = duration_s if replay_from is None else replay_from
    if placed:  # the placed requests include those inside at the window's start: synthetic traffic stops before
        warm_end = max(0.0, min(warm_end, placed[0].arrival_s))
    spec = WorkloadSpec(rate_qps=rate, duration_s=warm_end, seed=seed,
                        arrival="poisson" if profile.burstiness is None else "gamma",
                        burstiness=profile.burstiness or 1.0, prefix_share=share, template_tokens=TEMPLATE_TOKENS)
    base = generate(spec) if warm_end > 0 else []
    prompts = _draw_lengths(profile.prompt, len(base), rng, max_len)
    outputs = _draw_lengths(profile.generation, len(base), rng, max_len)
    base = [replace(r, prompt_tokens=p, output_tokens=o) for r, p, o in zip(base, prompts, outputs, strict=True)]
    if replay_from is not None and placed:
        assert profile.finished is not None
        late = _in_flight(profile, replay_from, rng)
        lp = _draw_lengths(profile.prompt, len(late), rng, max_len)
        lo = _draw_lengths(profile.generation, len(late), rng, max_len)
        got = [(p.arrival_s, p.prompt_tokens, p.output_tokens) for p in placed]
        got += list(zip(late, lp, lo, strict=True))
        got.sort()
        extra = generate(replace(spec, duration_s=None, num_requests=len(got), rate_qps=rate, normalize=False,
                                 seed=seed + 1))
        base += [replace(r, arrival_s=t, prompt_tokens=p, output_tokens=o)
                 for r, (t, p, o) in zip(extra, got, strict=True)]
    elif replay_from is not None and profile.intervals:
        times = _replayed(profile, replay_from, rng)
        extra = generate(replace(spec, duration_s=None, num_requests=len(times), rate_qps=rate, normalize=False,
                                 seed=seed + 1))
        ep = _draw_lengths(profile.prompt, len(extra), rng, max_len)
        eo = _draw_lengths(profile.generation, len(extra), rng, max_len)
        base += [replace(r, arrival_s=t, prompt_tokens=p, output_tokens=o)
                 for r, t, p, o in zip(extra, times, ep, eo, strict=True)]
    base.sort(key=lambda r: r.arrival_s)
    return [replace(r, index=i, long=r.prompt_tokens >= 5120, prefix_tokens=min(r.prefix_tokens, r.prompt_tokens))
            for i, r in enumerate(base)]
