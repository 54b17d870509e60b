"""Build the elector from `[serve.leader]`: the store it names, this replica's identity, the audit's note."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from doctor.config_leader import LeaderSettings
from doctor.leader.elector import Elector
from doctor.leader.etcd import EtcdLeaseStore
from doctor.leader.kube import SA, KubeLeaseStore, pod_namespace, service_account
from doctor.leader.store import LeaseStore


class LeaderSetupError(Exception):
    """[serve.leader] cannot be used here (says what is missing)."""


def store_for(s: LeaderSettings, environ: Mapping[str, str], sa: Path = SA) -> LeaseStore:
    """The store the settings name; LeaderSetupError when the Kubernetes API cannot be found."""
    if s.store == "etcd":
        return EtcdLeaseStore(s.endpoints, key=s.key, timeout_s=s.timeout_s)
    url, token, ca, namespace = _kube(s, environ, sa)
    return KubeLeaseStore(url, namespace=namespace, lease_name=s.lease_name, token=token, ca_file=ca,
                          timeout_s=s.timeout_s)


def problem(s: LeaderSettings, environ: Mapping[str, str], sa: Path = SA) -> str | None:
    """Why the settings cannot be used here (checked before the daemon starts), or None."""
    if s.store != "etcd":
        try:
            _kube(s, environ, sa)
        except LeaderSetupError as exc:
            return str(exc)
    return None


def _kube(s: LeaderSettings, environ: Mapping[str, str], sa: Path) -> tuple[str, str | None, Path | None, str]:
    url, token, ca = service_account(environ, sa)
    if s.token_file is not None:
        try:
            token = s.token_file.read_text().strip()
        except OSError as exc:
            raise LeaderSetupError(f"[serve.leader] token_file {s.token_file}: {exc.strerror or exc}") from None
    url = s.api_url or url
    if url is None:
        raise LeaderSetupError("[serve.leader] store = \"kubernetes\": no api_url and not in a pod "
                               "(KUBERNETES_SERVICE_HOST is unset)")
    return url, token, s.ca_file or ca, s.namespace or pod_namespace(environ, sa)


def identity_of(s: LeaderSettings, environ: Mapping[str, str]) -> str:
    """The configured name (in a pod: its name), this process and a nonce: a restarted replica is a new holder."""
    base = s.identity or environ.get("HOSTNAME", "") or "doctor"
    return f"{base}/{os.getpid()}-{secrets.token_hex(3)}"


def elector_for(s: LeaderSettings, *, note: Callable[..., Any], on_change: Callable[[bool], None],
                environ: Mapping[str, str] | None = None) -> Elector:
    env = os.environ if environ is None else environ
    return Elector(store_for(s, env), identity=identity_of(s, env), lease_s=s.lease_s, renew_s=s.renew_s,
                   margin_s=s.margin_s, retry_s=s.retry_s, note=note, on_change=on_change)
