"""K8sLauncher with the real `kubernetes` client against recorded API exchanges (tests/k8s_replay.py).

No API server runs here: the client speaks real HTTP on loopback to a server that replays the exchanges in
tests/fixtures/k8s/ and checks that each request the launcher sends (method, path, query, Content-Type, patch
body) is the recorded one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from doctor.config import config_from_dict
from doctor.config_k8s import K8sWorkload
from doctor.config_schema import ConfigError
from doctor.remedy.k8s_launcher import K8sLauncher
from doctor.remedy.model import ActuatorContext, ActuatorError, Applied, EngineTarget, Refused
from playbooks.model import Action
from tests.k8s_replay import Replay, api_server, load

HOT = K8sWorkload(namespace="serving", deployment="vllm-hot", container="vllm", rollout_timeout_s=600)
LWS = K8sWorkload(namespace="serving", leaderworkerset="vllm-405b", container="vllm-leader")


def _ctx(tmp_path: Path, **bounds: Any) -> ActuatorContext:
    engines = {"hot": EngineTarget("hot", "hot", "http://vllm-hot.serving:8000", args={"max_num_seqs": 256}),
               "big": EngineTarget("big", "cold", "http://vllm-405b.serving:8080"),
               "local": EngineTarget("local", "cold", "http://127.0.0.1:8001", launcher="vllm serve m")}
    return ActuatorContext(engines=engines, state_dir=tmp_path, bounds=bounds)


RESTART_AT = 1796190000.0  # 2026-12-02T05:40:00Z, the restart stamp recorded in rollout_restart.json


@pytest.fixture
def replayed(request: pytest.FixtureRequest) -> Iterator[tuple[Replay, K8sLauncher]]:
    """The launcher's client pointed at a replay of fixture `request.param`."""
    with api_server(load(request.param)) as replay:
        config = kubernetes.client.Configuration(host=replay.url)
        launcher = K8sLauncher({"hot": HOT, "big": LWS}, now=lambda: RESTART_AT,
                               api_factory=lambda wl: kubernetes.client.ApiClient(config))
        yield replay, launcher


def _apply(launcher: K8sLauncher, ctx: ActuatorContext, kind: str, target: str, **params: Any) -> Applied:
    return asyncio.run(launcher.apply(Action(kind, target, params), ctx))


@pytest.mark.parametrize("replayed", ["relaunch_args"], indirect=True)
def test_relaunch_patches_the_vllm_args_and_watches_the_rollout(replayed: tuple[Replay, K8sLauncher],
                                                                tmp_path: Path) -> None:
    replay, launcher = replayed
    ctx = _ctx(tmp_path)
    applied = _apply(launcher, ctx, "relaunch", "hot", max_num_seqs="lower", max_model_len=16384, reason="kv")
    replay.assert_all_used()  # the read, the strategic-merge patch (args replaced and inserted), the watch
    assert applied.inverse is not None and applied.inverse.kind == "relaunch"
    assert applied.inverse.params == {"max_num_seqs": 256, "max_model_len": None, "restore": True}
    assert "max_num_seqs=192" in applied.steps[0] and "generation 8" in applied.steps[0]
    assert "rolled out: 2 of 2 replicas available" in applied.steps[-1]
    assert ctx.engines["hot"].args["max_num_seqs"] == 192
    patch = replay.seen[1]
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["body"]["spec"]["template"]["spec"]["containers"] == [{"name": "vllm", "args": [
        "--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "hot", "--port", "8000",
        "--max-num-seqs", "192", "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.90",
        "--enable-prefix-caching", "--max-model-len", "16384"]}]  # replaced in place, inserted at the end
    assert patch["body"]["metadata"] == {"resourceVersion": "4818302"}  # guarded: 409 if it changed meanwhile


