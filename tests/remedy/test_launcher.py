"""LocalLauncher with real `doctor sim engine` subprocesses, a shared GPU ledger file and the real router."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from doctor.remedy.actuators import default_registry
from doctor.remedy.launcher import LaunchedEngine, LocalLauncher, free_port, redact
from doctor.remedy.model import ActuatorContext, ActuatorError, EngineTarget, Refused
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.vllm_admin import VllmAdminActuator
from playbooks.model import ACTION_KINDS, Action
from router.config import RouterConfig
from router.server import RouterThread, router_thread
from sim.engine_cli import EngineThread
from sim.gpu import GIB, FileLedger
from sim.testing import ALL_GRAPHED, FAST_START, engine_thread, node_exporter

TOKEN = "launcher-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def template(ledger: Path, extra: str = "") -> str:
    return (f"{sys.executable} -m doctor.cli sim engine m --host 127.0.0.1 --port {{port}} "
            "--max-num-seqs {max_num_seqs} --max-model-len 4096 --gpu-memory-utilization 0.5 --enforce-eager "
            "--time-scale 0.1 --sim-startup-scale 0.05 "
            f"--served-model-name {{name}} --gpu-ledger {ledger} {extra}").strip()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@dataclasses.dataclass
class Stack:
    launcher: LocalLauncher
    ctx: ActuatorContext
    router: RouterThread
    cold: EngineThread
    ledger: Path
    old: LaunchedEngine

    @property
    def hot(self) -> EngineTarget:
        return self.ctx.engines["hot"]

    def policy(self) -> dict[str, Any]:
        return dict(httpx.get(self.router.url + "/router/policy", headers=AUTH).json())

    def hot_upstream(self) -> dict[str, Any]:
        return dict(self.policy()["upstreams"]["hot"][0])


def make_launcher(state: Path, pool: list[int], **kw: Any) -> LocalLauncher:
    kw.setdefault("health_timeout_s", 30.0)
    return LocalLauncher(state, router=RouterActuator(), gpu_pool=pool, stop_grace_s=5.0, drain_timeout_s=20.0,
                         warm_batches=(4,), warm_prompt_tokens=(64,), **kw)


@contextmanager
def stack(tmp_path: Path, pool: list[int], *, extra: str = "", **kw: Any) -> Iterator[Stack]:
    ledger = tmp_path / "gpus.json"
    launcher = make_launcher(tmp_path / "state", pool, **kw)
    port = free_port("127.0.0.1")
    hot = EngineTarget("hot", "hot", f"http://127.0.0.1:{port}", launcher=template(ledger, extra), gpus=(0,),
                       max_model_len=4096, args={"max_num_seqs": 8})
    old = launcher.start(hot, port=port, gpus=[0], args={})
    try:
        run(launcher.wait_healthy(old))
        with engine_thread(["m", *ALL_GRAPHED, "--time-scale", "0.1", "--max-model-len", "4096"]) as cold:
            cfg = RouterConfig(hot=[hot.url], cold=[cold.url], port=0, policy_file="", health_interval_s=0.2,
                               route_threshold_tokens=1000)
            with router_thread(cfg, token=TOKEN) as rt:
                ctx = ActuatorContext(engines={"hot": hot, "cold": EngineTarget("cold", "cold", cold.url, gpus=(1,))},
                                      state_dir=tmp_path / "state", router_url=rt.url, router_token=TOKEN)
                yield Stack(launcher, ctx, rt, cold, ledger, old)
    finally:
        for rec in launcher.adopt():
            run(launcher.stop(rec))


@contextmanager
def light_load(url: str) -> Iterator[list[Any]]:
    """Two clients sending short prompts through the router until the block ends."""
    stop = threading.Event()
    results: list[Any] = []

    def loop() -> None:
        with httpx.Client(timeout=30.0) as c:
            while not stop.is_set():
                try:
                    r = c.post(url + "/v1/completions", json={"prompt": "tok " * 20, "max_tokens": 4})
                    results.append(r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:200]}")
                except httpx.HTTPError as exc:
                    results.append(repr(exc))

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        yield results
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cmdline(pid: int) -> str:
    return " ".join(p for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
                    for p in proc.cmdline())


def test_blue_green_relaunch_with_no_failed_request(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1, 2]) as s:
        old_url = s.hot.url
        assert s.launcher.spare_gpus(s.ctx) == [2]
        with light_load(s.router.url) as results:
            applied = run(s.launcher.apply(Action("relaunch", "hot", {"max_num_seqs": 6, "reason": "kv"}), s.ctx))
        assert results and all(r == 200 for r in results), [r for r in results if r != 200][:3]
        new = applied.changed
        assert new["url"] != old_url and new["gpus"] == [2] and new["args"]["max_num_seqs"] == 6
        assert s.hot_upstream()["url"] == new["url"] and s.hot.url == new["url"]
        assert not alive(s.old.pid) and "--max-num-seqs 6" in cmdline(new["pid"])
        assert [r.pid for r in s.launcher.adopt()] == [new["pid"]]
        assert any("blue/green" in step for step in applied.steps)
        assert applied.inverse is not None and applied.inverse.params == {"max_num_seqs": 8, "restore": True}
        back = run(s.launcher.apply(applied.inverse, s.ctx))  # the inverse goes back (GPU 0 is spare again)
        assert back.changed["gpus"] == [0] and "--max-num-seqs 8" in cmdline(back.changed["pid"])


def test_in_place_relaunch_without_a_spare_gpu_fails_over_to_cold(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1]) as s:
        url = s.hot.url
        assert s.launcher.spare_gpus(s.ctx) == []
        with light_load(s.router.url) as results:
            applied = run(s.launcher.apply(Action("relaunch", "hot", {"max_num_seqs": "lower"}), s.ctx))
        assert all(r == 200 for r in results), [r for r in results if r != 200][:3]
        assert applied.changed["url"] == url and applied.changed["args"]["max_num_seqs"] == 6  # 75% of 8
        assert s.hot_upstream()["state"] == "active" and not alive(s.old.pid)
        assert any("draining" in step for step in applied.steps)


def test_a_launcher_command_that_fails_to_start_leaves_the_old_engine_serving(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1, 2]) as s:
        before = s.policy()["upstreams"]
        broken = dataclasses.replace(s.hot, launcher="/nonexistent/vllm serve m --port {port}")
        s.ctx.engines["hot"] = broken  # type: ignore[index]
        with pytest.raises(ActuatorError, match=r"exited \(code 127\) before becoming healthy") as err:
            run(s.launcher.apply(Action("relaunch", "hot", {"max_num_seqs": 6}), s.ctx))
        assert "not found" in str(err.value) and "old engine stayed in service" in str(err.value)
        assert s.policy()["upstreams"] == before and alive(s.old.pid)
        assert [r.pid for r in s.launcher.adopt()] == [s.old.pid]


def test_an_engine_on_an_occupied_gpu_never_becomes_healthy(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1, 2]) as s:
        occupier = EngineThread(["m", *ALL_GRAPHED, *FAST_START, "--max-model-len", "4096",
                                 "--gpu-memory-utilization", "0.6"],
                                env={"CUDA_VISIBLE_DEVICES": "2"}, ledger=FileLedger(s.ledger)).start()
        try:
            before = s.policy()["upstreams"]
            with pytest.raises(ActuatorError, match="before becoming healthy") as err:
                run(s.launcher.apply(Action("relaunch", "hot", {"max_num_seqs": 6}), s.ctx))
            assert "Free memory on device" in str(err.value)  # vLLM's start-up OOM, from the log's tail
            assert s.policy()["upstreams"] == before and alive(s.old.pid)
            # with a memory reading, GPU 2 is not offered as spare at all
            ledger = FileLedger(s.ledger)
            s.launcher.free_memory = lambda gpu: (80 * GIB - ledger.used(gpu), 80 * GIB)
            assert s.launcher.spare_gpus(s.ctx, bytes_ratio=0.5) == []
        finally:
            occupier.stop()


def test_an_engine_that_never_answers_health_is_stopped(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1, 2], health_timeout_s=1.0) as s:
        # a duration no other process on a shared machine uses, so the check below sees only this test's engine
        marker = f"59.{os.getpid()}"
        s.ctx.engines["hot"] = dataclasses.replace(s.hot, launcher=f"sleep {marker} # {{port}}")  # type: ignore[index]
        with pytest.raises(ActuatorError, match=r"never became healthy within 1s"):
            run(s.launcher.apply(Action("relaunch", "hot", {}), s.ctx))
        assert [r.pid for r in s.launcher.adopt()] == [s.old.pid]  # the hung one was killed, its files removed
        assert not any((p.info["cmdline"] or [])[:2] == ["sleep", marker] for p in psutil.process_iter(["cmdline"]))


def test_in_place_failure_brings_the_old_engine_back(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1]) as s:
        url = s.hot.url
        with pytest.raises(ActuatorError, match="rolled back: the old engine is back in service") as err:
            run(s.launcher.apply(Action("relaunch", "hot", {"max_num_seqs": 0}), s.ctx))
        assert "--max-num-seqs must be >= 1" in str(err.value)
        assert httpx.get(url + "/health").status_code == 200 and s.hot_upstream()["state"] == "active"
        (rec,) = s.launcher.adopt()
        assert rec.url == url and "--max-num-seqs 8" in cmdline(rec.pid)


def test_adopt_finds_live_engines_and_clears_dead_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROUTER_POLICY_TOKEN", TOKEN)
    with stack(tmp_path, pool=[0]) as s:
        procs = [psutil.Process(s.old.pid), *psutil.Process(s.old.pid).children(recursive=True)]
        assert all("ROUTER_POLICY_TOKEN" not in p.environ() for p in procs)  # the secret stays with the doctor
        assert all(p.environ()["CUDA_VISIBLE_DEVICES"] == "0" for p in procs)
        again = make_launcher(tmp_path / "state", [0])  # the next cron run
        (rec,) = again.adopt()
        assert rec.pid == s.old.pid and rec.url == s.hot.url
        assert (tmp_path / "state" / "engines" / f"{rec.key}.pid").read_text().strip() == str(rec.pid)
        dead = dataclasses.replace(rec, pid=2**22 + 1, port=1)
        (tmp_path / "state" / "engines" / "hot@1.json").write_text(json.dumps(dataclasses.asdict(dead)))
        (tmp_path / "state" / "engines" / "hot@1.pid").write_text(f"{dead.pid}\n")
        assert [r.pid for r in again.adopt()] == [rec.pid]
        assert not (tmp_path / "state" / "engines" / "hot@1.pid").exists()
        run(again.stop(rec))
        assert again.adopt() == [] and not alive(rec.pid)


def test_scale_out(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1, 2]) as s:
        with pytest.raises(Refused, match="needs 4 GPUs"):
            s.launcher.check(Action("scale_out", "hot", {"tensor_parallel_size": 4}), s.ctx)
        with pytest.raises(Refused, match="unknown engine"):
            s.launcher.check(Action("scale_out", "nope", {"add_replicas": 1}), s.ctx)
        applied = run(s.launcher.apply(Action("scale_out", "hot", {"add_replicas": 1}), s.ctx))
        names = [u["name"] for u in s.policy()["upstreams"]["hot"]]
        assert names == ["hot", "hot-r2"] and applied.changed["gpus"] == [2]
        assert applied.inverse is not None
        run(s.launcher.apply(applied.inverse, s.ctx))
        assert [u["name"] for u in s.policy()["upstreams"]["hot"]] == ["hot"]
        assert [r.name for r in s.launcher.adopt()] == ["hot"]


def test_scale_out_by_two_replicas_at_once_then_in_by_one(tmp_path: Path) -> None:
    """A pool's scale-out adds its replicas in one action (started together); scale_in gives back only a replica
    the launcher started, out of the router first, then stopped; the scale-out's inverse removes what is left."""
    with stack(tmp_path, pool=[0, 1, 2, 3]) as s:  # hot on 0, cold on 1: two spare
        with pytest.raises(Refused, match="3 replica\\(s\\) need 3 free GPU"):
            run(s.launcher.apply(Action("scale_out", "hot", {"add_replicas": 3}), s.ctx))
        out = run(s.launcher.apply(Action("scale_out", "hot", {"add_replicas": 2}), s.ctx))
        assert [u["name"] for u in s.policy()["upstreams"]["hot"]] == ["hot", "hot-r2", "hot-r3"]
        assert out.changed["replicas"] == ["hot-r2", "hot-r3"]
        assert sorted(g for gs in out.changed["gpus"] for g in gs) == [2, 3]
        with pytest.raises(Refused, match="not a replica the doctor's launcher started"):
            s.launcher.check(Action("scale_in", "hot", {"remove_replica": "hot-9"}), s.ctx)
        with pytest.raises(Refused, match="a replica other than hot"):
            s.launcher.check(Action("scale_in", "hot", {"remove_replica": "hot"}), s.ctx)
        r3 = s.launcher.record_for("hot-r3")
        assert r3 is not None and alive(r3.pid)
        back = run(s.launcher.apply(Action("scale_in", "hot", {"remove_replica": "hot-r3"}), s.ctx))
        assert [u["name"] for u in s.policy()["upstreams"]["hot"]] == ["hot", "hot-r2"] and not alive(r3.pid)
        assert back.steps[0] == "router: removed hot-r3" and back.inverse is not None
        assert (back.inverse.kind, back.inverse.params) == ("scale_out", {"add_replicas": 1})
        assert out.inverse is not None
        run(s.launcher.apply(out.inverse, s.ctx))  # hot-r3 is gone already: only hot-r2 is left to remove
        assert [u["name"] for u in s.policy()["upstreams"]["hot"]] == ["hot"]
        assert [r.name for r in s.launcher.adopt()] == ["hot"]


