"""`doctor advise --checklist`: the seed article's pre-flight list (工程检查清单), each item with a verdict and how it
was checked, or why it could not be. Verdicts: pass, fail, ask (a person must supply evidence), unknown (not
checkable from here; the reason says why). Only fail counts in the exit code (1)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CUDA_MIN = (11, 8)
FRAGMENTATION_MAX = 0.15
FAIRNESS_WINDOW = 10
SEED_THRESHOLD = 5120
MISROUTE_ALERT = "RouterMisrouteShare"
HISTORY_S = 3600.0


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    verdict: str  # pass | fail | ask | unknown
    source: str  # how it was checked, or why it could not be

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "verdict": self.verdict, "source": self.source}


def cuda_item(nvml: Any | None) -> Item:
    """The CUDA driver's version from NVML (nvmlSystemGetCudaDriverVersion) against the seed's >= 11.8."""
    title = "CUDA >= 11.8 (driver's CUDA version, NVML)"
    lib: Any = nvml
    if lib is None:
        try:
            import pynvml  # type: ignore[import-untyped,unused-ignore]

            pynvml.nvmlInit()
            lib = pynvml
        except Exception as exc:  # ImportError, OSError, NVMLError: no GPU here
            return Item("cuda", title, "unknown", f"could not check: no NVML on this host ({type(exc).__name__}: "
                        f"{exc}); run the checklist on the GPU host")
    try:
        raw = int(lib.nvmlSystemGetCudaDriverVersion())
    except Exception as exc:
        return Item("cuda", title, "unknown", f"could not check: nvmlSystemGetCudaDriverVersion failed: {exc}")
    version = (raw // 1000, (raw % 1000) // 10)
    ok = version >= CUDA_MIN
    return Item("cuda", title, "pass" if ok else "fail",
                f"NVML: the driver supports CUDA {version[0]}.{version[1]}; cuDNN lives in the engine's image and "
                "is not visible from here")


def fragmentation_item(history: Any | None, engines: Sequence[str]) -> Item:
    """The doctor's own fragmentation measure (memory_growth_ratio: memory held beyond the post-warm-up footprint),
    the newest value `doctor diagnose` recorded per engine; the seed's `nvidia-smi frag` does not exist."""
    title = "GPU memory fragmentation < 15% (the doctor's memory_growth_ratio)"
    if history is None:
        return Item("fragmentation", title, "unknown", "no signal history in the state directory: run `doctor "
                    "diagnose` (cron) with GPUs configured first")
    seen = {}
    for name in engines:
        series = history.series(name, "memory_growth_ratio", HISTORY_S)
        if series:
            seen[name] = series[-1][1]
    if not seen:
        return Item("fragmentation", title, "unknown", "no memory_growth_ratio recorded in the last hour (no GPU "
                    "readings: give gpus or dcgm per engine in the config)")
    worst = max(seen, key=lambda n: seen[n])
    verdict = "pass" if seen[worst] < FRAGMENTATION_MAX else "fail"
    return Item("fragmentation", title, verdict, "signal history: " + ", ".join(f"{n} {v:.1%}" for n, v in
                                                                              seen.items()))


def router_items(policy: Mapping[str, Any] | None, why: str) -> list[Item]:
    fair_t = "router fairness window = 10 (long prompts cannot starve short ones)"
    route_t = "hot/cold route threshold (the seed: 5120 tokens)"
    if policy is None:
        return [Item("fairness_window", fair_t, "unknown", why), Item("route_threshold", route_t, "unknown", why)]
    fw, rt = policy.get("fairness_window"), policy.get("route_threshold_tokens")
    return [Item("fairness_window", fair_t, "pass" if fw == FAIRNESS_WINDOW else "fail",
                 f"router policy API: fairness_window {fw}"),
            Item("route_threshold", route_t, "pass" if isinstance(rt, int) else "fail",
                 f"router policy API: route_threshold_tokens {rt}"
                 + ("" if rt == SEED_THRESHOLD else f" (the seed's is {SEED_THRESHOLD}; `doctor advise` compares them "
                                                    "on the twin)"))]


def rules_item(rules: Sequence[str] | None, expected: Sequence[str], why: str) -> list[Item]:
    title = "the doctor's alert rules loaded in Prometheus"
    mis_t = "misroute-share alert (< 5%) loaded"
    if rules is None:
        return [Item("alert_rules", title, "unknown", why), Item("misroute_alert", mis_t, "unknown", why)]
    missing = [r for r in expected if r not in rules]
    return [Item("alert_rules", title, "pass" if not missing else "fail",
                 "Prometheus /api/v1/rules: " + (f"all {len(expected)} loaded" if not missing else
                                                 f"missing {', '.join(missing[:8])}"
                                                 + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
                                                 + " (doctor rules writes them)")),
            Item("misroute_alert", mis_t, "pass" if MISROUTE_ALERT in rules else "fail",
                 f"Prometheus /api/v1/rules: {MISROUTE_ALERT} " + ("loaded" if MISROUTE_ALERT in rules else "absent"))]


def quantization_of(info: Any) -> tuple[bool, str | None]:
    """(readable, quantization) from a /server_info?config_format=json body (vllm_config.model_config)."""
    config = info.get("vllm_config") if isinstance(info, dict) else None
    model = config.get("model_config") if isinstance(config, dict) else None
    if not isinstance(model, dict) or "quantization" not in model:
        return False, None
    q = model["quantization"]
    return True, str(q) if q else None


