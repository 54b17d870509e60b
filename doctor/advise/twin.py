"""The twin: a sim engine (sim.harness, virtual time) with an engine's settings, replaying a workload.

What the twin predicts is read the way the live engine is read: its /metrics text through
`collectors.scrape.parse_metrics`, a window over the reads (`collectors.window.window_view`) and the
collectors' derivations, so measured and predicted figures carry the same histogram buckets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from collectors.derive import derive_window
from collectors.scrape import parse_metrics
from collectors.types import EngineConfigView, MetricsSnapshot
from collectors.window import window_view
from sim.harness import ClientRecord, Harness
from sim.workload import RequestSpec

READ_EVERY_S = 5.0
METRICS = ("mean_ttft_s", "mean_itl_s", "mean_e2e_s", "p50_ttft_s", "p99_ttft_s", "p50_e2e_s", "p99_e2e_s", "qps",
           "generation_tokens_per_s")
MEANS = {"mean_ttft_s": "ttft", "mean_itl_s": "itl", "mean_e2e_s": "e2e"}


@dataclass(frozen=True)
class Settings:
    """The engine arguments the twin (and the advice) varies; the rest is the preset's."""

    preset: str = "a100-13b"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    time_scale: float = 1.0  # the fitted step-time scale (a sim flag, never on the `vllm serve` line)

    def vllm_flags(self) -> list[str]:
        """The `vllm serve` flags these settings set (sim flags left out)."""
        out: list[str] = []
        for flag, value in (("--max-num-seqs", self.max_num_seqs),
                            ("--max-num-batched-tokens", self.max_num_batched_tokens),
                            ("--max-model-len", self.max_model_len),
                            ("--gpu-memory-utilization", self.gpu_memory_utilization)):
            if value is not None:
                out += [flag, str(value)]
        if self.tensor_parallel_size != 1:
            out += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        out.append("--enable-chunked-prefill" if self.enable_chunked_prefill else "--no-enable-chunked-prefill")
        if not self.enable_prefix_caching:
            out.append("--no-enable-prefix-caching")
        return out

    def argv(self) -> list[str]:
        return ["twin", "--preset", self.preset, "--time-scale", repr(self.time_scale), *self.vllm_flags()]


@dataclass(frozen=True)
class Prediction:
    """What the twin (or a measured window) shows: the METRICS, KV use, and goodput within the SLOs."""

    values: Mapping[str, float | None]
    kv_usage_max: float | None
    goodput_qps: float | None
    requests: int

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def to_dict(self) -> dict[str, object]:
        return {**{k: _round(v) for k, v in self.values.items()}, "kv_usage_max": _round(self.kv_usage_max),
                "kv_headroom": None if self.kv_usage_max is None else _round(1.0 - self.kv_usage_max),
                "goodput_qps": _round(self.goodput_qps), "requests": self.requests}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 5)


def measure(chain: Sequence[MetricsSnapshot], config: EngineConfigView) -> Prediction:
    """The METRICS over a chain of reads (oldest first), as the doctor derives them."""
    view = window_view(chain)
    got = derive_window(view.base, view.cur, config, gauges=view.gauges, resets=view.resets)
    kv = view.gauges.get("kv_cache_usage")
    requests = int(sum(v for k, v in view.cur.counters.items() if k.startswith("request_success{"))
                   - sum(v for k, v in view.base.counters.items() if k.startswith("request_success{")))
    values = dict(got.values)
    for name, hist in MEANS.items():  # exact, from the histograms' sums: no bucket interpolation
        cur, base = view.cur.histograms.get(hist), view.base.histograms.get(hist)
        n = (cur.count - (base.count if base else 0.0)) if cur else 0.0
        values[name] = (cur.sum - (base.sum if base else 0.0)) / n if cur and n > 0 else None
    return Prediction({m: values.get(m) for m in METRICS}, None if kv is None else kv.maximum, None, requests)


def goodput(records: Sequence[ClientRecord], since: float, until: float, slo: Mapping[str, float]) -> float | None:
    """Requests per second finished in [since, until) within the TTFT and e2e SLOs (each request against the
    configured bound: a P99 SLO read per request, as `vllm bench serve --goodput` does)."""
    span = until - since
    if span <= 0:
        return None
    ok = 0
    for r in records:
        if r.finished is None or r.error or not since <= r.finished < until:
            continue
        ttft, e2e = r.ttft, r.e2e
        if ttft is None or e2e is None:
            continue
        if ttft > slo.get("p99_ttft_s", slo.get("p95_ttft_s", float("inf"))):
            continue
        if e2e > slo.get("p99_e2e_s", float("inf")):
            continue
        ok += 1
    return ok / span


def run(settings: Settings, requests: Sequence[RequestSpec], *, warmup_s: float, window_s: float,
        slo: Mapping[str, float] | None = None, seed: int = 0, router_threshold: int | None = None,
        cold: Settings | None = None) -> dict[str, Prediction]:
    """Replay `requests` on one engine (or hot and cold split at `router_threshold`); measure the window
    [warmup_s, warmup_s + window_s] of each engine."""
    harness = Harness(seed=seed)
    names = ["engine"] if cold is None or router_threshold is None else ["hot", "cold"]
    harness.add_engine(names[0], settings.argv())
    if len(names) == 2 and cold is not None and router_threshold is not None:
        harness.add_engine("cold", cold.argv(), env={"CUDA_VISIBLE_DEVICES": "1"})  # its own GPU, as deployed
        threshold = router_threshold
        harness.load(requests, router=lambda s: "cold" if s.prompt_tokens >= threshold else "hot")
    else:
        harness.load(requests)
    for n in names:  # the twin is an engine long past its start: no batch size pays the cold start in its window
        harness.engines[n].core.seen_batch_classes.update(1 << i for i in range(21))
    harness.run_for(warmup_s)
    chains: dict[str, list[MetricsSnapshot]] = {n: [] for n in names}
    since = harness.now
    end = since + window_s
    while True:
        for n in names:
            chains[n].append(parse_metrics(harness.metrics_text(n), harness.now))
        if harness.now >= end - 1e-9:
            break
        harness.run_until(min(end, harness.now + READ_EVERY_S))
    out: dict[str, Prediction] = {}
    for n in names:
        core = harness.engines[n].core.config
        view = EngineConfigView(max_num_seqs=core.max_num_seqs, max_num_batched_tokens=core.max_num_batched_tokens)
        p = measure(chains[n], view)
        records = [r for r in harness.records if r.engine == n]
        out[n] = replace(p, goodput_qps=goodput(records, since, end, slo or {}))
    return out


def median(predictions: Sequence[Prediction]) -> Prediction:
    """Per figure, the median over twin runs of several workload draws (a figure missing from a run is left out)."""
    def mid(values: list[float]) -> float | None:
        if not values:
            return None
        v = sorted(values)
        n = len(v)
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2

    if len(predictions) == 1:
        return predictions[0]
    values = {m: mid([x for p in predictions if (x := p.get(m)) is not None]) for m in METRICS}
    return Prediction(values, mid([p.kv_usage_max for p in predictions if p.kv_usage_max is not None]),
                      mid([p.goodput_qps for p in predictions if p.goodput_qps is not None]),
                      int(mid([float(p.requests) for p in predictions]) or 0))
