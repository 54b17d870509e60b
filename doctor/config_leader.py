"""doctor.toml's `[serve.leader]`: two `doctor serve` replicas elect one to act through a lease (doctor.leader).

Absent: this daemon acts alone, as before. `store = "etcd"` (bare metal: etcd v3's JSON gateway at `endpoints`)
or `store = "kubernetes"` (a coordination.k8s.io/v1 Lease; in a pod the API server, token, CA and namespace are
the service account's unless given).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from doctor.config_schema import Table

Resolve = Callable[[str | None, Path | None], Path | None]
LEADER_KEYS = ("store", "lease_s", "renew_s", "margin_s", "retry_s", "identity", "endpoints", "key", "namespace",
               "lease_name", "api_url", "token_file", "ca_file", "timeout_s")
STORES = ("etcd", "kubernetes")


@dataclass(frozen=True)
class LeaderSettings:
    """The election: the store, the lease's timing, this replica's identity and where the lease lives."""

    store: str = "etcd"
    lease_s: float = 15.0  # how long a lease lasts without renewal
    renew_s: float = 5.0  # renew this often (well before the lease's end)
    margin_s: float = 3.0  # stop acting this long before the lease could have expired in the store
    retry_s: float = 1.0  # a standby's look at the lease, a failed renewal's retry
    timeout_s: float = 2.0  # one request to the store
    identity: str = ""  # default: the host's name; the process id and a nonce are added at start
    endpoints: tuple[str, ...] = ("http://127.0.0.1:2379",)  # etcd
    key: str = "serving-doctor/leader"  # etcd
    namespace: str | None = None  # kubernetes (default: the pod's)
    lease_name: str = "serving-doctor"  # kubernetes
    api_url: str | None = None  # kubernetes (default: in-cluster)
    token_file: Path | None = None  # kubernetes (default: the service account's)
    ca_file: Path | None = None  # kubernetes (default: the service account's)


def leader_settings(t: Table, path: Path | None, resolve: Resolve) -> LeaderSettings | None:
    """Check [serve.leader]; None when the table is absent."""
    if not t.data:
        return None
    t.only(LEADER_KEYS)
    store = cast(str, t.string("store", "etcd", choices=STORES))
    lease = cast(float, t.duration("lease_s", 15.0))
    margin = cast(float, t.duration("margin_s", max(0.5, lease / 5)))
    renew = cast(float, t.duration("renew_s", lease / 3))
    if lease < 2:
        raise t.error("lease_s", f"expected at least 2 s (etcd grants no shorter lease), got {lease:g} s")
    if margin >= lease:
        raise t.error("margin_s", f"must be shorter than lease_s ({lease:g} s), got {margin:g} s")
    if renew >= lease - margin:
        raise t.error("renew_s", f"must be shorter than lease_s - margin_s ({lease - margin:g} s) so that a renewal "
                                 f"comes before this replica must stop acting, got {renew:g} s")
    timeout = cast(float, t.duration("timeout_s", min(2.0, renew)))
    endpoints = t.strings("endpoints", non_empty=t.has("endpoints")) or LeaderSettings.endpoints
    for i, e in enumerate(endpoints):
        if not e.startswith(("http://", "https://")):
            raise t.error("endpoints", f"item {i}: expected an http:// or https:// URL of etcd's client port, "
                                       f"got {e!r}")
    api_url = t.url("api_url")
    return LeaderSettings(
        store=store, lease_s=lease, renew_s=renew, margin_s=margin,
        retry_s=cast(float, t.duration("retry_s", min(1.0, renew))), timeout_s=timeout,
        identity=t.string("identity") or socket.gethostname(), endpoints=endpoints,
        key=t.string("key") or LeaderSettings.key, namespace=t.string("namespace"),
        lease_name=t.string("lease_name") or LeaderSettings.lease_name, api_url=api_url,
        token_file=resolve(t.string("token_file"), path), ca_file=resolve(t.string("ca_file"), path))
