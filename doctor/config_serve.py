"""doctor.toml's `[serve]` table: how `doctor serve` listens, authenticates, queues alerts and maps them.

Errors are `ConfigError`s naming the file, key and line, like the rest of doctor/config.py. Secrets are never
in the config itself: tokens and passwords are read from files (`*_file`) when the daemon starts.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from doctor.config_leader import LeaderSettings, leader_settings
from doctor.config_schema import Table, describe, suggest
from playbooks import registry

DEFAULT_LISTEN = "127.0.0.1:9361"
Resolve = Callable[[str | None, Path | None], Path | None]
SERVE_KEYS = ("listen", "interval_s", "token_file", "alert_token_file", "read_token_file", "basic_auth_user",
              "basic_auth_password_file", "queue_size", "body_limit_bytes", "alert_wait_s", "history_points",
              "engine_labels", "alert_playbooks", "header_limit_bytes", "tls_cert_file", "tls_key_file", "leader")


@dataclass(frozen=True)
class ServeSettings:
    """[serve]: the daemon's listen address, interval, credentials (as files), alert queue and alert mapping."""

    listen: str = DEFAULT_LISTEN
    interval_s: float = 15.0
    token_file: Path | None = None  # bearer token for state-changing calls (and alerts, unless alert_token_file)
    alert_token_file: Path | None = None  # bearer token Alertmanager sends (http_config.authorization)
    read_token_file: Path | None = None  # when set, reads need this token (or the write token)
    basic_auth_user: str | None = None  # Alertmanager's http_config.basic_auth, instead of a bearer token
    basic_auth_password_file: Path | None = None
    queue_size: int = 1000  # alerts accepted but not yet handled; a post beyond it is answered 503
    body_limit_bytes: int = 1 << 20
    header_limit_bytes: int = 32 * 1024  # request line + headers; over it: 431
    tls_cert_file: Path | None = None  # serve https with this PEM certificate (chain) and tls_key_file
    tls_key_file: Path | None = None
    alert_wait_s: float = 600.0  # how long an alert waits for the doctor's own reading to confirm it
    history_points: int = 60  # per signal in GET /v1/state (sparklines)
    engine_labels: tuple[str, ...] = ("engine", "instance", "job")  # alert labels naming an engine, in order
    alert_playbooks: Mapping[str, str] = field(default_factory=dict)  # alertname -> playbook id (no `playbook` label)
    leader: LeaderSettings | None = None  # [serve.leader]: elect one of two replicas to act (None: act alone)

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_settings(t: Table, path: Path | None, resolve: Resolve) -> ServeSettings:
    """Check the [serve] table; `resolve` makes a config path absolute (doctor.config._file)."""
    t.only(SERVE_KEYS)
    listen = cast(str, t.string("listen", DEFAULT_LISTEN))
    _check_listen(t, listen)
    paths = {k: resolve(t.string(k), path) for k in ("token_file", "alert_token_file", "read_token_file",
                                                     "basic_auth_password_file", "tls_cert_file", "tls_key_file")}
    if (paths["tls_cert_file"] is None) != (paths["tls_key_file"] is None):
        raise t.error("tls_cert_file" if paths["tls_cert_file"] is None else "tls_key_file",
                      "TLS needs both tls_cert_file (the certificate) and tls_key_file (its private key)")
    user = t.string("basic_auth_user")
    if (user is None) != (paths["basic_auth_password_file"] is None):
        raise t.error("basic_auth_user" if user is None else "basic_auth_password_file",
                      "basic auth needs both basic_auth_user and basic_auth_password_file")
    if not is_loopback(listen.rsplit(":", 1)[0].strip("[]")) and paths["token_file"] is None:
        raise t.error("listen", f"{listen} is reachable from other hosts: set token_file (the bearer token for "
                                "anything that changes state) or listen on 127.0.0.1")
    labels = t.strings("engine_labels", non_empty=t.has("engine_labels")) or ServeSettings.engine_labels
    table = t.sub("alert_playbooks")
    playbooks: dict[str, str] = {}
    for alertname, pid in table.data.items():
        if not isinstance(pid, str) or pid not in registry.ids():
            hint = suggest(pid, registry.ids()) if isinstance(pid, str) else ""
            raise table.error(alertname, f"expected a playbook id, got {describe(pid)}{hint} "
                                         f"(known ids: {', '.join(registry.ids())})")
        playbooks[alertname] = pid
    return ServeSettings(
        listen=listen, interval_s=cast(float, t.duration("interval_s", 15.0)), **paths, basic_auth_user=user,
        queue_size=cast(int, t.integer("queue_size", 1000, minimum=1, maximum=1_000_000)),
        body_limit_bytes=cast(int, t.integer("body_limit_bytes", 1 << 20, minimum=1024, maximum=1 << 30)),
        header_limit_bytes=cast(int, t.integer("header_limit_bytes", 32 * 1024, minimum=1024, maximum=1 << 24)),
        alert_wait_s=cast(float, t.duration("alert_wait_s", 600.0)),
        history_points=cast(int, t.integer("history_points", 60, minimum=1, maximum=10_000)),
        engine_labels=labels, alert_playbooks=playbooks, leader=leader_settings(t.sub("leader"), path, resolve))


def _check_listen(t: Table, listen: str) -> None:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise t.error("listen", f"expected HOST:PORT like {DEFAULT_LISTEN}, got {describe(listen)}")
