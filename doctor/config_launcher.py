"""[launcher]: which backend starts and stops engines (local processes, or Ray actors) and how to reach Ray.

Kept beside doctor/config.py, which reads the table through `launcher_settings`; errors are the same
`FILE:LINE: launcher.KEY: ...` ConfigErrors. The Ray backend is doctor/remedy/ray_launcher.py (docs/launchers.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast

from doctor.config_schema import Table

Backend = Literal["local", "ray"]
BACKENDS: tuple[str, ...] = ("local", "ray")
LAUNCHER_KEYS = ("backend", "ray_address", "ray_namespace", "placement_timeout_s")
_ADDRESS = re.compile(r"^(auto|local|(ray://)?[A-Za-z0-9_.:\[\]-]+:\d{1,5})$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class LauncherSettings:
    """`backend` "local" (processes on this machine) or "ray" (actors on the Ray cluster at `ray_address`, None:
    RAY_ADDRESS or the local node's, in `ray_namespace`); a placement Ray cannot make within
    `placement_timeout_s` is refused."""

    backend: Backend = "local"
    ray_address: str | None = None
    ray_namespace: str = "serving-doctor"
    placement_timeout_s: float = 60.0


def launcher_settings(t: Table) -> LauncherSettings:
    """Check the [launcher] table."""
    t.only(LAUNCHER_KEYS)
    backend = cast(Backend, t.string("backend", "local", choices=BACKENDS))
    address = t.string("ray_address")
    if address is not None and not _ADDRESS.match(address):
        raise t.error("ray_address", f"expected HOST:PORT of the Ray head (GCS), ray://HOST:PORT (Ray Client) or "
                                     f"auto, got {address!r}")
    namespace = cast(str, t.string("ray_namespace", "serving-doctor"))
    if not _NAMESPACE.match(namespace):
        raise t.error("ray_namespace", f"expected letters, digits, '_', '.' or '-' (at most 64), got {namespace!r}")
    if backend != "ray" and (t.has("ray_address") or t.has("ray_namespace")):
        raise t.error("backend", 'ray_address and ray_namespace apply to backend = "ray" only')
    timeout = cast(float, t.duration("placement_timeout_s", 60.0, maximum=3600.0))
    return LauncherSettings(backend, address, namespace, timeout)
