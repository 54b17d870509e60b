"""Advice for one engine: its workload, the fitted twin, the candidates predicted, the recommendation."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from collectors.window import window_view
from doctor.advise import AdviseError
from doctor.advise.fit import MAX_FIT_ERROR, fit, judged, too_few
from doctor.advise.read import EngineWindow
from doctor.advise.search import Candidate, best, grid, ranked, search, seed_batch, settings_dict
from doctor.advise.twin import Prediction, Settings, measure, median, run
from doctor.advise.workload import WorkloadProfile, draw, profile_of
from sim.args import EngineArgsError
from sim.engine_types import EngineStartError
from sim.gpu import GpuMemoryError
from sim.workload import RequestSpec

WARMUP_S = 60.0
DRAWS = 4  # workload draws replayed for the fitted settings and the finalist (the median is taken)
FINALISTS = 1  # grid settings (the best on the first draw), besides the current ones, rerun with every draw


@dataclass(frozen=True)
class SearchSpace:
    """What the grid varies; None: around the current value (half, same, double)."""

    max_num_seqs: tuple[int, ...] | None = None
    max_num_batched_tokens: tuple[int, ...] | None = None
    chunked_prefill: tuple[bool, ...] = (True, False)


@dataclass(frozen=True)
class AdviseSettings:
    preset: str
    min_requests: int
    slo: Mapping[str, float]
    space: SearchSpace
    seed: int = 0
    max_fit_error: float = MAX_FIT_ERROR
    pick: Mapping[str, int | bool] | None = None  # a chosen change instead of the twin's best (--pick)
    draws: int = DRAWS


def _around(value: int, low: int = 1) -> tuple[int, ...]:
    return tuple(sorted({max(low, value // 2), value, value * 2}))


def current_settings(w: EngineWindow, preset: str) -> tuple[Settings, list[str]]:
    """The engine's settings as read (config, /server_info, cache_config_info); the preset's where unknown."""
    from sim.presets import get_preset

    p = get_preset(preset)
    notes = []
    seqs, batched = w.config.max_num_seqs, w.config.max_num_batched_tokens
    if seqs is None:
        seqs = p.default_max_num_seqs
        notes.append(f"max_num_seqs unknown (config, /server_info): the twin assumes the preset's {seqs}")
    if batched is None:
        batched = p.default_max_num_batched_tokens
        notes.append(f"max_num_batched_tokens unknown: the twin assumes the preset's {batched}")
    return Settings(preset=preset, max_num_seqs=seqs, max_num_batched_tokens=batched,
                    max_model_len=w.config.max_model_len,
                    tensor_parallel_size=w.config.tensor_parallel_size or 1), notes


def _runner(requests: Sequence[RequestSpec], window_s: float, slo: Mapping[str, float], seed: int
            ) -> Callable[[Settings], Prediction | str]:
    def go(s: Settings) -> Prediction | str:
        try:
            return run(s, requests, warmup_s=WARMUP_S, window_s=window_s, slo=slo, seed=seed)["engine"]
        except (EngineArgsError, EngineStartError, GpuMemoryError, ValueError) as exc:
            return f"the engine would refuse these settings: {exc}"
    return go


@dataclass
class Fitted:
    """What the route search needs of an engine's advice: its workload and its calibrated settings."""

    profile: WorkloadProfile | None = None
    settings: Settings | None = None
    pick: Settings | None = None  # the recommended (or --pick) settings with the fitted time scale


def replay(w: EngineWindow, settings: Settings, slo: Mapping[str, float], seed: int = 0) -> Prediction:
    """The twin with `settings` on the workload of window `w` (its arrivals per read interval, its lengths): what it
    predicts for traffic that came later, e.g. after a change (`doctor advise --apply`)."""
    view = window_view(w.chain)
    profile = profile_of(w.ref.name, w.ref.role, view, w.chain, w.config)
    requests = draw(profile, duration_s=WARMUP_S + view.length_s, seed=seed,
                    max_len=settings.max_model_len or 32768, replay_from=WARMUP_S)
    got = _runner(requests, view.length_s, slo, seed)(settings)
    if isinstance(got, str):
        raise AdviseError(f"{w.ref.name}: {got}")
    return got


