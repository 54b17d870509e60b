"""The Kubernetes launcher: relaunch and scale out engines by patching their Deployment or LeaderWorkerSet.

A thin layer over the official client (`kubernetes`, the optional extra of that name; imported only when an action
runs, so `doctor diagnose` never pays for it): read the workload, patch the vLLM container's flags (and the
replicas, and the GPU limit for a tensor-parallel change), watch the rollout as `kubectl rollout status` judges it,
and patch the previous values back (`kubectl rollout undo`'s effect) when it exceeds its progress deadline or a new
pod cannot be scheduled, which is refused with the scheduler's reason instead of waited on. Deployments take a
strategic-merge patch; a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, a custom resource) a JSON patch.
The pure decisions live in doctor.remedy.k8s_spec.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from doctor.config_k8s import K8sWorkload
from doctor.remedy.k8s_spec import (
    ContainerEdit,
    Flags,
    Json,
    Rollout,
    container_index,
    deployment_rollout,
    edit_container,
    json_patch,
    lws_rollout,
    strategic_patch,
    unschedulable,
)
from doctor.remedy.launcher import CONTROL_KEYS, LAUNCHER_KINDS, LOWER_FACTOR
from doctor.remedy.model import ActuatorContext, ActuatorError, Applied, EngineTarget, LaunchedEngine, Refused
from playbooks.model import Action

if TYPE_CHECKING:
    from doctor.config import DoctorConfig
    from doctor.remedy.actuators import LauncherFactory

LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
FIELD_MANAGER = "serving-doctor"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # what `kubectl rollout restart` sets
REPLICA_KEYS = ("add_replicas", "replicas", "set_replicas")
ApiFactory = Callable[[K8sWorkload], Any]  # -> kubernetes.client.ApiClient for the workload's context


def kube_api_client(workload: K8sWorkload) -> Any:
    """The client for `workload`: in-cluster credentials inside a pod (no context named), else the kubeconfig."""
    from kubernetes import client, config

    try:
        if workload.context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            return client.ApiClient()
        cfg = client.Configuration()
        config.load_kube_config(context=workload.context, client_configuration=cfg)
        return client.ApiClient(cfg)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise ActuatorError(f"cannot configure the Kubernetes client for {workload.describe()}: {exc}") from None


def _status_message(exc: Any) -> str:
    """The `message` of the metav1.Status the API server sent with an error, else its reason."""
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


def api_error(exc: Exception, what: str, wl: K8sWorkload) -> ActuatorError:
    """An API failure as the on-call engineer needs it: what was tried, on which object, what the server said."""
    status = getattr(exc, "status", None)
    if status is None:  # urllib3: the API server did not answer at all
        return ActuatorError(f"{what} {wl.describe()}: cannot reach the Kubernetes API server ({exc})")
    msg = _status_message(exc)
    hints = {403: "forbidden (RBAC): the doctor's service account needs get, patch and watch on "
                  f"{wl.kind.lower()}s and list on pods and events in namespace {wl.namespace}",
             404: "not found (check kubernetes.namespace and the workload's name in the config)",
             409: "conflict: it changed since the doctor read it; nothing was changed, the next cycle reads it again",
             422: "the API server rejected the change as invalid"}
    hint = hints.get(int(status), f"the API server answered {status} {getattr(exc, 'reason', '')}".rstrip())
    return ActuatorError(f"{what} {wl.describe()}: {hint}: {msg}")


class _Api:
    """The few calls the launcher makes on one workload, through the official client; JSON in, JSON out."""

    def __init__(self, api_client: Any, wl: K8sWorkload) -> None:
        self.wl, self.api_client = wl, api_client

    # Each API group's module is large (its first import builds thousands of validators): made when first used.
    @functools.cached_property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    @functools.cached_property
    def apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.api_client)

    @functools.cached_property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    def _json(self, resp: Any) -> Json:
        return dict(json.loads(resp.data))

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kw)
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, what, self.wl) from None

    def read(self) -> Json:
        wl = self.wl
        if wl.deployment:
            resp = self.call("reading", self.apps.read_namespaced_deployment, wl.name, wl.namespace,
                             _preload_content=False)
        else:
            resp = self.call("reading", self.custom.get_namespaced_custom_object, LWS_GROUP, LWS_VERSION,
                             wl.namespace, LWS_PLURAL, wl.name, _preload_content=False)
        return self._json(resp)

    def patch(self, body: Any, what: str = "patching") -> Json:
        wl = self.wl
        if wl.deployment:
            resp = self.call(what, self.apps.patch_namespaced_deployment, wl.name, wl.namespace, body,
                             field_manager=FIELD_MANAGER, _content_type=SMP, _preload_content=False)
        else:
            resp = self.call(what, self.custom.patch_namespaced_custom_object, LWS_GROUP, LWS_VERSION,
                             wl.namespace, LWS_PLURAL, wl.name, body, field_manager=FIELD_MANAGER,
                             _content_type=JSON_PATCH, _preload_content=False)
        return self._json(resp)

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[Json]:
        """The workload's versions after `resource_version`, until the server ends the watch (`timeout_s`)."""
        wl = self.wl
        from kubernetes import watch

        w = watch.Watch()
        kw: dict[str, Any] = {"field_selector": f"metadata.name={wl.name}", "resource_version": resource_version,
                              "timeout_seconds": timeout_s, "_request_timeout": timeout_s + 10}
        if wl.deployment:
            stream = w.stream(self.apps.list_namespaced_deployment, wl.namespace, **kw)
        else:
            stream = w.stream(self.custom.list_namespaced_custom_object, LWS_GROUP, LWS_VERSION, wl.namespace,
                              LWS_PLURAL, **kw)
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            for event in stream:
                if event.get("type") in ("ADDED", "MODIFIED"):
                    yield dict(event["raw_object"])
        except (ApiException, HTTPError) as exc:
            if getattr(exc, "status", None) == 410:  # Gone: the version is too old; the caller reads afresh
                return
            raise api_error(exc, "watching", wl) from None

    def pods(self, selector: str) -> Json:
        return self._json(self.call("listing the pods of", self.core.list_namespaced_pod, self.wl.namespace,
                                    label_selector=selector, _preload_content=False))

    def events(self, pod: str) -> Json:
        return self._json(self.call("listing the events of", self.core.list_namespaced_event, self.wl.namespace,
                                    field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}",
                                    _preload_content=False))


