"""`doctor sim load`: drive an OpenAI-compatible server (the sim or a real vLLM) with a workload.

Exit codes: 0 when the run finished (some requests may have failed), 1 when the target cannot be
reached or every request failed, 2 for bad flags or a bad trace file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

import httpx

from sim.loadgen import (
    LoadProgress,
    TargetError,
    fetch_models,
    format_summary,
    normalize_base_url,
    run_load,
    summarize,
)
from sim.workload import (
    WORKLOAD_PRESETS,
    RequestSpec,
    TraceError,
    WorkloadSpec,
    generate,
    load_trace,
    workload_preset,
)

PROG = "doctor sim load"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() returns the code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1], got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def _step(text: str) -> tuple[float, float, float | None]:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected T:MULT or T:MULT:LONG_SHARE, got {text!r}")
    try:
        t, m = float(parts[0]), float(parts[1])
        share = float(parts[2]) if len(parts) == 3 and parts[2] != "" else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers in {text!r}") from None
    if not (t >= 0 and m >= 0 and math.isfinite(t) and math.isfinite(m)):
        raise argparse.ArgumentTypeError(f"time and multiplier must be >= 0 in {text!r}")
    if share is not None and not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"long share must be within [0, 1] in {text!r}")
    return (t, m, share)


def _slo(text: str) -> tuple[str, float]:
    key, sep, value = text.partition(":")
    if not sep or key not in ("ttft", "tpot", "e2el"):
        raise argparse.ArgumentTypeError(f"expected ttft:MS, tpot:MS or e2el:MS, got {text!r}")
    return key, _positive_float(value)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `doctor sim load`."""
    d = WorkloadSpec()
    p = _Parser(
        prog=PROG,
        description="Send a synthetic or replayed workload to an OpenAI-compatible server (the sim or "
        "a real vLLM) and report latencies like `vllm bench serve`.",
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://localhost:8000")
    p.add_argument("--model", help="model name to request (default: the first one /v1/models lists)")
    w = p.add_argument_group("workload")
    w.add_argument(
        "--preset",
        choices=WORKLOAD_PRESETS,
        help="start from a workload preset of sim-model.md §3.5 (flags below still override)",
    )
    w.add_argument("--rate", type=_positive_float, default=None,
                   help=f"mean request rate in requests/s; 'inf' sends all at once (default {d.rate_qps:g})")
    size = w.add_mutually_exclusive_group()
    size.add_argument("--duration", type=_positive_float,
                      help=f"seconds of arrivals (default {d.duration_s:g})")
    size.add_argument("--num-prompts", type=_positive_int,
                      help="send exactly this many requests (with --trace: its first N)")
    w.add_argument("--arrival", choices=("poisson", "gamma"), help="arrival process (default poisson)")
    w.add_argument("--burstiness", type=_positive_float,
                   help="gamma shape as vLLM's --burstiness: CV = 1/sqrt(B); < 1 is burstier; implies "
                   "--arrival gamma (default 1)")
    w.add_argument("--prompt-median", type=_positive_float,
                   help=f"median prompt tokens of the lognormal body (default {d.prompt_median:g})")
    w.add_argument("--prompt-sigma", type=float,
                   help=f"lognormal sigma of prompts (default {d.prompt_sigma:g})")
    w.add_argument("--prompt-cap", type=_positive_int, help=f"largest short prompt (default {d.prompt_cap})")
    w.add_argument("--long-share", type=_share,
                   help="share of prompts drawn uniformly from [--long-min, --long-max] (default 0)")
    w.add_argument("--long-min", type=_positive_int, help=f"shortest long prompt (default {d.long_min})")
    w.add_argument("--long-max", type=_positive_int, help=f"longest long prompt (default {d.long_max})")
    w.add_argument("--long-threshold", type=_positive_int,
                   help=f"prompts at least this long count as class 'long' (default {d.long_threshold})")
    w.add_argument("--output-median", type=_positive_float,
                   help=f"median output tokens (default {d.output_median:g})")
    w.add_argument("--output-sigma", type=float,
                   help=f"lognormal sigma of outputs (default {d.output_sigma:g})")
    w.add_argument("--output-cap", type=_positive_int, help=f"largest output (default {d.output_cap})")
    w.add_argument("--prefix-share", type=_share,
                   help="share of requests starting with a shared template (prefix caching; default 0)")
    w.add_argument("--templates", type=_positive_int,
                   help=f"number of shared templates (default {d.n_templates})")
    w.add_argument("--template-tokens", type=_positive_int,
                   help=f"tokens per shared template (default {d.template_tokens})")
    w.add_argument("--step", type=_step, action="append", metavar="T:MULT[:LONG_SHARE]",
                   help="incident step: from T s on, rate = --rate × MULT and optionally the long share "
                   "changes (repeatable), e.g. --step 60:2 for a surge, --step 60:1:0.25 for a long storm")
    w.add_argument("--seed", type=int, default=0, help="random seed of the workload and prompts (default 0)")
    w.add_argument("--trace", help="replay a trace file instead (Azure, BurstGPT or generic CSV; Mooncake or "
                   "generic JSONL); the synthetic-workload flags are then ignored")
    w.add_argument("--time-scale", type=_positive_float, default=1.0,
                   help="multiply trace arrival offsets by this (0.5 replays twice as fast; default 1)")
    r = p.add_argument_group("requests")
    r.add_argument("--api", choices=("completions", "chat"), default="completions",
                   help="completions sends token-id prompts of exact length; chat sends text "
                   "(default completions)")
    r.add_argument("--no-stream", action="store_true", help="do not stream (TTFT then equals E2E, no ITLs)")
    r.add_argument("--max-concurrency", type=_positive_int, help="cap on requests in flight (default none)")
    r.add_argument("--ignore-eos", action="store_true",
                   help="send ignore_eos so every request runs to its drawn length and finishes `length` "
                   "(as `vllm bench serve --ignore-eos`); default: it ends by EOS there (`stop`)")
    r.add_argument("--timeout", type=_positive_float, default=600.0,
                   help="seconds after which a request counts as failed (default 600)")
    r.add_argument("--vocab-size", type=_positive_int, default=32000,
                   help="token ids of prompts are drawn below this (default 32000)")
    o = p.add_argument_group("output")
    o.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    o.add_argument("--goodput", type=_slo, nargs="+", metavar="KEY:MS",
                   help="SLOs for goodput, as vllm bench serve: ttft:MS tpot:MS e2el:MS")
    o.add_argument("--percentiles", default="99",
                   help="comma-separated latency percentiles to report (default 99)")
    o.add_argument("--progress-every", type=_positive_float, default=5.0,
                   help="seconds between progress lines on stderr (default 5)")
    o.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


_SPEC_FLAGS = {
    "arrival": "arrival", "burstiness": "burstiness", "prompt_median": "prompt_median",
    "prompt_sigma": "prompt_sigma", "prompt_cap": "prompt_cap", "long_share": "long_share",
    "long_min": "long_min", "long_max": "long_max", "long_threshold": "long_threshold",
    "output_median": "output_median", "output_sigma": "output_sigma", "output_cap": "output_cap",
    "prefix_share": "prefix_share", "templates": "n_templates", "template_tokens": "template_tokens",
}


def workload_from_args(args: argparse.Namespace) -> list[RequestSpec]:
    """The request list the flags describe; raises ValueError or TraceError."""
    if args.trace:
        threshold = args.long_threshold or WorkloadSpec().long_threshold
        reqs = load_trace(args.trace, time_scale=args.time_scale, long_threshold=threshold)
        return reqs[: args.num_prompts] if args.num_prompts else reqs
    rate = args.rate if args.rate is not None else WorkloadSpec().rate_qps
    if math.isinf(rate) and not args.num_prompts:
        raise ValueError("--rate inf sends everything at once and needs --num-prompts")
    duration = args.duration if args.duration is not None else WorkloadSpec().duration_s
    if args.preset:
        base = workload_preset(args.preset, rate_qps=rate, duration_s=duration or 60.0, seed=args.seed)
    else:
        base = WorkloadSpec(rate_qps=1.0, seed=args.seed)
    fields: dict[str, Any] = {"rate_qps": rate, "seed": args.seed}
    if args.num_prompts:
        fields |= {"num_requests": args.num_prompts, "duration_s": None}
    else:
        fields |= {"num_requests": None, "duration_s": duration}
    for flag, name in _SPEC_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            fields[name] = value
    if args.arrival is None and args.burstiness is not None and args.burstiness != 1.0:
        fields["arrival"] = "gamma"  # --burstiness alone implies gamma arrivals
    if args.step:
        fields["schedule"] = tuple(sorted(args.step, key=lambda s: s[0]))
    spec = WorkloadSpec(**(_spec_fields(base) | fields))
    return generate(spec)


def _spec_fields(spec: WorkloadSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in WorkloadSpec.__dataclass_fields__}


def _print_progress(stream: TextIO) -> Callable[[LoadProgress], None]:
    def report(p: LoadProgress) -> None:
        print(
            f"[{p.elapsed_s:7.1f}s] sent {p.sent}/{p.total}  completed {p.completed}  "
            f"failed {p.failed}  in flight {p.in_flight}",
            file=stream,
            flush=True,
        )

    return report


async def _run(args: argparse.Namespace, requests: list[RequestSpec], percentiles: list[float]) -> int:
    base = normalize_base_url(args.url)
    limit = args.max_concurrency or None
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(args.timeout, connect=min(args.timeout, 30.0)),
        limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
    ) as client:
        try:
            models = await fetch_models(client, base, timeout_s=min(args.timeout, 30.0))
        except TargetError as exc:
            if args.model is None or "cannot reach" in str(exc):
                hint = "" if args.model else " (or pass --model)"
                print(f"{PROG}: error: {exc}{hint}", file=sys.stderr)
                return 1
            print(f"{PROG}: warning: {exc}; sending to model {args.model!r} anyway", file=sys.stderr)
            models = [args.model]
        model = args.model or models[0]
        if model not in models:
            print(f"{PROG}: warning: {base} serves {', '.join(models)}, not {model!r}", file=sys.stderr)
        if not args.quiet:
            last = requests[-1].arrival_s if requests else 0.0
            print(
                f"{PROG}: {len(requests)} requests over {last:.1f} s to {base} ({model}, {args.api})",
                file=sys.stderr,
            )
        result = await run_load(
            base,
            requests,
            model=model,
            api=args.api,
            stream=not args.no_stream,
            max_concurrency=args.max_concurrency,
            timeout_s=args.timeout,
            seed=args.seed,
            use_token_ids=True,
            vocab_size=args.vocab_size,
            ignore_eos=args.ignore_eos,
            client=client,
            progress=None if args.quiet else _print_progress(sys.stderr),
            progress_interval_s=args.progress_every,
        )
    slo = dict(args.goodput) if args.goodput else None
    summary = summarize(result, goodput_slo=slo, percentiles=percentiles)
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
    failed = [r for r in result.results if not r.success]
    if result.results and len(failed) == len(result.results):
        print(f"{PROG}: error: all {len(failed)} requests failed; first: {failed[0].error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run `doctor sim load` with argv (default: sys.argv[1:]); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    try:
        percentiles = [float(x) for x in args.percentiles.split(",") if x.strip()]
        if not percentiles or not all(0 < x < 100 for x in percentiles):
            raise ValueError
    except ValueError:
        print(f"{PROG}: error: --percentiles must be numbers in (0, 100), got {args.percentiles!r}",
              file=sys.stderr)
        return 2
    try:
        requests = workload_from_args(args)
    except (TraceError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, requests, percentiles))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
