"""Pure helpers of the Kubernetes launcher: vLLM flags in a container's args, the patch bodies, rollout status.

Everything here works on the API's own JSON (dicts as the API server sends them), so the launcher stays a thin
layer over the official client: doctor.remedy.k8s_launcher reads, patches and watches; this module decides.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from doctor.remedy.model import Refused

# vLLM's short spellings (vllm/engine/arg_utils.py); `--max_num_seqs` works too, as argparse's dest spelling.
ALIASES: Mapping[str, tuple[str, ...]] = {"tensor_parallel_size": ("-tp",), "pipeline_parallel_size": ("-pp",)}
SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/env"})
Json = dict[str, Any]


def flag_names(key: str) -> tuple[str, ...]:
    return ("--" + key.replace("_", "-"), "--" + key, *ALIASES.get(key, ()))


def get_flag(argv: Sequence[str], key: str) -> str | bool | None:
    """The value of `--key` in `argv` (`--key V` or `--key=V`); True for a bare flag; None when absent."""
    names = flag_names(key)
    for i, tok in enumerate(argv):
        name, eq, value = tok.partition("=")
        if name in names:
            if eq:
                return value
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            return True if nxt is None or nxt.startswith("-") else nxt
    return None


def set_flag(argv: Sequence[str], key: str, value: Any) -> list[str]:
    """`argv` with `--key` set to `value` (replaced where it is, appended where it is not; None removes it)."""
    names, out, i, done = flag_names(key), [], 0, False
    while i < len(argv):
        tok = argv[i]
        name, eq, _ = tok.partition("=")
        if name not in names:
            out.append(tok)
            i += 1
            continue
        takes = not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-")
        i += 2 if takes else 1
        if done or value is None or value is False:
            continue
        out.extend([name] if value is True else [f"{name}={value}"] if eq else [name, str(value)])
        done = True
    if not done and value is not None and value is not False:
        out.extend(["--" + key.replace("_", "-")] + ([] if value is True else [str(value)]))
    return out


def _script_flag(script: str, key: str) -> re.Match[str] | None:
    alt = "|".join(re.escape(n) for n in flag_names(key))
    return re.search(rf"(?<!\S)({alt})(=|\s+)([^\s;&|]+)", script)


@dataclass(frozen=True)
class Flags:
    """Where a container's vLLM flags live: `field` ("args" or "command"), as a list or inside one shell script."""

    field: Literal["args", "command"]
    argv: tuple[str, ...]
    script_index: int | None = None  # the index of the `sh -c` script in argv; None: argv is the flags list

    @classmethod
    def of(cls, container: Mapping[str, Any]) -> Flags:
        command, args = list(container.get("command") or ()), list(container.get("args") or ())
        field: Literal["args", "command"] = "args" if args else "command"
        argv = args if args else command
        if not argv:
            raise Refused(f"container {container.get('name')!r} has neither args nor command to put vLLM flags in "
                          "(the image's entrypoint is not editable)")
        shell = bool(command) and command[0] in SHELLS and "-c" in command
        if shell and field == "args":
            return cls(field, tuple(argv), 0)
        if field == "command" and argv[0] in SHELLS and "-c" in argv[:-1]:
            return cls(field, tuple(argv), len(argv) - 1)
        return cls(field, tuple(argv))

    def get(self, key: str) -> str | bool | None:
        if self.script_index is None:
            return get_flag(self.argv, key)
        m = _script_flag(self.argv[self.script_index], key)
        return None if m is None else m.group(3)

    def set(self, key: str, value: Any) -> Flags:
        if self.script_index is None:
            return Flags(self.field, tuple(set_flag(self.argv, key, value)))
        script = self.argv[self.script_index]
        m = _script_flag(script, key)
        if m is None or value is None or isinstance(value, bool):
            raise Refused(f"--{key.replace('_', '-')} is not in the container's shell script, or the change is not "
                          "a plain value: the doctor edits a `sh -c` script only where the flag already has a value")
        new = script[:m.start(3)] + shlex.quote(str(value)) + script[m.end(3):]
        argv = list(self.argv)
        argv[self.script_index] = new
        return Flags(self.field, tuple(argv), self.script_index)


def container_index(pod_spec: Mapping[str, Any], name: str | None, where: str) -> int:
    """The index of container `name` (None: the only container), Refused naming the containers otherwise."""
    containers = list(pod_spec.get("containers") or ())
    names = [c.get("name") for c in containers]
    if name is None:
        if len(containers) == 1:
            return 0
        raise Refused(f"{where} has {len(containers)} containers ({', '.join(map(str, names))}); set "
                      "kubernetes.container to the vLLM one")
    if name not in names:
        raise Refused(f"{where} has no container {name!r} (containers: {', '.join(map(str, names)) or 'none'})")
    return names.index(name)


@dataclass(frozen=True)
class ContainerEdit:
    """One container's change: where it is (JSON pointer of its pod spec, index, name), its fields before/after."""

    spec_path: str
    index: int
    name: str
    before: Json
    after: Json


def edit_container(spec_path: str, pod_spec: Mapping[str, Any], index: int, changes: Mapping[str, Any], *,
                   gpu_resource: str, gpus: int | None, flags: bool = True) -> ContainerEdit:
    """The container's flags set to `changes` (when `flags`) and its `gpu_resource` limit (and request, when it
    has one) set to `gpus` (when not None)."""
    c = pod_spec["containers"][index]
    before: Json = {}
    after: Json = {}
    if flags and changes:
        f = Flags.of(c)
        before[f.field] = list(f.argv)
        for key, value in changes.items():
            f = f.set(key, value)
        after[f.field] = list(f.argv)
    if gpus is not None:
        res = copy.deepcopy(c.get("resources") or {})
        before["resources"] = copy.deepcopy(res)
        res.setdefault("limits", {})[gpu_resource] = str(gpus)
        if gpu_resource in (res.get("requests") or {}):
            res["requests"][gpu_resource] = str(gpus)
        after["resources"] = res
    return ContainerEdit(spec_path, index, str(c.get("name")), before, after)