def test_defragment_without_sleep_mode_falls_back_to_a_relaunch(tmp_path: Path) -> None:
    dcgm = free_port("127.0.0.1")
    # The node's exporter is a daemon apart from the engines: the relaunched engine shares it.
    with node_exporter(tmp_path / "gpus.json", port=dcgm, gpus=(0, 1)), \
            stack(tmp_path, pool=[0, 1], extra=f"--dcgm-port {dcgm}", env={"VLLM_SERVER_DEV_MODE": "1"}) as s:
        old_pid = s.old.pid
        admin = VllmAdminActuator(router=RouterActuator(), launcher=s.launcher,
                                  dcgm_urls={"hot": f"http://127.0.0.1:{dcgm}/metrics"})
        applied = run(admin.apply(Action("defragment", "hot"), s.ctx))
        assert applied.changed["method"] == "relaunch"
        assert any("sleep freed 0%" in step for step in applied.steps)
        assert not alive(old_pid) and alive(applied.changed["pid"])
        assert s.hot_upstream()["state"] == "active"
        assert not httpx.get(s.hot.url + "/is_sleeping").json()["is_sleeping"]


def test_no_orphans_after_a_test(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0]) as s:
        pid = s.old.pid
    assert not alive(pid)
    assert os.listdir(tmp_path / "state" / "engines") == ["hot@" + s.hot.url.rsplit(":", 1)[1] + ".log"]


