"""The lease as a Kubernetes `coordination.k8s.io/v1` Lease, over the API server's REST API with httpx.

As client-go's leader election does it: the holder writes `holderIdentity`, `leaseDurationSeconds` and
`renewTime`; every write carries the `resourceVersion` last read, so of two replicas writing at once the API
server takes one and answers the other 409 Conflict (optimistic concurrency). A candidate takes the lease over
only when it has seen the same record, unchanged, for `leaseDurationSeconds` on its own monotonic clock: no
two machines' clocks are compared. The fencing token is `leaseTransitions`, raised by every new holder.

No API server runs here: the tests replay API exchanges written from the API reference (tests/serve/
test_lease_kube.py), so this backend is thin on purpose and proved on a real cluster only by its users.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from doctor.leader.store import Grant, Holder, LeaseError, LeaseLost

SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def _micro(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def in_cluster_url(environ: Mapping[str, str]) -> str | None:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


class KubeLeaseStore:
    """The Lease `namespace/name` through the API server at `api_url`, authenticated with a bearer token."""

    name = "kubernetes"

    def __init__(self, api_url: str, *, namespace: str, lease_name: str, token: str | None,
                 ca_file: Path | None = None, timeout_s: float = 2.0,
                 transport: httpx.AsyncBaseTransport | None = None,
                 monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        verify: Any = str(ca_file) if ca_file is not None else True
        self._client = httpx.AsyncClient(base_url=api_url.rstrip("/"), headers=headers, timeout=timeout_s,
                                         transport=transport, verify=verify, trust_env=False)
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace, self.lease_name = namespace, lease_name
        self.monotonic, self.wall = monotonic, wall
        self._observed: tuple[str, float] | None = None  # (resourceVersion, when this replica first saw it)

    async def _request(self, method: str, url: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            r = await self._client.request(method, url, json=body)
        except httpx.HTTPError as exc:
            raise LeaseError(f"kubernetes API unreachable: {type(exc).__name__}: {exc}") from None
        if r.status_code in (401, 403):
            raise LeaseError(f"kubernetes API: HTTP {r.status_code} on {method} {url}: the service account needs "
                             "get, create and update on leases.coordination.k8s.io")
        if r.status_code >= 500 or r.status_code not in (200, 201, 404, 409):
            raise LeaseError(f"kubernetes API: HTTP {r.status_code} on {method} {url}: {r.text[:200]}")
        return r

    async def _get(self) -> dict[str, Any] | None:
        r = await self._request("GET", f"{self.path}/{self.lease_name}")
        if r.status_code == 404:
            return None
        doc = r.json()
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            raise LeaseError("kubernetes API: a Lease without metadata")
        return doc

    def _spec(self, holder: str, lease_s: float, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = _micro(self.wall())
        return {"holderIdentity": holder, "leaseDurationSeconds": max(1, round(lease_s)),
                "acquireTime": acquired or now, "renewTime": now, "leaseTransitions": transitions}

    def _grant(self, doc: dict[str, Any], lease_s: float) -> Grant:
        spec = doc.get("spec") or {}
        return Grant(str(spec.get("holderIdentity")), int(spec.get("leaseTransitions") or 0),
                     float(spec.get("leaseDurationSeconds") or lease_s), str(doc["metadata"]["resourceVersion"]))

    async def try_acquire(self, holder: str, lease_s: float) -> Grant | None:
        doc = await self._get()
        if doc is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.lease_name, "namespace": self.namespace},
                    "spec": self._spec(holder, lease_s, 0, None)}
            r = await self._request("POST", self.path, body)
            return self._grant(r.json(), lease_s) if r.status_code == 201 else None
        spec, rv = doc.get("spec") or {}, str(doc["metadata"].get("resourceVersion"))
        current = spec.get("holderIdentity")
        if current and current != holder:
            now = self.monotonic()
            if self._observed is None or self._observed[0] != rv:
                self._observed = (rv, now)  # a new record: its duration counts from now, on this clock
                return None
            if now - self._observed[1] < float(spec.get("leaseDurationSeconds") or lease_s):
                return None
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if current == holder else 1)
        acquired = spec.get("acquireTime") if current == holder else None
        body = {**doc, "spec": {**spec, **self._spec(holder, lease_s, transitions, acquired)}}
        r = await self._request("PUT", f"{self.path}/{self.lease_name}", body)
        if r.status_code != 200:
            return None  # 409: another replica wrote first; 404: deleted meanwhile
        self._observed = None
        return self._grant(r.json(), lease_s)

    async def renew(self, grant: Grant) -> Grant:
        doc = await self._get()
        if doc is None:
            raise LeaseLost(f"the Lease {self.namespace}/{self.lease_name} was deleted")
        spec = doc.get("spec") or {}
        if spec.get("holderIdentity") != grant.holder:
            raise LeaseLost(f"the Lease is held by {spec.get('holderIdentity')!r} now")
        body = {**doc, "spec": {**spec, "renewTime": _micro(self.wall())}}
        r = await self._request("PUT", f"{self.path}/{self.lease_name}", body)
        if r.status_code == 409:
            raise LeaseLost("the Lease changed under this replica (409 Conflict)")
        if r.status_code != 200:
            raise LeaseLost(f"the Lease {self.namespace}/{self.lease_name} was deleted")
        return self._grant(r.json(), grant.lease_s)

    async def release(self, grant: Grant) -> None:
        doc = await self._get()
        if doc is None or (doc.get("spec") or {}).get("holderIdentity") != grant.holder:
            return
        spec = {**doc["spec"], "holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro(self.wall())}
        await self._request("PUT", f"{self.path}/{self.lease_name}", {**doc, "spec": spec})

    async def holder(self) -> Holder:
        doc = await self._get()
        spec = (doc or {}).get("spec") or {}
        return Holder(spec.get("holderIdentity") or None, spec.get("leaseTransitions"))

    async def aclose(self) -> None:
        await self._client.aclose()


def service_account(environ: Mapping[str, str], root: Path = SA) -> tuple[str | None, str | None, Path | None]:
    """In a pod: the API server's URL, the service account's token and CA, and (beside them) its namespace."""
    token = (root / "token").read_text().strip() if (root / "token").exists() else None
    ca = root / "ca.crt" if (root / "ca.crt").exists() else None
    return in_cluster_url(environ), token, ca


def pod_namespace(environ: Mapping[str, str], root: Path = SA) -> str:
    ns = root / "namespace"
    return environ.get("POD_NAMESPACE") or (ns.read_text().strip() if ns.exists() else "default")