def _selector(obj: Mapping[str, Any], wl: K8sWorkload) -> str:
    if wl.deployment:
        labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return f"{LWS_NAME_LABEL}={wl.name}"


def restart_patch(obj: Mapping[str, Any], wl: K8sWorkload, stamp: str, rv: str | None) -> Any:
    """`kubectl rollout restart`: the pod templates' restartedAt annotation set to `stamp`."""
    if wl.deployment:
        return {**({"metadata": {"resourceVersion": rv}} if rv else {}),
                "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
    ops: list[Json] = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}] if rv else []
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
    for part in ("leaderTemplate", "workerTemplate"):
        if part in lwt:
            meta = dict(lwt[part].get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}), RESTARTED_AT: stamp}
            ops.append({"op": "add", "path": f"/spec/leaderWorkerTemplate/{part}/metadata", "value": meta})
    return ops


def _templates(obj: Mapping[str, Any], wl: K8sWorkload) -> list[tuple[str, Json, bool]]:
    """(JSON pointer of a pod spec, the spec, whether its vLLM container carries the flags): the Deployment's one
    template; an LWS's leader template (flags) and worker template (GPUs), or its worker template alone."""
    spec = obj.get("spec") or {}
    if wl.deployment:
        return [("/spec/template/spec", ((spec.get("template") or {}).get("spec") or {}), True)]
    lwt = spec.get("leaderWorkerTemplate") or {}
    worker = ("/spec/leaderWorkerTemplate/workerTemplate/spec", (lwt.get("workerTemplate") or {}).get("spec") or {})
    if lwt.get("leaderTemplate"):
        return [("/spec/leaderWorkerTemplate/leaderTemplate/spec", lwt["leaderTemplate"].get("spec") or {}, True),
                (*worker, False)]
    return [(*worker, True)]


@dataclass(frozen=True)
class _Outcome:
    """A rollout's end as the launcher acts on it: done, failed (roll back, ActuatorError) or refused (roll back)."""

    state: Literal["done", "failed", "refused"]
    message: str


