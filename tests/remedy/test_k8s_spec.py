"""The Kubernetes launcher's pure decisions: vLLM flags in container args, patch bodies, rollout judgement."""

from __future__ import annotations

import pytest

from doctor.remedy.k8s_spec import (
    Flags,
    deployment_rollout,
    edit_container,
    get_flag,
    json_patch,
    lws_rollout,
    set_flag,
    strategic_patch,
    unschedulable,
)
from doctor.remedy.model import Refused


def test_flags_are_found_and_set_in_each_spelling() -> None:
    argv = ["serve", "m", "--max-num-seqs=256", "--max_num_batched_tokens", "8192", "-tp", "2", "--enforce-eager"]
    assert get_flag(argv, "max_num_seqs") == "256"
    assert get_flag(argv, "max_num_batched_tokens") == "8192"
    assert get_flag(argv, "tensor_parallel_size") == "2"
    assert get_flag(argv, "enforce_eager") is True
    assert get_flag(argv, "max_model_len") is None
    out = set_flag(set_flag(set_flag(argv, "max_num_seqs", 64), "tensor_parallel_size", 4), "max_model_len", 8192)
    assert out == ["serve", "m", "--max-num-seqs=64", "--max_num_batched_tokens", "8192", "-tp", "4",
                   "--enforce-eager", "--max-model-len", "8192"]
    assert set_flag(out, "enforce_eager", None) == [t for t in out if t != "--enforce-eager"]
    assert set_flag(["--max-num-seqs", "8", "--max-num-seqs", "9"], "max_num_seqs", 4) == ["--max-num-seqs", "4"]


def test_shell_script_flags_are_edited_in_place_only_where_present() -> None:
    c = {"name": "vllm", "command": ["sh", "-c"], "args": ["vllm serve m --max-num-seqs 128 && echo done"]}
    f = Flags.of(c)
    assert (f.field, f.get("max_num_seqs")) == ("args", "128")
    assert f.set("max_num_seqs", 96).argv == ("vllm serve m --max-num-seqs 96 && echo done",)
    with pytest.raises(Refused, match="not in the container's shell script"):
        f.set("max_model_len", 4096)
    with pytest.raises(Refused, match="neither args nor command"):
        Flags.of({"name": "vllm", "image": "vllm/vllm-openai"})


def test_patches_turn_the_container_into_the_new_one_and_back() -> None:
    spec = {"containers": [{"name": "vllm", "args": ["--max-num-seqs", "8"],
                            "resources": {"limits": {"cpu": "4"}}}]}
    e = edit_container("/spec/template/spec", spec, 0, {"tensor_parallel_size": 2}, gpu_resource="nvidia.com/gpu",
                       gpus=2)
    forward = strategic_patch([e], 3, to="after", resource_version="17")
    assert forward == {"metadata": {"resourceVersion": "17"}, "spec": {"replicas": 3, "template": {"spec": {
        "containers": [{"name": "vllm", "args": ["--max-num-seqs", "8", "--tensor-parallel-size", "2"],
                        "resources": {"limits": {"cpu": "4", "nvidia.com/gpu": "2"}}}]}}}}
    back = strategic_patch([e], 1, to="before")  # the GPU limit it did not have is deleted (null)
    assert back["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": None, "cpu": "4"}}
    ops = json_patch([e], None, to="before")
    assert ops == [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": ["--max-num-seqs", "8"]},
                   {"op": "add", "path": "/spec/template/spec/containers/0/resources",
                    "value": {"limits": {"cpu": "4"}}}]


def _dep(gen: int, observed: int, **status: object) -> dict[str, object]:
    return {"metadata": {"generation": gen}, "spec": {"replicas": 2},
            "status": {"observedGeneration": observed, **status}}


def test_deployment_rollout_is_judged_as_kubectl_does() -> None:
    assert deployment_rollout(_dep(3, 2, replicas=2, updatedReplicas=2, availableReplicas=2)).state == "waiting"
    r = deployment_rollout(_dep(3, 3, replicas=3, updatedReplicas=1, availableReplicas=2))
    assert (r.state, r.message) == ("waiting", "1 of 2 new replicas updated")
    r = deployment_rollout(_dep(3, 3, replicas=3, updatedReplicas=2, availableReplicas=2))
    assert r.message == "1 old replicas pending termination"
    stuck = _dep(3, 3, conditions=[{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                    "message": 'ReplicaSet "x" has timed out progressing.'}])
    assert deployment_rollout(stuck).state == "stuck"
    assert deployment_rollout(_dep(3, 3, replicas=2, updatedReplicas=2, availableReplicas=2)).state == "done"


def test_lws_without_observed_generation_counts_only_after_progress_was_seen() -> None:
    steady = {"metadata": {"generation": 4}, "spec": {"replicas": 1},
              "status": {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}}
    assert lws_rollout(steady, seen_progress=False).state == "waiting"
    assert lws_rollout(steady, seen_progress=True).state == "done"


def test_only_pending_unschedulable_pods_count() -> None:
    pods = {"items": [
        {"metadata": {"name": "a"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b"}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"}]}},  # scheduled, pulling its image
        {"metadata": {"name": "c"}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}}]}
    assert unschedulable(pods) == [("c", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")]