def test_redact_hides_secrets_in_command_lines() -> None:
    line = "HF_TOKEN=abc vllm serve m --api-key sk-123 --port 8000 --hf-token=xyz"
    assert redact(line) == "'HF_TOKEN=***' vllm serve m --api-key '***' --port 8000 '--hf-token=***'"


def test_the_registry_covers_every_action_kind_but_escalate(tmp_path: Path) -> None:
    reg = default_registry(tmp_path)
    assert set(reg.kinds()) == set(ACTION_KINDS) - {"escalate"}
    assert isinstance(reg.for_kind("relaunch"), LocalLauncher)
    with pytest.raises(Refused, match="no actuator applies 'escalate'"):
        reg.for_kind("escalate")


def test_relaunch_with_more_gpu_memory_passes_the_flag(tmp_path: Path) -> None:
    with stack(tmp_path, pool=[0, 1, 2]) as s:
        applied = run(s.launcher.apply(Action("relaunch", "hot", {"gpu_memory_utilization": 0.6}), s.ctx))
        new = applied.changed
        assert new["gpus"] == [2] and new["args"]["gpu_memory_utilization"] == 0.6
        assert "--gpu-memory-utilization 0.6" in cmdline(new["pid"])
        assert s.hot_upstream()["url"] == new["url"]
        assert applied.inverse is not None and applied.inverse.params.get("restore") is True
