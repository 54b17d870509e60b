"""VllmAdminActuator against sim engines (dev mode, sleep mode, dcgm) behind the real router."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from collectors.gpu import DcgmSource, engine_fb_bytes
from doctor.remedy.model import ActuatorContext, ActuatorError, EngineTarget, Refused
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.vllm_admin import VllmAdminActuator
from playbooks.model import Action
from router.config import RouterConfig
from router.server import RouterThread, router_thread
from sim.engine_cli import EngineThread
from sim.testing import ALL_GRAPHED, engine_thread

TOKEN = "admin-test-token"
FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]
DEV = {"VLLM_SERVER_DEV_MODE": "1"}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def successes(eng: EngineThread) -> int:
    assert eng.handle is not None
    return sum(eng.handle.runtime.core.metrics.request_success.values())


@contextmanager
def behind_router(hot_argv: list[str], env: dict[str, str], tmp_path: Path,
                  templates: tuple[str, ...] = ()) -> Iterator[tuple[EngineThread, RouterThread, ActuatorContext]]:
    with engine_thread(["m", *FAST, *hot_argv], env=env) as hot, engine_thread(["m", *FAST]) as cold:
        cfg = RouterConfig(hot=[hot.url], cold=[cold.url], port=0, policy_file="", health_interval_s=0.2,
                           route_threshold_tokens=1000)
        with router_thread(cfg, token=TOKEN) as rt:
            ctx = ActuatorContext(
                engines={"hot": EngineTarget("hot", "hot", hot.url, gpus=(0,)),
                         "cold": EngineTarget("cold", "cold", cold.url, gpus=(0,))},
                state_dir=tmp_path, router_url=rt.url, router_token=TOKEN, templates=templates)
            yield hot, rt, ctx


def admin_for(eng: EngineThread) -> VllmAdminActuator:
    assert eng.handle is not None and eng.handle.dcgm_port is not None
    return VllmAdminActuator(router=RouterActuator(),
                             dcgm_urls={"hot": f"http://127.0.0.1:{eng.handle.dcgm_port}/metrics"})


def fb(eng: EngineThread) -> float:
    assert eng.handle is not None
    with httpx.Client() as c:
        return engine_fb_bytes(DcgmSource(f"http://127.0.0.1:{eng.handle.dcgm_port}/metrics", c).read())


def hot_state(rt: RouterThread) -> str:
    doc = httpx.get(rt.url + "/router/policy", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    return str(doc["upstreams"]["hot"][0]["state"])


def is_sleeping(eng: EngineThread) -> bool:
    return bool(httpx.get(eng.url + "/is_sleeping").json()["is_sleeping"])


def test_reset_prefix_cache_in_dev_mode(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST], env=DEV) as eng:
        assert eng.handle is not None
        httpx.post(eng.url + "/v1/completions", json={"prompt": "tok " * 64, "max_tokens": 1})
        kv = eng.handle.runtime.core.kv
        assert kv.evictable
        ctx = ActuatorContext(engines={"e": EngineTarget("e", None, eng.url)}, state_dir=tmp_path)
        applied = run(VllmAdminActuator().apply(Action("reset_prefix_cache", "e"), ctx))
        assert not kv.evictable and applied.inverse is None


def test_reset_prefix_cache_without_dev_mode_is_refused(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST]) as eng:
        ctx = ActuatorContext(engines={"e": EngineTarget("e", None, eng.url)}, state_dir=tmp_path)
        with pytest.raises(Refused, match="dev mode is off"):
            run(VllmAdminActuator().apply(Action("reset_prefix_cache", "e"), ctx))


def test_unknown_engine_is_refused(tmp_path: Path) -> None:
    ctx = ActuatorContext(engines={}, state_dir=tmp_path)
    for kind in ("reset_prefix_cache", "rewarm_prefix_cache", "warm_up", "defragment"):
        with pytest.raises(Refused, match="unknown engine 'x'"):
            VllmAdminActuator().check(Action(kind, "x"), ctx)


def test_rewarm_replays_each_template_with_variations(tmp_path: Path) -> None:
    chat = '[{"role": "system", "content": "You are a support bot for ACME."}, {"role": "user", "content": "hi"}]'
    templates = ("You are a helpful assistant. " * 20, chat)
    with engine_thread(["m", *FAST]) as eng:
        ctx = ActuatorContext(engines={"e": EngineTarget("e", None, eng.url)}, state_dir=tmp_path,
                              templates=templates)
        assert eng.handle is not None
        kv = eng.handle.runtime.core.kv
        before = successes(eng)
        applied = run(VllmAdminActuator().apply(Action("rewarm_prefix_cache", "e", {"variations": 3}), ctx))
        assert successes(eng) - before == 6
        assert "6/6 ok" in applied.steps[0]
        assert kv.evictable  # the templates' blocks are cached now
        with pytest.raises(Refused, match="no prompt templates"):
            VllmAdminActuator().check(Action("rewarm_prefix_cache", "e"),
                                      ActuatorContext(engines=ctx.engines, state_dir=tmp_path))


def test_warm_up_runs_every_batch_and_length(tmp_path: Path) -> None:
    with engine_thread(["m", *FAST, "--max-model-len", "1500"]) as eng:
        ctx = ActuatorContext(engines={"e": EngineTarget("e", None, eng.url)}, state_dir=tmp_path)
        before = successes(eng)
        applied = run(VllmAdminActuator().apply(Action("warm_up", "e", {"batches": [4, 8, 16],
                                                                        "prompt_tokens": [512, 1024, 2048]}), ctx))
        # 2048 does not fit max_model_len 1500: skipped, said so
        assert successes(eng) - before == (4 + 8 + 16) * 2
        assert sum("skipped" in s for s in applied.steps) == 3


def test_defragment_with_sleep_mode_frees_memory_and_clears_the_growth(tmp_path: Path) -> None:
    argv = ["--enable-sleep-mode", "--fault", "fragmentation:3600", "--gpu-memory-utilization", "0.5",
            "--max-model-len", "4096", "--dcgm-port", "0"]
    with behind_router(argv, DEV, tmp_path) as (hot, rt, ctx):
        assert hot.handle is not None
        core = hot.handle.runtime.core
        footprint = 0.5 * 80 * 2**30
        time.sleep(0.7)  # fragmentation grows to its 60% cap
        grown = fb(hot)
        assert grown > footprint * 1.5
        started = time.time()
        applied = run(admin_for(hot).apply(Action("defragment", "hot", {"sleep_level": 1, "min_freed_ratio": 0.2}),
                                           ctx))
        assert applied.changed["method"] == "sleep"
        assert any("freed 9" in s for s in applied.steps)  # asleep, the engine held its CUDA context only
        assert core.last_defrag >= started  # the growth restarted from zero at the wake-up
        # what it holds now is the footprint plus at most the growth since the wake-up (1/s here) by the engine's own
        # clock, not a figure that depends on how fast this machine reaches the read
        held = fb(hot)
        after_read = time.time()
        assert footprint * 0.999 <= held <= footprint * (1 + core.memory_growth_ratio(after_read)) * 1.001
        assert core.memory_growth_ratio(core.last_defrag) == 0.0 < grown / footprint - 1
        assert not is_sleeping(hot) and hot_state(rt) == "active"
        r = httpx.post(rt.url + "/v1/completions", json={"prompt": "tok " * 10, "max_tokens": 2})
        assert r.status_code == 200


def test_defragment_without_sleep_mode_frees_nothing_and_needs_a_relaunch(tmp_path: Path) -> None:
    argv = ["--fault", "fragmentation:3600", "--gpu-memory-utilization", "0.5", "--max-model-len", "4096",
            "--dcgm-port", "0"]
    with behind_router(argv, DEV, tmp_path) as (hot, rt, ctx):
        with pytest.raises(ActuatorError, match=r"sleep freed 0%.*no launcher"):
            run(admin_for(hot).apply(Action("defragment", "hot"), ctx))
        assert not is_sleeping(hot) and hot_state(rt) == "active"  # never left asleep or drained


def test_defragment_without_dev_mode_falls_back_before_draining(tmp_path: Path) -> None:
    with behind_router(["--dcgm-port", "0"], {}, tmp_path) as (hot, rt, ctx):
        with pytest.raises(ActuatorError, match="dev mode is off"):
            run(admin_for(hot).apply(Action("defragment", "hot"), ctx))
        assert hot_state(rt) == "active"


def test_defragment_without_a_framebuffer_reading_is_not_trusted(tmp_path: Path) -> None:
    with behind_router(["--enable-sleep-mode"], DEV, tmp_path) as (hot, rt, ctx):
        with pytest.raises(ActuatorError, match="could not be verified"):
            run(VllmAdminActuator(router=RouterActuator()).apply(Action("defragment", "hot"), ctx))
        assert not is_sleeping(hot) and hot_state(rt) == "active"


def test_defragment_needs_the_router(tmp_path: Path) -> None:
    ctx = ActuatorContext(engines={"e": EngineTarget("e", None, "http://127.0.0.1:9")}, state_dir=tmp_path)
    with pytest.raises(Refused, match="no router"):
        VllmAdminActuator(router=RouterActuator()).check(Action("defragment", "e"), ctx)