def advise_engine(w: EngineWindow, opts: AdviseSettings, keep: Fitted | None = None) -> dict[str, Any]:
    """Everything `doctor advise` says of one engine (the JSON object of schemas/advise.schema.json); `keep`
    receives its workload and calibrated settings when the fit is good."""
    started = time.perf_counter()
    if len(w.chain) < 2:
        raise AdviseError(f"{w.ref.name}: {len(w.chain)} read(s) of /metrics in the window; advice needs two or more "
                          "(give --sample, or let `doctor diagnose` keep snapshots in the state directory)"
                          + (f" ({'; '.join(w.problems)})" if w.problems else ""))
    view = window_view(w.chain)
    profile = profile_of(w.ref.name, w.ref.role, view, w.chain, w.config)
    measured = measure(w.chain, w.config)
    current, notes = current_settings(w, opts.preset)
    twin_window = view.length_s  # the window's own requests, placed where they were (or its arrivals per read)
    requests = [draw(profile, duration_s=WARMUP_S + twin_window, seed=opts.seed + 1009 * k,
                     max_len=current.max_model_len or 32768, replay_from=WARMUP_S) for k in range(opts.draws)]
    runners = [_runner(r, twin_window, opts.slo, opts.seed + k) for k, r in enumerate(requests)]
    runner = runners[0]

    def medianed(s: Settings, first: Prediction | str | None = None) -> Prediction | str:
        """The median over every draw (`first`: draw 0's run, when already made)."""
        got = first if first is not None else runner(s)
        if isinstance(got, str) or len(runners) == 1:
            return got
        return median([got, *[g for r in runners[1:] if not isinstance(g := r(s), str)]])

    def strict(s: Settings) -> Prediction:
        got = runner(s)
        if isinstance(got, str):
            raise AdviseError(f"{w.ref.name}: the twin cannot run the current settings: {got}")
        return got

    out: dict[str, Any] = {
        "engine": w.ref.name, "role": w.ref.role, "model": w.model, "preset": opts.preset, "notes": notes,
        "problems": list(w.problems), "workload": profile.to_dict(), "measured": measured.to_dict(),
        "slo": dict(opts.slo),
    }
    if measured.requests < opts.min_requests:  # before any twin run: nothing to fit
        out.update(fit=None, withheld=too_few(measured.requests, opts.min_requests), current=None, seed_rules=None,
                   twin_best=None, grid=[], recommendation=None, took_s=round(time.perf_counter() - started, 3))
        return out
    fitted = fit(current, measured, strict, requests=measured.requests, min_requests=opts.min_requests,
                 max_error=opts.max_fit_error)  # the scale on draw 0
    first_draw = fitted.predicted
    if opts.draws > 1 and fitted.errors and measured.requests >= opts.min_requests:
        med = medianed(fitted.settings, fitted.predicted)
        assert not isinstance(med, str)
        fitted = judged(fitted, med, measured, requests=measured.requests, min_requests=opts.min_requests,
                        extra_runs=opts.draws - 1)
    out.update(fit=fitted.to_dict(), withheld=fitted.withheld)
    if fitted.withheld is not None:
        out.update(current=None, seed_rules=None, twin_best=None, grid=[], recommendation=None,
                   took_s=round(time.perf_counter() - started, 3))
        return out
    base = fitted.settings
    if keep is not None:
        keep.profile, keep.settings = profile, base
    cur = Candidate("current", base, fitted.predicted)
    batch, rule = seed_batch(profile)
    seed_s = replace(base, max_num_seqs=batch)
    seed_got = runner(seed_s)
    seed_c = Candidate("seed rules", seed_s, None if isinstance(seed_got, str) else seed_got,
                       rule if not isinstance(seed_got, str) else f"{rule}; {seed_got}")
    space = opts.space
    seqs = space.max_num_seqs or _around(base.max_num_seqs or 1)
    batched = space.max_num_batched_tokens or _around(base.max_num_batched_tokens or 2048, 256)
    candidates = [s for s in grid(base, seqs, batched, space.chunked_prefill) if s != base]
    tried = search(base, candidates, runner)  # draw 0; the finalists then with every draw
    finalists = ranked(Candidate("current", base, first_draw), tried)[:FINALISTS] if opts.draws > 1 else []
    again = {c.settings: medianed(c.settings, c.predicted) for c in finalists}
    tried = [replace(c, predicted=got) if isinstance(got := again.get(c.settings, c.predicted), Prediction) else c
             for c in tried]
    pool = [c for c in tried if c.settings in again] if again else tried
    pick = best(cur, [cur, *pool])
    if opts.pick:
        chosen = replace(base, **opts.pick)  # type: ignore[arg-type]
        known = [c for c in tried if c.settings == chosen]
        got = medianed(chosen, known[0].predicted if known else None)
        if isinstance(got, str) or got is None:
            raise AdviseError(f"{w.ref.name}: --pick {settings_dict(chosen)['vllm_flags']}: {got}")
        pick = Candidate("twin best", chosen, got, "chosen with --pick (not necessarily the twin's best)")
    flags = " ".join(pick.settings.vllm_flags())
    if keep is not None:
        keep.pick = pick.settings
    out.update(
        current=cur.to_dict(), seed_rules=seed_c.to_dict(), twin_best=pick.to_dict(),
        grid=[c.to_dict() for c in tried], draws=opts.draws,
        finalists=[settings_dict(c.settings)["vllm_flags"] for c in finalists],
        recommendation={"change": pick.settings != base, **settings_dict(pick.settings),
                        "serve_line": f"vllm serve {w.model or 'MODEL'} {flags}"},
        took_s=round(time.perf_counter() - started, 3),
    )
    return out