@pytest.mark.parametrize("replayed", ["rollout_restart"], indirect=True)
def test_relaunch_without_changes_is_a_rollout_restart(replayed: tuple[Replay, K8sLauncher], tmp_path: Path) -> None:
    """What defragment falls back to (VllmAdminActuator: launcher.relaunch(target, ctx, {}))."""
    replay, launcher = replayed
    applied = asyncio.run(launcher.relaunch(_ctx(tmp_path).engines["hot"], _ctx(tmp_path), {}))
    replay.assert_all_used()
    assert replay.seen[1]["body"]["spec"] == {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-12-02T05:40:00Z"}}}}
    assert applied.inverse is None and "rolled out" in applied.steps[-1]


@pytest.mark.parametrize("replayed", ["scale_replicas"], indirect=True)
def test_scale_out_patches_replicas(replayed: tuple[Replay, K8sLauncher], tmp_path: Path) -> None:
    replay, launcher = replayed
    applied = _apply(launcher, _ctx(tmp_path), "scale_out", "hot", add_replicas=1)
    replay.assert_all_used()
    assert replay.seen[1]["body"] == {"metadata": {"resourceVersion": "4818302"}, "spec": {"replicas": 3}}
    assert applied.inverse is not None and applied.inverse.params == {"set_replicas": 2, "restore": True}
    assert "replicas 2 -> 3" in applied.steps[0]


@pytest.mark.parametrize("replayed", ["tp_change"], indirect=True)
def test_tensor_parallel_change_sets_the_flag_and_the_gpu_resources(replayed: tuple[Replay, K8sLauncher],
                                                                    tmp_path: Path) -> None:
    replay, launcher = replayed
    applied = _apply(launcher, _ctx(tmp_path, tensor_parallel_max=8), "scale_out", "hot", tensor_parallel_size=2)
    replay.assert_all_used()
    container = replay.seen[1]["body"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][-2:] == ["--tensor-parallel-size", "2"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    # undone by tensor_parallel_size 1 (vLLM's default, the flag was absent): the flag and the GPU limit back to 1
    assert applied.inverse is not None and applied.inverse.params == {"tensor_parallel_size": 1, "restore": True}


@pytest.mark.parametrize("replayed", ["rollout_stuck"], indirect=True)
def test_progress_deadline_exceeded_patches_the_old_args_back(replayed: tuple[Replay, K8sLauncher],
                                                              tmp_path: Path) -> None:
    replay, launcher = replayed
    ctx = _ctx(tmp_path)
    with pytest.raises(ActuatorError) as err:
        _apply(launcher, ctx, "relaunch", "hot", max_num_seqs=128)
    replay.assert_all_used()  # ... watch, pods (crash-looping, not unschedulable), watch, the rollback patch
    text = str(err.value)
    assert "exceeded its progress deadline" in text and "has timed out progressing" in text
    assert "rolled back: the previous values were patched back (generation 9)" in text
    rollback = replay.seen[-1]
    assert rollback["method"] == "PATCH" and "metadata" not in rollback["body"]
    assert "256" in rollback["body"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ctx.engines["hot"].args["max_num_seqs"] == 256  # unchanged: the change did not stay


@pytest.mark.parametrize("replayed", ["failed_scheduling"], indirect=True)
def test_unschedulable_pod_is_refused_with_the_schedulers_reason(replayed: tuple[Replay, K8sLauncher],
                                                                  tmp_path: Path) -> None:
    replay, launcher = replayed
    with pytest.raises(Refused) as err:
        _apply(launcher, _ctx(tmp_path), "scale_out", "hot", tensor_parallel_size=4)
    replay.assert_all_used()  # the pods, that pod's events, then the patch back (args and nvidia.com/gpu "1")
    text = str(err.value)
    assert "pod vllm-hot-58b7f9d4c6-rz8tp is Pending: FailedScheduling" in text
    assert "3 Insufficient nvidia.com/gpu" in text and "rolled back" in text


@pytest.mark.parametrize("replayed", ["autoscaler_scale_up"], indirect=True)
def test_unschedulable_pod_with_a_node_on_the_way_is_waited_for(replayed: tuple[Replay, K8sLauncher],
                                                                tmp_path: Path) -> None:
    replay, launcher = replayed
    applied = _apply(launcher, _ctx(tmp_path), "scale_out", "hot", add_replicas=1)
    replay.assert_all_used()  # pods, the pod's events (TriggeredScaleUp by cluster-autoscaler), a second watch
    assert "rolled out: 3 of 3 replicas available" in applied.steps[-1]


def test_rollout_outlasting_the_timeout_is_patched_back(tmp_path: Path) -> None:
    ticks = iter(range(0, 10_000, 400))  # a virtual clock: 400 s pass between two looks at it
    with api_server(load("rollout_timeout")) as replay:
        config = kubernetes.client.Configuration(host=replay.url)
        launcher = K8sLauncher({"hot": HOT}, clock=lambda: float(next(ticks)),
                               api_factory=lambda wl: kubernetes.client.ApiClient(config))
        with pytest.raises(ActuatorError) as err:
            _apply(launcher, _ctx(tmp_path), "relaunch", "hot", max_num_seqs=128)
        replay.assert_all_used()
    assert "did not finish rolling out within 600s (1 of 2 new replicas updated)" in str(err.value)
    assert "rolled back" in str(err.value)
    assert replay.seen[2]["query"]["timeoutSeconds"] == "30"


@pytest.mark.parametrize("replayed", ["lws_tp_change"], indirect=True)
def test_leaderworkerset_takes_a_json_patch_of_leader_script_and_gpus(replayed: tuple[Replay, K8sLauncher],
                                                                      tmp_path: Path) -> None:
    replay, launcher = replayed
    applied = _apply(launcher, _ctx(tmp_path), "scale_out", "big", tensor_parallel_size=8)
    replay.assert_all_used()
    assert replay.seen[1]["content_type"] == "application/json-patch+json"
    ops = replay.seen[1]["body"]
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "9120044"}
    assert "--tensor-parallel-size 8 --pipeline_parallel_size 2" in ops[1]["value"][2]
    assert "$(LWS_GROUP_SIZE);" in ops[1]["value"][2]  # the rest of the script is left as it was
    assert "rolled out: 2 of 2 groups ready" in applied.steps[-1]
    assert applied.inverse is not None and applied.inverse.params == {"tensor_parallel_size": 4, "restore": True}


@pytest.mark.parametrize(("replayed", "expect"), [
    ("forbidden", "forbidden (RBAC): the doctor's service account needs get, patch and watch on deployments"),
    ("not_found", 'not found (check kubernetes.namespace and the workload\'s name in the config): '
                  'deployments.apps "vllm-hot" not found'),
    ("conflict", "conflict: it changed since the doctor read it; nothing was changed"),
], indirect=["replayed"])
def test_api_errors_are_actuator_errors_naming_the_workload(replayed: tuple[Replay, K8sLauncher], expect: str,
                                                            tmp_path: Path) -> None:
    replay, launcher = replayed
    with pytest.raises(ActuatorError) as err:
        _apply(launcher, _ctx(tmp_path), "relaunch", "hot", max_num_seqs=128)
    replay.assert_all_used()
    assert "Deployment serving/vllm-hot" in str(err.value)
    assert expect in str(err.value)


@pytest.mark.parametrize("replayed", ["relaunch_args"], indirect=True)
def test_refusals_before_any_request(replayed: tuple[Replay, K8sLauncher], tmp_path: Path) -> None:
    replay, launcher = replayed
    ctx = _ctx(tmp_path)
    with pytest.raises(Refused, match=r"'local' has no \[engines.kubernetes\] table"):
        launcher.check(Action("relaunch", "local", {"max_num_seqs": 8}), ctx)
    with pytest.raises(Refused, match=r"needs params\.tensor_parallel_size or params\.add_replicas"):
        launcher.check(Action("scale_out", "hot", {}), ctx)
    assert replay.seen == []


def test_unreachable_api_server_is_a_clear_error(tmp_path: Path) -> None:
    config = kubernetes.client.Configuration(host="http://127.0.0.1:9")  # discard port: nothing listens
    config.retries = 0
    launcher = K8sLauncher({"hot": HOT}, api_factory=lambda wl: kubernetes.client.ApiClient(config))
    with pytest.raises(ActuatorError, match="reading Deployment serving/vllm-hot: cannot reach the Kubernetes API"):
        _apply(launcher, _ctx(tmp_path), "relaunch", "hot", max_num_seqs=128)


def test_config_reads_the_kubernetes_table() -> None:
    doc = tomllib.loads('[[engines]]\nname = "hot"\nurl = "http://vllm-hot.serving:8000"\n'
                        '[engines.kubernetes]\nnamespace = "serving"\ndeployment = "vllm-hot"\ncontainer = "vllm"\n'
                        'max_replicas = 8\nrollout_timeout_s = "20m"\n')
    wl = config_from_dict(doc).engines[0].kubernetes
    assert wl == K8sWorkload(namespace="serving", deployment="vllm-hot", container="vllm", max_replicas=8,
                             rollout_timeout_s=1200.0)
    both = doc | {"engines": [{**doc["engines"][0], "kubernetes": {"deployment": "a", "leaderworkerset": "b"}}]}
    with pytest.raises(ConfigError, match=r"engines\[0\].kubernetes.deployment: give exactly one of deployment"):
        config_from_dict(both)
    bad = doc | {"engines": [{**doc["engines"][0], "kubernetes": {"deployment": "Vllm_Hot"}}]}
    with pytest.raises(ConfigError, match="expected a Kubernetes object name"):
        config_from_dict(bad)


def test_the_client_is_imported_only_when_an_action_runs(tmp_path: Path) -> None:
    """`doctor diagnose` start-up and building the remediator for a Kubernetes config leave `kubernetes` unloaded."""
    cfg = tmp_path / "doctor.toml"
    cfg.write_text('[[engines]]\nname = "hot"\nurl = "http://vllm-hot.serving:8000"\n'
                   '[engines.kubernetes]\ndeployment = "vllm-hot"\n')
    code = ("import sys, pathlib, doctor.cli\n"
            "from doctor.config import load_config\nfrom doctor.remedy.setup import remediator\n"
            f"r = remediator(load_config(pathlib.Path({str(cfg)!r})), pathlib.Path({str(tmp_path)!r}))\n"
            "print(type(r.registry.for_kind('relaunch')).__name__, 'kubernetes' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path[1:]])})
    assert out.stdout.split() == ["K8sLauncher", "False"], out.stdout + out.stderr
