"""A small client of the daemon's API, for `doctor actions/approve/reject/rollback --daemon URL`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from doctor.secrets import DAEMON_TOKEN_ENV, SecretFileError, client_verify, daemon_token

TOKEN_ENV = DAEMON_TOKEN_ENV


class DaemonError(Exception):
    """The daemon could not be asked, or refused the request; the message says why."""


class DaemonClient:
    """Calls one daemon with its bearer token (from `token_file`, else $DOCTOR_SERVE_TOKEN)."""

    def __init__(self, url: str, *, token_file: Path | None = None, environ: Mapping[str, str] | None = None,
                 timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None,
                 ca_file: Path | None = None) -> None:
        self.url = url.rstrip("/")
        try:
            self.token: str | None = daemon_token(token_file, environ)
            self.verify = client_verify(ca_file)
        except SecretFileError as exc:
            raise DaemonError(str(exc)) from None
        self.timeout_s = timeout_s
        self.transport = transport

    def actions(self) -> dict[str, Any]:
        return self._call("GET", "/v1/actions")

    def decide(self, command: str, record_id: str, who: str, reason: str = "") -> dict[str, Any]:
        return self._call("POST", f"/v1/actions/{record_id}/{command}", {"who": who, "reason": reason},
                          ok=(200, 409, 404))

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              ok: tuple[int, ...] = (200,)) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with httpx.Client(timeout=self.timeout_s, trust_env=False, transport=self.transport,
                              verify=self.verify) as client:
                r = client.request(method, self.url + path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise DaemonError(f"cannot reach the daemon at {self.url}: {type(exc).__name__}: {exc}") from None
        try:
            doc = r.json()
        except ValueError:
            doc = {}
        if r.status_code not in ok or not isinstance(doc, dict):
            why = doc.get("error") if isinstance(doc, dict) and doc.get("error") else r.text[:200]
            hint = f" (give --token-file or set ${TOKEN_ENV})" if r.status_code in (401, 403) else ""
            raise DaemonError(f"{method} {path}: HTTP {r.status_code}: {why}{hint}")
        return doc
