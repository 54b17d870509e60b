"""Where the TUI's state comes from: the daemon's API (`DaemonSource`), or the doctor's cycle run in this process
(`tui.local.LocalSource`). Both give the document of `GET /v1/state` and take people's decisions.

No Textual here: the app calls these from its workers; `--once` calls them directly.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx

from doctor.secrets import DAEMON_TOKEN_ENV

TOKEN_ENV = DAEMON_TOKEN_ENV


class SourceError(Exception):
    """The state could not be read or a decision not sent; the message says why, for people."""


class Source(Protocol):
    """What the app reads and where decisions go."""

    label: str  # for the header: "daemon http://127.0.0.1:9361" | "standalone (observe)"
    can_decide: bool  # approve/reject/rollback are possible here at all

    async def state(self, histograms: str | None = None) -> dict[str, Any]: ...

    async def decide(self, verb: str, record_id: str, who: str, reason: str = "") -> dict[str, Any]: ...

    def events(self) -> AsyncIterator[tuple[str, dict[str, Any]]] | None: ...

    async def aclose(self) -> None: ...


class DaemonSource:
    """`doctor serve`'s API over HTTP, through the transport given (tests and benches pass one, else the network)."""

    can_decide = True

    def __init__(self, url: str, token: str | None, *, timeout_s: float = 5.0,
                 transport: httpx.AsyncBaseTransport | None = None, verify: ssl.SSLContext | bool = True) -> None:
        self.url = url.rstrip("/")
        self.label = f"daemon {self.url}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout_s, trust_env=False,
                                         transport=transport, verify=verify)
        self._token = token

    async def state(self, histograms: str | None = None) -> dict[str, Any]:
        params = {"histograms": histograms} if histograms else None
        return await self._call("GET", "/v1/state", params=params)

    async def decide(self, verb: str, record_id: str, who: str, reason: str = "") -> dict[str, Any]:
        return await self._call("POST", f"/v1/actions/{record_id}/{verb}", body={"who": who, "reason": reason},
                                ok=(200, 404, 409))

    async def events(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Server-sent events from `GET /v1/events` until the stream ends (SourceError when it cannot open)."""
        try:
            async with self._client.stream("GET", "/v1/events", timeout=httpx.Timeout(5.0, read=None)) as r:
                if r.status_code != 200:
                    raise SourceError(f"GET /v1/events: HTTP {r.status_code}")
                kind, data = "message", ""
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data += line[5:].strip()
                    elif not line and data:
                        try:
                            doc = json.loads(data)
                        except ValueError:
                            doc = {}
                        yield kind, doc if isinstance(doc, dict) else {}
                        kind, data = "message", ""
        except httpx.HTTPError as exc:
            raise SourceError(f"the event stream of {self.url} broke: {type(exc).__name__}") from None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, *, params: dict[str, str] | None = None,
                    body: dict[str, Any] | None = None, ok: tuple[int, ...] = (200,)) -> dict[str, Any]:
        try:
            r = await self._client.request(method, path, params=params, json=body)
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach the daemon at {self.url}: {type(exc).__name__}: {exc}") from None
        try:
            doc = r.json()
        except ValueError:
            doc = None
        if r.status_code not in ok or not isinstance(doc, dict):
            why = doc.get("error") if isinstance(doc, dict) and doc.get("error") else r.text[:200]
            hint = f" (give --token-file or set ${TOKEN_ENV})" if r.status_code in (401, 403) else ""
            raise SourceError(f"{method} {path}: HTTP {r.status_code}: {why}{hint}")
        return doc
