"""[engines.kubernetes]: the Deployment or LeaderWorkerSet an engine runs as; see doctor/remedy/k8s_launcher.py.

Kept beside doctor/config.py, which reads the sub-table through `k8s_workload`; errors are the same
`FILE:LINE: engines[i].kubernetes.KEY: ...` ConfigErrors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from doctor.config_schema import Table

K8S_KEYS = ("namespace", "deployment", "leaderworkerset", "container", "context", "gpu_resource", "max_replicas",
            "rollout_timeout_s")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")  # RFC 1123 subdomain, as object names are


@dataclass(frozen=True)
class K8sWorkload:
    """Where an engine runs in Kubernetes: one Deployment or one LeaderWorkerSet in `namespace`.

    `container` names the vLLM container (None: the pod's only container); `context` the kubeconfig context
    (None: in-cluster when run in a pod, else the kubeconfig's current one); `gpu_resource` the extended resource a
    tensor-parallel change sets the limit of; `max_replicas` caps a scale-out (None: no cap here); the doctor waits
    for a rollout at most `rollout_timeout_s` (the Deployment's progressDeadlineSeconds usually ends it first).
    """

    namespace: str = "default"
    deployment: str | None = None
    leaderworkerset: str | None = None
    container: str | None = None
    context: str | None = None
    gpu_resource: str = "nvidia.com/gpu"
    max_replicas: int | None = None
    rollout_timeout_s: float = 900.0

    @property
    def kind(self) -> str:
        return "Deployment" if self.deployment else "LeaderWorkerSet"

    @property
    def name(self) -> str:
        return cast(str, self.deployment or self.leaderworkerset)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def k8s_workload(t: Table) -> K8sWorkload:
    """Read one engine's `kubernetes` table (exactly one of deployment / leaderworkerset)."""
    t.only(K8S_KEYS)
    names = {}
    for key in ("namespace", "deployment", "leaderworkerset"):
        value = t.string(key)
        if value is not None and not _DNS_NAME.match(value):
            raise t.error(key, f"expected a Kubernetes object name (lower-case letters, digits, '-', '.'), got "
                               f"{value!r}")
        names[key] = value
    if bool(names["deployment"]) == bool(names["leaderworkerset"]):
        raise t.error("deployment", "give exactly one of deployment (a Deployment's name) or leaderworkerset "
                                    "(a LeaderWorkerSet's name)")
    return K8sWorkload(
        namespace=names["namespace"] or "default", deployment=names["deployment"],
        leaderworkerset=names["leaderworkerset"], container=t.string("container"), context=t.string("context"),
        gpu_resource=cast(str, t.string("gpu_resource", "nvidia.com/gpu")),
        max_replicas=t.integer("max_replicas", minimum=1, maximum=10_000),
        rollout_timeout_s=cast(float, t.duration("rollout_timeout_s", 900.0, maximum=86400.0)))
