"""The lease in etcd v3, through etcd's own JSON gateway (`/v3/...`, etcd >= 3.4) with httpx.

The standard etcd election recipe: grant a lease of the duration, then one transaction that puts the election key
with that lease only if the key does not exist (`create_revision == 0`); whoever's put wins holds the lease while
it keeps it alive (`/v3/lease/keepalive`); when the holder stops, etcd deletes the key as the lease expires and
the next replica's transaction wins. The fencing token is the key's create revision: etcd's revision grows with
every write, so each new holder's token is larger than every earlier holder's.

Why not the `etcd3` Python client: it is unmaintained (last release 2020) and pins an old protobuf that the rest
of the stack does not install; the gateway speaks plain JSON over the HTTP the doctor already uses.
"""

from __future__ import annotations

import base64
import contextlib
import math
from collections.abc import Sequence
from typing import Any

import httpx

from doctor.leader.store import Grant, Holder, LeaseError, LeaseLost

NOT_FOUND = 5  # gRPC status code etcd answers for a lease it does not know


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str | None) -> str:
    return base64.b64decode(text or "").decode(errors="replace")


class EtcdLeaseStore:
    """A leader lease at `key` in the etcd cluster at `endpoints` (tried in order until one answers)."""

    name = "etcd"

    def __init__(self, endpoints: Sequence[str], *, key: str = "serving-doctor/leader", timeout_s: float = 2.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.key = key
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport, trust_env=False)

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        errors = []
        for base in self.endpoints:
            try:
                r = await self._client.post(f"{base}/v3/{path}", json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{base}: {type(exc).__name__}: {exc}")
                continue
            try:
                doc = r.json()
            except ValueError:
                raise LeaseError(f"etcd {base}/v3/{path}: HTTP {r.status_code}, not JSON: {r.text[:200]!r}") from None
            if not isinstance(doc, dict):
                raise LeaseError(f"etcd {base}/v3/{path}: expected a JSON object, got {type(doc).__name__}")
            if r.status_code >= 400 or "error" in doc:
                if doc.get("code") == NOT_FOUND:
                    raise LeaseLost(f"etcd: {doc.get('message') or doc.get('error')}")
                raise LeaseError(f"etcd {base}/v3/{path}: HTTP {r.status_code}: {doc.get('message') or doc}")
            return doc
        raise LeaseError("etcd unreachable: " + "; ".join(errors))

    async def _kv(self) -> dict[str, Any] | None:
        doc = await self._call("kv/range", {"key": _b64(self.key)})
        kvs = doc.get("kvs") or []
        return kvs[0] if kvs else None

    async def try_acquire(self, holder: str, lease_s: float) -> Grant | None:
        kv = await self._kv()
        if kv is not None:
            if _unb64(kv.get("value")) == holder and kv.get("lease"):  # still ours (etcd restarted and kept it)
                grant = Grant(holder, int(kv.get("create_revision", 0)), lease_s, str(kv["lease"]))
                try:
                    return await self.renew(grant)
                except LeaseLost:
                    return None
            return None
        granted = await self._call("lease/grant", {"TTL": max(1, math.ceil(lease_s))})
        lease = str(granted.get("ID", ""))
        if not lease:
            raise LeaseError(f"etcd granted no lease: {granted}")
        doc = await self._call("kv/txn", {
            "compare": [{"key": _b64(self.key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
            "success": [{"request_put": {"key": _b64(self.key), "value": _b64(holder), "lease": lease}}],
            "failure": [{"request_range": {"key": _b64(self.key)}}]})
        if not doc.get("succeeded"):
            await self._revoke(lease)
            return None
        return Grant(holder, int(doc["header"]["revision"]), min(lease_s, float(granted.get("TTL", lease_s))), lease)

    async def renew(self, grant: Grant) -> Grant:
        doc = await self._call("lease/keepalive", {"ID": grant.handle})
        ttl = int((doc.get("result") or {}).get("TTL", 0))
        if ttl <= 0:
            raise LeaseLost(f"etcd: lease {grant.handle} has expired")
        kv = await self._kv()  # the key is ours still (nobody deleted it by hand)
        if kv is None or _unb64(kv.get("value")) != grant.holder or str(kv.get("lease")) != grant.handle:
            raise LeaseLost(f"etcd: {self.key} is no longer held by {grant.holder}")
        return grant

    async def release(self, grant: Grant) -> None:
        await self._revoke(grant.handle)

    async def _revoke(self, lease: str) -> None:
        with contextlib.suppress(LeaseLost):  # gone already
            await self._call("lease/revoke", {"ID": lease})

    async def holder(self) -> Holder:
        kv = await self._kv()
        if kv is None:
            return Holder(None)
        return Holder(_unb64(kv.get("value")), int(kv.get("create_revision", 0)))

    async def aclose(self) -> None:
        await self._client.aclose()