def _smp_resources(new: Json, old: Json) -> Json:
    """A strategic-merge `resources` turning `old` into `new`: keys `new` lacks are deleted with null."""
    out: Json = {}
    for part in ("limits", "requests"):
        n, o = new.get(part) or {}, old.get(part) or {}
        if n or o:
            out[part] = {**{k: None for k in o if k not in n}, **n}
    return out


def strategic_patch(edits: Sequence[ContainerEdit], replicas: int | None, *, to: Literal["after", "before"],
                    resource_version: str | None = None) -> Json:
    """A Deployment's strategic-merge patch (containers merge by name; args lists are replaced whole)."""
    body: Json = {}
    if resource_version is not None:  # a precondition: 409 Conflict when the Deployment changed since it was read
        body["metadata"] = {"resourceVersion": resource_version}
    spec: Json = {}
    if replicas is not None:
        spec["replicas"] = replicas
    containers = []
    for e in edits:
        want, other = (e.after, e.before) if to == "after" else (e.before, e.after)
        entry: Json = {"name": e.name}
        for key in ("args", "command"):
            if key in want:
                entry[key] = want[key]
        if "resources" in want:
            entry["resources"] = _smp_resources(want["resources"], other.get("resources") or {})
        containers.append(entry)
    if containers:
        spec["template"] = {"spec": {"containers": containers}}
    body["spec"] = spec
    return body


def json_patch(edits: Sequence[ContainerEdit], replicas: int | None, *, to: Literal["after", "before"],
               resource_version: str | None = None) -> list[Json]:
    """A custom resource's JSON patch (RFC 6902; CRDs take no strategic merge), guarded by a `test` of the
    resourceVersion it was computed from."""
    ops: list[Json] = []
    if resource_version is not None:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    for e in edits:
        want = e.after if to == "after" else e.before
        base = f"{e.spec_path}/containers/{e.index}"
        for key in ("args", "command"):
            if key in want:
                ops.append({"op": "replace", "path": f"{base}/{key}", "value": want[key]})
        if "resources" in want:
            ops.append({"op": "add", "path": f"{base}/resources", "value": want["resources"]})
    if replicas is not None:
        ops.append({"op": "replace", "path": "/spec/replicas", "value": replicas})
    return ops


# ----- rollout status ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout:
    """How a rollout stands: done, waiting (with what for) or stuck (it will not finish by itself)."""

    state: Literal["done", "waiting", "stuck"]
    message: str


def _condition(obj: Mapping[str, Any], kind: str) -> Json | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == kind), None)


def deployment_rollout(obj: Mapping[str, Any]) -> Rollout:
    """kubectl rollout status's judgement of a Deployment (k8s.io/kubectl/pkg/polymorphichelpers/rollout_status)."""
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if int(meta.get("generation", 0)) > int(st.get("observedGeneration", 0)):
        return Rollout("waiting", "waiting for the new spec to be observed")
    cond = _condition(obj, "Progressing")
    if cond is not None and cond.get("reason") == "ProgressDeadlineExceeded":
        return Rollout("stuck", f"exceeded its progress deadline: {cond.get('message', '')}".rstrip(": "))
    want = int(spec.get("replicas", 1))
    updated, total = int(st.get("updatedReplicas", 0)), int(st.get("replicas", 0))
    available = int(st.get("availableReplicas", 0))
    if updated < want:
        return Rollout("waiting", f"{updated} of {want} new replicas updated")
    if total > updated:
        return Rollout("waiting", f"{total - updated} old replicas pending termination")
    if available < updated:
        return Rollout("waiting", f"{available} of {updated} updated replicas available")
    return Rollout("done", f"rolled out: {available} of {want} replicas available")


def lws_rollout(obj: Mapping[str, Any], *, seen_progress: bool) -> Rollout:
    """A LeaderWorkerSet's rollout: observed, no update in progress, every group updated and ready. An LWS without
    status.observedGeneration (older controllers) counts only after it was seen in progress once."""
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if "observedGeneration" in st:
        if int(meta.get("generation", 0)) > int(st["observedGeneration"]):
            return Rollout("waiting", "waiting for the new spec to be observed")
    elif not seen_progress:
        return Rollout("waiting", "waiting for the controller to start the update")
    want = int(spec.get("replicas", 1))
    updating = _condition(obj, "UpdateInProgress")
    updated, ready = int(st.get("updatedReplicas", 0)), int(st.get("readyReplicas", 0))
    if updating is not None and updating.get("status") == "True":
        return Rollout("waiting", f"update in progress: {updated} of {want} groups updated, {ready} ready")
    if updated < want or ready < want:
        return Rollout("waiting", f"{updated} of {want} groups updated, {ready} ready")
    return Rollout("done", f"rolled out: {ready} of {want} groups ready")


def unschedulable(pods: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(pod, the scheduler's message) for each Pending pod of a PodList the scheduler marked Unschedulable."""
    out = []
    for pod in pods.get("items") or ():
        if (pod.get("status") or {}).get("phase") != "Pending":
            continue
        cond = _condition(pod, "PodScheduled")
        if cond is not None and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            out.append((str((pod.get("metadata") or {}).get("name")), str(cond.get("message", ""))))
    return out
