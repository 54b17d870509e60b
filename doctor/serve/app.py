"""The daemon's HTTP API (Starlette): Alertmanager's webhook, the state and actions, events, metrics, health.

`POST /v1/alerts` answers fast and never runs remediation in the request: 200 once the new alerts are on disk
(doctor.serve.inbox), 400 with the reason for a malformed body (Alertmanager does not retry a 4xx), 401 without
the credentials, 413 over the body limit, 503 when the queue is full (Alertmanager retries 5xx).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from doctor.jsonout import dumps
from doctor.remedy.audit import AuditLog
from doctor.remedy.decisions import COMMANDS, decide
from doctor.remedy.executor import Remediator
from doctor.serve import alerts
from doctor.serve.auth import Credentials, check
from doctor.serve.events import TooManySubscribers
from doctor.serve.inbox import QueueFull
from doctor.serve.runner import Daemon
from doctor.serve.view import actions_doc, state_doc

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CODES = {"ok": 200, "refused": 409, "unknown": 404}
DECISION_BODY_MAX = 64 * 1024


class JSONResponse(_StarletteJSON):
    """Strict JSON bodies: a non-finite float is written as null instead of failing the request."""

    def render(self, content: Any) -> bytes:
        return dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class TooLarge(Exception):
    pass


@dataclass
class Api:
    """What the routes need: the daemon, the remediator people's decisions go through, the credentials."""

    daemon: Daemon
    remediator: Remediator
    audit: AuditLog
    creds: Credentials
    body_limit: int
    history_points: int
    router: str | None
    router_token: str | None
    alive: Callable[[], bool]

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/alerts", self.post_alerts, methods=["POST"]),
            Route("/v1/state", self.get_state, methods=["GET"]),
            Route("/v1/actions", self.get_actions, methods=["GET"]),
            Route("/v1/actions/{record_id}/{verb}", self.post_decision, methods=["POST"]),
            Route("/v1/events", self.get_events, methods=["GET"]),
            Route("/metrics", self.get_metrics, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/readyz", self.readyz, methods=["GET"]),
        ])

    # -- alerts

    async def post_alerts(self, request: Request) -> Response:
        response = await self._alerts(request)
        self.daemon.metrics.posts.labels(str(response.status_code)).inc()
        return response

    async def _alerts(self, request: Request) -> Response:
        metrics = self.daemon.metrics
        denied = check(self.creds, request.headers, "alert")
        if denied is not None:
            return _error(denied.status, denied.reason, {"WWW-Authenticate": 'Bearer realm="doctor serve"'})
        try:
            body = await _body(request, self.body_limit)
        except TooLarge:
            return _error(413, f"the body is over the limit of {self.body_limit} bytes ([serve] body_limit_bytes)")
        except ClientDisconnect:
            return _error(400, "the client went away before the body was read")
        try:
            message = alerts.parse(body)
        except alerts.PayloadError as exc:
            metrics.alerts.labels("unknown", "malformed").inc()
            return _error(400, f"not an Alertmanager v4 webhook payload: {exc}")
        try:
            offered = await self.daemon.offer(message.alerts)
        except QueueFull as exc:
            for a in message.alerts:
                metrics.alerts.labels(a.status, "queue_full").inc()
            return _error(503, str(exc), {"Retry-After": "10"})
        except OSError as exc:  # the state directory is full or read-only: nothing was queued, Alertmanager retries
            for a in message.alerts:
                metrics.alerts.labels(a.status, "not_queued").inc()
            return _error(503, f"the alerts could not be queued durably, none was taken: {exc}", {"Retry-After": "10"})
        for e in offered.accepted:
            metrics.alerts.labels(e.alert.status, "accepted").inc()
        if offered.duplicates:
            metrics.alerts.labels(message.status, "duplicate").inc(offered.duplicates)
        if message.truncated:
            self.audit.note("alerts_truncated", group_key=message.group_key, truncated_alerts=message.truncated,
                            received=len(message.alerts), reason="Alertmanager left alerts out (max_alerts); "
                            "the doctor's own cycle still reads every engine")
        return JSONResponse({"accepted": len(offered.accepted), "duplicates": offered.duplicates,
                             "truncatedAlerts": message.truncated, "queue_depth": self.daemon.inbox.depth})

    # -- state and actions

    async def get_state(self, request: Request) -> Response:
        if (denied := check(self.creds, request.headers, "read")) is not None:
            return _error(denied.status, denied.reason)
        doc = await state_doc(self.daemon, self.remediator.store, points=self.history_points, router=self.router,
                              router_token=self.router_token, histograms=request.query_params.get("histograms"))
        return JSONResponse(self.audit.redact.strings(doc))

    async def get_actions(self, request: Request) -> Response:
        if (denied := check(self.creds, request.headers, "read")) is not None:
            return _error(denied.status, denied.reason)
        return JSONResponse(self.audit.redact.strings(actions_doc(self.remediator.store)))

    async def post_decision(self, request: Request) -> Response:
        verb, record_id = request.path_params["verb"], request.path_params["record_id"]
        if verb not in COMMANDS:
            return _error(404, f"unknown decision {verb!r}; expected one of {', '.join(COMMANDS)}")
        if (denied := check(self.creds, request.headers, "write")) is not None:
            return _error(denied.status, denied.reason, {"WWW-Authenticate": 'Bearer realm="doctor serve"'})
        if verb != "reject" and (held := self.daemon.may_act()) is not None:
            return _error(409, f"this replica may not act now ({held}): decide on the leader")
        try:
            raw = await _body(request, DECISION_BODY_MAX)
            doc = json.loads(raw) if raw.strip() else {}
        except TooLarge:
            return _error(413, f"a decision's body is over the limit of {DECISION_BODY_MAX} bytes")
        except (ValueError, ClientDisconnect):
            return _error(400, "the body must be a JSON object like {\"who\": \"alice\", \"reason\": \"...\"}")
        if not isinstance(doc, dict) or not all(isinstance(doc.get(k, ""), str) for k in ("who", "reason")):
            return _error(400, "the body must be a JSON object like {\"who\": \"alice\", \"reason\": \"...\"}")
        who = doc.get("who") or "api"
        who = who if who.startswith("person:") else f"person:{who}"
        decided = await decide(self.remediator, verb, record_id, f"{who} (via the daemon's API)",
                               doc.get("reason", ""))
        rec = decided.record
        if rec is not None:
            self.daemon.metrics.count_actions([rec.report()])
            self.daemon.events.publish("action", {"id": rec.id, "action": rec.kind, "status": rec.status,
                                                  "decision": verb, "who": who})
        return JSONResponse({"result": decided.result, "text": decided.text,
                             "record": rec.to_dict() if rec is not None else None},
                            status_code=CODES[decided.result])

    async def get_events(self, request: Request) -> Response:
        if (denied := check(self.creds, request.headers, "read")) is not None:
            return _error(denied.status, denied.reason)
        stream = self.daemon.events.stream()
        try:
            first = await stream.__anext__()
        except TooManySubscribers as exc:
            return _error(503, str(exc))

        async def body() -> Any:
            yield first
            async for chunk in stream:
                yield chunk

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # -- own metrics and health

    async def get_metrics(self, request: Request) -> Response:
        return Response(self.daemon.metrics.render(), headers={"Content-Type": METRICS_TYPE})

    async def healthz(self, request: Request) -> Response:
        ok = self.alive()
        return JSONResponse({"ok": ok}, status_code=200 if ok else 503)

    async def readyz(self, request: Request) -> Response:
        ready = self.alive() and self.daemon.cycles > 0
        why = None if ready else ("the daemon's loops have stopped" if not self.alive() else
                                  "no cycle has finished yet")
        return JSONResponse({"ready": ready, "cycles": self.daemon.cycles, "why": why},
                            status_code=200 if ready else 503)


async def _body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status, headers=headers)