class K8sLauncher:
    """Engines as Kubernetes workloads (Deployment or LeaderWorkerSet). Implements Launcher and the Actuator
    protocol for relaunch and scale_out; engines without a `kubernetes` table are refused."""

    kinds: tuple[str, ...] = LAUNCHER_KINDS

    def __init__(self, workloads: Mapping[str, K8sWorkload], *, api_factory: ApiFactory = kube_api_client,
                 clock: Callable[[], float] = time.monotonic, now: Callable[[], float] = time.time,
                 watch_s: int = 30) -> None:
        """I/O passed in: the client factory (tests point it at recorded API answers), the clock of the rollout
        deadline, the wall clock of a restart's stamp; `watch_s` bounds one watch request, after which the pods
        are checked for scheduling."""
        self.workloads = dict(workloads)
        self.api_factory = api_factory
        self.clock, self.now = clock, now
        self.watch_s = watch_s
        self._clients: dict[str | None, Any] = {}

    def adopt(self) -> list[LaunchedEngine]:
        """Nothing to adopt: the cluster keeps the pods, and the API server the state a later run reads."""
        return []

    def _api(self, wl: K8sWorkload) -> _Api:
        if wl.context not in self._clients:
            self._clients[wl.context] = self.api_factory(wl)
        return _Api(self._clients[wl.context], wl)

    def workload(self, name: str) -> K8sWorkload:
        wl = self.workloads.get(name)
        if wl is None:
            raise Refused(f"engine {name!r} has no [engines.kubernetes] table in the config (engines in Kubernetes: "
                          f"{', '.join(sorted(self.workloads)) or 'none'})")
        return wl

    # ----- planning ------------------------------------------------------------------------------

    def resolve(self, obj: Mapping[str, Any], wl: K8sWorkload, target: EngineTarget,
                changes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The vLLM flags to change ("lower" resolved against the workload's own flags, else the config's) and
        their values now (None: not set; tensor_parallel_size 1, vLLM's default), for the inverse action."""
        path, spec, _ = next(t for t in _templates(obj, wl) if t[2])
        flags = Flags.of(spec["containers"][container_index(spec, wl.container, f"{wl.describe()} {path}")])
        out: dict[str, Any] = {}
        for key, value in changes.items():
            if key in CONTROL_KEYS or key in REPLICA_KEYS or key == "remove_replica":
                continue
            if value == "lower":
                raw = flags.get(key)
                current = target.args.get(key) if raw is None or isinstance(raw, bool) else raw
                try:
                    number = float(str(current))
                except ValueError:
                    raise Refused(f"{key}='lower' but the current {key} of {target.name} is unknown (not in the "
                                  f"container's flags nor the config)") from None
                value = max(1, int(number * LOWER_FACTOR)) if float(number).is_integer() else number * LOWER_FACTOR
            if isinstance(value, str) and any(c in value for c in ";&|`$\n"):
                raise Refused(f"{key}: {value!r} is not a plain value")
            out[key] = value
        prev: dict[str, Any] = {}
        for key in out:
            now = flags.get(key)
            prev[key] = int(now) if isinstance(now, str) and now.isdigit() else now
        if prev.get("tensor_parallel_size", 0) is None:
            prev["tensor_parallel_size"] = 1  # undoing also sets the GPU limit back to 1
        return out, prev

    def _replicas(self, obj: Mapping[str, Any], wl: K8sWorkload, p: Mapping[str, Any]) -> int | None:
        current = int((obj.get("spec") or {}).get("replicas", 1))
        if "set_replicas" in p:
            want = int(p["set_replicas"])
        elif any(k in p for k in ("add_replicas", "replicas")):
            add = int(p.get("add_replicas", p.get("replicas", 0)) or 0)
            if add < 1:
                raise Refused(f"add_replicas must be >= 1, got {add}")
            want = current + add
        else:
            return None
        if want < 0 or (wl.max_replicas is not None and want > wl.max_replicas):
            raise Refused(f"{wl.describe()}: {want} replicas is outside 0..{wl.max_replicas} (kubernetes.max_replicas)")
        return want

    def plan(self, obj: Mapping[str, Any], wl: K8sWorkload, target: EngineTarget, ctx: ActuatorContext,
             params: Mapping[str, Any]) -> tuple[list[ContainerEdit], int | None, dict[str, Any], dict[str, Any]]:
        """The container edits, the new replica count (None: unchanged), the flags changed and their values now."""
        changes, before = self.resolve(obj, wl, target, params)
        tp = changes.get("tensor_parallel_size")
        if tp is not None:
            cap = ctx.bounds.get("tensor_parallel_max")
            if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or (cap and tp > int(cap)):
                raise Refused(f"tensor_parallel_size {tp!r} is outside 1..{cap or 'any'}")
        edits = []
        for path, spec, flags in _templates(obj, wl):
            where = f"{wl.describe()} {path}"
            if flags:
                i = container_index(spec, wl.container, where)
            elif tp is not None:  # an LWS worker: the container holding the GPUs, by the leader's name or alone
                names = [c.get("name") for c in spec.get("containers") or ()]
                i = names.index(wl.container) if wl.container in names else container_index(spec, None, where)
            else:
                continue
            edit = edit_container(path, spec, i, changes, gpu_resource=wl.gpu_resource,
                                  gpus=tp, flags=flags)
            if edit.after != edit.before:
                edits.append(edit)
        replicas = self._replicas(obj, wl, params)
        if not edits and replicas is None and (changes or any(k in params for k in REPLICA_KEYS)):
            raise Refused(f"{wl.describe()}: the action changes nothing (params {dict(params)})")
        return edits, replicas, changes, before

    # ----- acting --------------------------------------------------------------------------------

    def check(self, action: Action, ctx: ActuatorContext) -> None:
        if action.kind not in self.kinds:
            raise Refused(f"{action.kind!r} is not a launcher action ({', '.join(self.kinds)})")
        if action.target not in ctx.engines:
            raise Refused(f"unknown engine {action.target!r} (configured: {', '.join(sorted(ctx.engines)) or 'none'})")
        self.workload(action.target)
        p = action.params
        if action.kind == "scale_out" and "remove_replica" in p:
            raise Refused("remove_replica names a local replica; a Kubernetes workload is scaled by set_replicas")
        if action.kind == "scale_out" and "tensor_parallel_size" not in p and not any(k in p for k in REPLICA_KEYS):
            raise Refused("scale_out needs params.tensor_parallel_size or params.add_replicas")

    async def apply(self, action: Action, ctx: ActuatorContext) -> Applied:
        self.check(action, ctx)
        return await self.relaunch(ctx.engines[action.target], ctx, action.params, kind=action.kind)

    async def relaunch(self, target: EngineTarget, ctx: ActuatorContext, changes: Mapping[str, Any],
                       *, kind: str = "relaunch") -> Applied:
        """Patch the workload and watch its rollout (in a thread: the official client is synchronous)."""
        wl = self.workload(target.name)
        return await asyncio.to_thread(self._relaunch, wl, target, ctx, dict(changes), kind)

    def _relaunch(self, wl: K8sWorkload, target: EngineTarget, ctx: ActuatorContext, params: dict[str, Any],
                  kind: str) -> Applied:
        api = self._api(wl)
        obj = api.read()
        edits, replicas, changes, before = self.plan(obj, wl, target, ctx, params)
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        old_replicas = int((obj.get("spec") or {}).get("replicas", 1))
        build = strategic_patch if wl.deployment else json_patch
        forward: Any = build(edits, replicas, to="after", resource_version=rv or None)
        undo: Any = build(edits, None if replicas is None else old_replicas, to="before")
        said = ", ".join([*(f"{k}={v}" for k, v in changes.items()),
                          *([f"replicas {old_replicas} -> {replicas}"] if replicas is not None else [])])
        if not edits and replicas is None:  # a relaunch as it is (defragment's fallback): kubectl rollout restart
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now()))
            forward, undo = restart_patch(obj, wl, stamp, rv or None), None
            said = f"restart ({RESTARTED_AT}={stamp})"
        patched = api.patch(forward)
        gen = (patched.get("metadata") or {}).get("generation")
        steps = [f"patched {wl.describe()}: {said} (generation {gen})"]
        outcome = self._watch_rollout(api, wl, patched)
        if outcome.state != "done":
            steps.append(self._undo(api, wl, undo))
            text = f"{target.name}: {wl.describe()} {outcome.message}; {steps[-1]}"
            if outcome.state == "refused":
                raise Refused(text)
            raise ActuatorError(text)
        steps.append(f"{wl.describe()} {outcome.message}")
        for key, value in changes.items():
            target.args[key] = value
        inverse: Action | None
        if kind == "scale_out":
            undo_params: dict[str, Any] = {"restore": True}
            if "tensor_parallel_size" in changes:
                undo_params["tensor_parallel_size"] = before.get("tensor_parallel_size")
            if replicas is not None:
                undo_params["set_replicas"] = old_replicas
            inverse = Action("scale_out", target.name, undo_params, risk="medium",
                             description=f"patch {wl.describe()} back")
        else:
            inverse = Action("relaunch", target.name, {**before, "restore": True}, risk="medium",
                             description="relaunch with the previous arguments") if changes else None
        return Applied(inverse, tuple(steps), {"kubernetes": wl.describe(), "generation": gen,
                                               "args": dict(changes), "replicas": replicas})

    def _undo(self, api: _Api, wl: K8sWorkload, undo: Any) -> str:
        if undo is None:
            return "nothing to patch back (a restart: the pods that are still ready keep serving)"
        try:
            back = api.patch(undo, "rolling back")
        except ActuatorError as exc:
            return f"rollback FAILED ({exc}); the workload may still carry the change"
        return (f"rolled back: the previous values were patched back (generation "
                f"{(back.get('metadata') or {}).get('generation')}); the previous pods return")

    def _watch_rollout(self, api: _Api, wl: K8sWorkload, obj: Json) -> _Outcome:
        deadline = self.clock() + wl.rollout_timeout_s
        seen_progress = False

        def judge(o: Json) -> Rollout:
            nonlocal seen_progress
            if wl.deployment:
                return deployment_rollout(o)
            seen_progress = seen_progress or lws_rollout(o, seen_progress=True).state == "waiting"
            return lws_rollout(o, seen_progress=seen_progress)

        state = judge(obj)
        rv = str(obj["metadata"]["resourceVersion"])
        while state.state == "waiting":
            remaining = deadline - self.clock()
            if remaining <= 0:
                return _Outcome("failed", f"did not finish rolling out within {wl.rollout_timeout_s:g}s "
                                          f"({state.message})")
            versions = 0
            for version in api.watch(rv, max(1, min(self.watch_s, int(remaining)))):
                versions += 1
                rv = str(version["metadata"]["resourceVersion"])
                state = judge(version)
                if state.state != "waiting":
                    break
            if state.state == "stuck":
                return _Outcome("failed", state.message)
            if state.state == "done":
                break
            if not versions:  # the watch ended with nothing new (or 410 Gone): read the current version afresh
                obj = api.read()
                rv, state = str(obj["metadata"]["resourceVersion"]), judge(obj)
            blocked = self._blocked(api, wl, obj)
            if blocked:
                return _Outcome("refused", f"cannot roll out: {blocked}")
        return _Outcome("done", state.message)

    def _blocked(self, api: _Api, wl: K8sWorkload, obj: Json) -> str | None:
        """The scheduler's reason when a new pod cannot be placed and no node is being added for it."""
        for pod, message in unschedulable(api.pods(_selector(obj, wl))):
            events = api.events(pod).get("items") or []
            if any(e.get("reason") == "TriggeredScaleUp" for e in events):  # cluster-autoscaler is adding a node
                continue
            failed = [e for e in events if e.get("reason") == "FailedScheduling"]
            latest = max(failed, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""), default=None)
            return f"pod {pod} is Pending: FailedScheduling: {(latest or {}).get('message') or message}"
        return None


def launcher_factory(config: DoctorConfig) -> LauncherFactory | None:
    """The Kubernetes launcher when any configured engine has a `kubernetes` table, else None (local processes)."""
    workloads = {e.name: e.kubernetes for e in config.engines if e.kubernetes is not None}
    if not workloads:
        return None
    return lambda router: K8sLauncher(workloads)
