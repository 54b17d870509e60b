"""`doctor advise`: read the engines' window, fit a twin to each, search settings on it, print the advice.

Exit 0 advice given for every engine, 1 withheld for at least one (the fit is poor or traffic too thin),
3 the doctor could not advise (bad flags or config, nothing readable).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import httpx

from doctor.advise import AdviseError
from doctor.advise.engine import DRAWS, AdviseSettings, Fitted, SearchSpace, advise_engine, replay
from doctor.advise.read import EngineWindow, Sleep, read_windows
from doctor.advise.report import render
from doctor.advise.route import search_route
from doctor.durations import DurationError, parse_duration
from doctor.engines import EngineRef, EngineSpecError, engines_from_flags

MIN_REQUESTS = 200


class UsageError(AdviseError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor advise", description=(
        "Settings for the traffic the engines actually get: the workload from their histograms, a sim twin fitted "
        "to their measured latencies, and a small grid of --max-num-seqs, --max-num-batched-tokens and chunked "
        "prefill searched on the twin, beside the seed article's rules. Exit 0 advice given, 1 withheld (poor fit "
        "or too little traffic), 3 could not advise."))
    p.add_argument("--config", type=Path, help="doctor.toml: engines, their arguments and SLOs, the state directory")
    p.add_argument("--engine", action="append", default=[], metavar="NAME=URL", help="an engine (repeatable)")
    p.add_argument("--sample", help="read the engines for this long now (e.g. 5m); default: only the snapshots "
                   "`doctor diagnose` kept in the state directory, closed by one read")
    p.add_argument("--every", default="5s", help="with --sample: between reads; with --prometheus: the step of its "
                   "history (default 5s; at most 720 steps)")
    p.add_argument("--prometheus", metavar="URL", help="read the window from this Prometheus server's history "
                   "(with --since) instead of the engines: the same series, selected by instance or the config's "
                   "selector")
    p.add_argument("--since", help="with --prometheus: the window, e.g. 1h (default 1h)")
    p.add_argument("--window", default="20m", help="the window of kept snapshots to use (default 20m)")
    p.add_argument("--state-dir", type=Path, help="where `doctor diagnose` keeps snapshots (default: the config's)")
    p.add_argument("--preset", default="a100-13b", help="the sim preset that stands in for the model and GPU "
                   "(doctor sim engine --help lists them); its step-time scale is fitted")
    p.add_argument("--min-requests", type=int, default=MIN_REQUESTS,
                   help=f"withhold advice for a window with fewer finished requests (default {MIN_REQUESTS})")
    p.add_argument("--max-fit-error", type=float, default=0.25, help="withhold advice when the twin misses a measured "
                   "P50/P99 TTFT, e2e or throughput by more than this share (default 0.25)")
    p.add_argument("--max-num-seqs-grid", help="values to try, e.g. 32,64,128 (default: half, same, double)")
    p.add_argument("--batched-tokens-grid", help="values to try, e.g. 2048,4096 (default: half, same, double)")
    p.add_argument("--chunked-grid", default="on,off", help="chunked prefill settings to try (default on,off)")
    p.add_argument("--route-grid", help="with a hot and a cold engine: route thresholds to try besides the current "
                   "one and the seed's 5120 (default 2048,8192)")
    p.add_argument("--seed", type=int, default=0, help="the twin's workload draw")
    p.add_argument("--draws", type=int, default=DRAWS, help="workload draws (seeds) replayed for the fitted settings "
                   f"and the best few grid settings, the median taken (default {DRAWS}; 1 is fastest, noisiest)")
    p.add_argument("--request-timeout", default="5s", help="timeout of each HTTP read (default 5s)")
    p.add_argument("--checklist", action="store_true", help="the seed's pre-flight checklist instead: CUDA, "
                   "fragmentation, the router's fairness window and threshold, the alert rules in Prometheus, "
                   "quantization A/B evidence, warm-up; each with its verdict and how it was checked (exit 1 when "
                   "an item fails)")
    p.add_argument("--apply", action="store_true", help="apply the recommended change through the remediation path "
                   "(`doctor diagnose --fix`'s: the mode, approval, guardrails, the launcher's relaunch, blue/green "
                   "where spare GPUs exist), then read the engine again and record the prediction error in the "
                   "audit log")
    p.add_argument("--pick", help="a chosen change instead of the twin's best, e.g. max_num_seqs=8 (keys max_num_seqs, "
                   "max_num_batched_tokens): predicted on the twin and, with --apply, applied and checked; measures "
                   "the twin's trust on a change of your choosing")
    p.add_argument("--yes", action="store_true", help="with --apply in approve mode: approve from this terminal")
    p.add_argument("--mode", choices=("observe", "dry-run", "approve", "auto"),
                   help="with --apply: the remediation mode for this run (default: the config's, else observe)")
    p.add_argument("--check-window", help="with --apply: how long to read the engine after the change (default: "
                   "--sample's length, else 5m)")
    p.add_argument("--settle", default="10s", help="with --apply: wait this long after the new engine is healthy "
                   "and warmed up before the check window opens (default 10s)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    return p


def _ints(text: str | None, flag: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"doctor advise: error: {flag} {text!r}: expected whole numbers like 32,64,128") from None
    if not values or min(values) < 1:
        raise UsageError(f"doctor advise: error: {flag} {text!r}: give one or more values >= 1")
    return values


def _pick(text: str | None) -> dict[str, int] | None:
    if text is None:
        return None
    out: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_").lstrip("_")
        if not sep or key not in ("max_num_seqs", "max_num_batched_tokens") or not value.strip().isdigit() \
                or int(value) < 1:
            raise UsageError(f"doctor advise: error: --pick {text!r}: expected max_num_seqs=N and/or "
                             "max_num_batched_tokens=N (whole numbers >= 1), comma-separated")
        out[key] = int(value)
    return out


def _chunked(text: str) -> tuple[bool, ...]:
    words = {"on": True, "off": False}
    try:
        return tuple(dict.fromkeys(words[w.strip()] for w in text.split(",")))
    except KeyError:
        raise UsageError(f"doctor advise: error: --chunked-grid {text!r}: expected on, off or on,off") from None


def _engines(ns: argparse.Namespace) -> tuple[list[EngineRef], Any]:
    settings = None
    if ns.config is not None:
        from doctor.config import ConfigError, load_config

        try:
            settings = load_config(ns.config)
        except ConfigError as exc:
            raise UsageError(f"doctor advise: {exc}") from None
    try:
        flags = engines_from_flags(ns.engine)
    except EngineSpecError as exc:
        raise UsageError(f"doctor advise: error: {exc}") from None
    if settings is None and not flags:
        raise UsageError("doctor advise: error: name at least one engine with --engine NAME=URL (or --config)")
    from doctor.config import DoctorConfig
    from doctor.config_merge import merge_flags

    merged = merge_flags(settings if settings is not None else DoctorConfig(), flags)
    return merged.engine_refs(), merged


def _route(windows: Sequence[EngineWindow], kept: dict[str, Fitted], config: Any, ns: argparse.Namespace
           ) -> dict[str, Any] | None:
    """The route threshold search when exactly one hot and one cold engine are both fitted; else why not."""
    hot = [w.ref.name for w in windows if w.ref.role == "hot"]
    cold = [w.ref.name for w in windows if w.ref.role == "cold"]
    if len(hot) != 1 or len(cold) != 1:
        return None
    h, c = kept[hot[0]], kept[cold[0]]
    if h.settings is None or c.settings is None:
        return {"skipped": "the hot and the cold engine both need a good fit for the route threshold search"}
    return search_route(h, c, current=config.long_prompt_tokens, thresholds=_ints(ns.route_grid, "--route-grid")
                        or (2048, 8192), slo_hot=config.slo_for(hot[0]), slo_cold=config.slo_for(cold[0]),
                        seed=ns.seed)


def _checklist(ns: argparse.Namespace, engines: list[EngineRef], config: Any, out: TextIO,
               sync_transport: httpx.BaseTransport | None, nvml: Any | None) -> int:
    from doctor.advise.checklist import expected_rules, render_checklist, run_checklist

    state_dir = ns.state_dir or config.state_dir
    if state_dir is None:
        from doctor.state import default_state_dir

        state_dir = default_state_dir()
    doc = run_checklist(config, engines, state_dir=state_dir, transport=sync_transport, nvml=nvml,
                        expected_rules=expected_rules())
    out.write(json.dumps(doc, indent=2) + "\n" if ns.format == "json" else render_checklist(doc))
    return 1 if doc["failed"] else 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None,
         transport: httpx.AsyncBaseTransport | None = None, clock: Callable[[], float] = time.time,
         sleep: Sleep | None = None, sync_transport: httpx.BaseTransport | None = None, nvml: Any | None = None
         ) -> int:
    """The command; tests substitute only the I/O (transports, clock, sleep, the NVML module)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        engines, config = _engines(ns)
        if ns.checklist:
            return _checklist(ns, engines, config, out, sync_transport, nvml)
        try:
            sample_s = parse_duration(ns.sample) if ns.sample else 0.0
            every_s = parse_duration(ns.every)
            window_s = parse_duration(ns.window)
            timeout_s = parse_duration(ns.request_timeout)
        except DurationError as exc:
            raise UsageError(f"doctor advise: error: {exc}") from None
        if every_s <= 0 or window_s <= 0 or timeout_s <= 0:
            raise UsageError("doctor advise: error: --every, --window and --request-timeout must be > 0")
        if not 0 < ns.max_fit_error < 100:
            raise UsageError("doctor advise: error: --max-fit-error must be a share > 0, e.g. 0.25")
        if ns.draws < 1:
            raise UsageError("doctor advise: error: --draws must be >= 1")
        if ns.min_requests < 1:
            raise UsageError("doctor advise: error: --min-requests must be >= 1")
        apply_opts = _apply_options(ns, sample_s, every_s, timeout_s) if ns.apply else None
        if apply_opts is None and (ns.yes or ns.mode or ns.check_window):
            raise UsageError("doctor advise: error: --yes, --mode and --check-window only make sense with --apply")
        if ns.mode is not None:
            config = dataclasses.replace(config, mode=ns.mode)
        from sim.presets import UnknownPresetError, get_preset

        try:
            get_preset(ns.preset)
        except UnknownPresetError as exc:
            raise UsageError(f"doctor advise: error: --preset: {exc}") from None
        pick = _pick(ns.pick)
        space = SearchSpace(_ints(ns.max_num_seqs_grid, "--max-num-seqs-grid"),
                            _ints(ns.batched_tokens_grid, "--batched-tokens-grid"), _chunked(ns.chunked_grid))
        state_dir = ns.state_dir or config.state_dir
        if state_dir is None and not ns.sample:
            from doctor.state import default_state_dir

            state_dir = default_state_dir()
        started = time.perf_counter()
        prom = ns.prometheus or (config.prometheus_url if ns.since else None)
        if ns.since and not prom:
            raise UsageError("doctor advise: error: --since needs --prometheus URL (history comes from Prometheus)")
        if prom and ns.sample:
            raise UsageError("doctor advise: error: --prometheus reads history; --sample reads the engines now: "
                             "give one")
        if prom:
            from doctor.advise.read import read_prometheus_windows

            try:
                since_s = parse_duration(ns.since or "1h")
            except DurationError as exc:
                raise UsageError(f"doctor advise: error: {exc}") from None
            if since_s <= 0:
                raise UsageError("doctor advise: error: --since must be > 0")
            windows = read_prometheus_windows(engines, url=prom, since_s=since_s, step_s=every_s, clock=clock,
                                              timeout_s=timeout_s)
        else:
            windows = asyncio.run(read_windows(engines, state_dir=state_dir, sample_s=sample_s, every_s=every_s,
                                               window_s=window_s, timeout_s=timeout_s, clock=clock,
                                               sleep=sleep or asyncio.sleep, transport=transport))
    except AdviseError as exc:
        print(str(exc), file=err)
        return 3
    results: list[dict[str, Any]] = []
    kept: dict[str, Fitted] = {}
    for w in windows:
        opts = AdviseSettings(ns.preset, ns.min_requests, config.slo_for(w.ref.name), space, ns.seed,
                              ns.max_fit_error, pick, ns.draws)
        kept[w.ref.name] = Fitted()
        try:
            results.append(advise_engine(w, opts, kept[w.ref.name]))
        except AdviseError as exc:
            results.append({"engine": w.ref.name, "role": w.ref.role, "preset": ns.preset, "error": str(exc)})
    doc: dict[str, Any] = {"schema": "serving-doctor/advise/1", "engines": results,
                           "route": _route(windows, kept, config, ns)}
    doc["took_s"] = round(time.perf_counter() - started, 3)
    if apply_opts is not None:
        from doctor.advise.apply import apply_advice
        from doctor.remedy.setup import remediator

        rem = remediator(config, state_dir or _default_state_dir(), clock=clock, transport=transport,
                         sleep=sleep or asyncio.sleep, engines=engines)
        def again(name: str, w: EngineWindow) -> Any:
            picked = kept[name].pick
            if picked is None:
                return "no fitted settings to replay"
            try:
                return replay(w, picked, config.slo_for(name), ns.seed)
            except AdviseError as exc:
                return str(exc)

        asyncio.run(apply_advice(results, windows, rem, apply_opts, clock=clock, sleep=sleep or asyncio.sleep,
                                 transport=transport, replay=again))
    out.write(json.dumps(doc, indent=2, allow_nan=False) + "\n" if ns.format == "json" else render(doc))
    if all("error" in r for r in results):
        return 3
    if any((r.get("applied") or {}).get("status") in ("failed", "rolled_back") for r in results):
        return 2
    return 1 if any(r.get("withheld") or r.get("error") for r in results) else 0


def _default_state_dir() -> Path:
    from doctor.state import default_state_dir

    return default_state_dir()


def _apply_options(ns: argparse.Namespace, sample_s: float, every_s: float, timeout_s: float) -> Any:
    from doctor.advise.apply import ApplyOptions

    try:
        check_s = parse_duration(ns.check_window) if ns.check_window else (sample_s or 300.0)
        settle_s = parse_duration(ns.settle)
    except DurationError as exc:
        raise UsageError(f"doctor advise: error: {exc}") from None
    if check_s <= 0 or settle_s < 0:
        raise UsageError("doctor advise: error: --check-window must be > 0 and --settle >= 0")
    return ApplyOptions(ns.yes, check_s, every_s, settle_s, timeout_s, ns.min_requests)