def quantization_item(quantized: Mapping[str, str | None], unread: Sequence[str]) -> Item:
    title = "a quantized model's accuracy A/B tested (drop < 2%)"
    q = {n: v for n, v in quantized.items() if v}
    unread_note = (f"{', '.join(unread)}: /server_info not readable (vLLM serves it with VLLM_SERVER_DEV_MODE=1)"
                   if unread else "")
    if q:
        return Item("quantization_ab", title, "ask", "quantized: " + ", ".join(f"{n} {v}" for n, v in q.items())
                    + "; the doctor predicts speed and memory, never accuracy: attach the business-metric A/B result"
                    + (f"; {unread_note}" if unread_note else ""))
    plain = f"no quantization on {', '.join(quantized)} (/server_info)" if quantized else ""
    if unread:
        return Item("quantization_ab", title, "unknown", "; ".join(x for x in (plain, unread_note) if x))
    return Item("quantization_ab", title, "pass", plain)


def warmup_item(templates: Sequence[str], engines: Sequence[str]) -> Item:
    title = "warm-up configured after a (re)start"
    if templates:
        return Item("warmup", title, "pass", f"config [templates]: {len(templates)} prompts replayed after a restart "
                    "besides the batch 4/8/16 x 512/1024/2048 warm-up")
    return Item("warmup", title, "fail", "config has no [templates] prompts: only the synthetic warm-up runs after a "
                "restart, the prefix cache starts cold")


def heatmap_item() -> Item:
    return Item("latency_heatmap", "latency heatmap dashboard deployed", "unknown",
                "a dashboard is outside what the doctor can read; deploy/prometheus has the series it would chart")


SHIPPED_RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"


def expected_rules(path: Path = SHIPPED_RULES) -> list[str]:
    """The alerts of the shipped rules file (`doctor rules` writes it), else every alert the doctor can write."""
    try:
        return re.findall(r"^\s*- alert: (\w+)", path.read_text(), flags=re.M)
    except OSError:
        from doctor.rules_table import RULES

        return [r.alert for r in RULES]


def _get_json(client: httpx.Client, url: str, headers: Mapping[str, str] | None = None) -> tuple[Any | None, str]:
    try:
        r = client.get(url, headers=headers)
        r.raise_for_status()
        return r.json(), ""
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"GET {url} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _router_headers(config: Any, environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The policy API's bearer token from the config's token_file / token_env (the policy document needs it)."""
    try:
        token = config.router.token(environ)
    except ValueError as exc:  # a refused token file
        return {}, f"; the router token could not be read: {exc}"
    return ({"Authorization": f"Bearer {token}"}, "") if token else ({}, "")


def run_checklist(config: Any, engines: Sequence[Any], *, state_dir: Path | None, transport: httpx.BaseTransport
                  | None = None, nvml: Any | None = None, expected_rules: Sequence[str] = (),
                  timeout_s: float = 5.0, environ: Mapping[str, str] | None = None
                  ) -> dict[str, Any]:
    """Every item, read now; the document `doctor advise --checklist --format json` prints."""
    started = time.perf_counter()
    items = [cuda_item(nvml)]
    history = None
    if state_dir is not None and (state_dir / "history.jsonl").exists():
        from collectors.history import SignalHistory

        history = SignalHistory(state_dir / "history.jsonl")
    items.append(fragmentation_item(history, [e.name for e in engines]))
    with httpx.Client(transport=transport, timeout=timeout_s, trust_env=False) as client:
        router = config.router.url
        headers, token_note = _router_headers(config, os.environ if environ is None else environ)
        policy, why = (None, "no router configured ([router] url)") if not router else \
            _get_json(client, router.rstrip("/") + "/router/policy", headers)
        why += token_note if policy is None and router else ""
        items += router_items(policy, why)
        prom = config.prometheus_url
        names: list[str] | None = None
        if not prom:
            why = "no Prometheus configured ([prometheus] url): the rules cannot be checked"
        else:
            doc, why = _get_json(client, prom.rstrip("/") + "/api/v1/rules")
            if doc is not None:
                names = [r.get("name", "") for g in doc.get("data", {}).get("groups", []) for r in g.get("rules", [])
                         if r.get("type") == "alerting"]
        items += rules_item(names, expected_rules, why)
        quantized: dict[str, str | None] = {}
        unread: list[str] = []
        for e in engines:
            info, _ = _get_json(client, e.url.rstrip("/") + "/server_info?config_format=json")
            readable, q = quantization_of(info)
            if readable:
                quantized[e.name] = q
            else:
                unread.append(e.name)
    items.append(quantization_item(quantized, unread))
    items.append(warmup_item(list(config.templates.prompts), [e.name for e in engines]))
    items.append(heatmap_item())
    failed = [i for i in items if i.verdict == "fail"]
    return {"schema": "serving-doctor/advise-checklist/1", "items": [i.to_dict() for i in items],
            "failed": len(failed), "took_s": round(time.perf_counter() - started, 3),
            "status": "fail" if failed else "ok"}


def render_checklist(doc: Mapping[str, Any]) -> str:
    marks = {"pass": "[x]", "fail": "[ ]", "ask": "[?]", "unknown": "[-]"}
    lines = ["pre-flight checklist (the seed's 工程检查清单):"]
    for i in doc["items"]:
        lines.append(f"  {marks[i['verdict']]} {i['verdict']:7} {i['title']}\n              {i['source']}")
    lines.append(f"{doc['failed']} failed" if doc["failed"] else "nothing failed")
    return "\n".join(lines) + "\n"


