"""Where a server listens: loopback unless told otherwise (and a loud warning when not), TLS when configured.

Shared by the router and the daemon (doctor serve).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
from pathlib import Path
from typing import Any


class ListenError(ValueError):
    """A listener that cannot be set up as configured; the message names the file or address."""


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: reachable from this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except (OSError, ValueError):
            return False


def exposure_warning(what: str, host: str, port: int, *, tls: bool, authenticated: bool) -> str | None:
    """The warning line for a server bound beyond loopback (None on loopback)."""
    if is_loopback(host):
        return None
    notes = [] if tls else ["without TLS: tokens and bodies cross the network in clear text"]
    if not authenticated:
        notes.append("with no token configured")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return (f"WARNING: {what} listens on {host}:{port}, reachable from other hosts{extra}; "
            "bind 127.0.0.1 unless that is meant")


def tls_options(cert_file: str | Path | None, key_file: str | Path | None) -> dict[str, Any]:
    """uvicorn.Config's TLS keywords for a certificate and its key (both or neither); ListenError when they cannot
    be loaded, or the key is readable by the group or others."""
    if not cert_file and not key_file:
        return {}
    if not cert_file or not key_file:
        raise ListenError("TLS needs both the certificate and its private key")
    try:
        mode = stat.S_IMODE(os.stat(key_file).st_mode)
    except OSError as exc:
        raise ListenError(f"cannot read the TLS key {key_file}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise ListenError(f"the TLS key {key_file} has mode {mode:04o}: the group or others may read it; make it "
                          f"private with `chmod 600 {key_file}`")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise ListenError(f"cannot load the TLS certificate {cert_file} with key {key_file}: {exc}") from None
    return {"ssl_certfile": str(cert_file), "ssl_keyfile": str(key_file)}
