"""The sim engine's HTTP surface: vLLM's OpenAI server routes, /metrics, health and dev endpoints."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sim import tokenizer
from sim.core_client import EngineClient
from sim.exposition import CONTENT_TYPE, render_metrics
from sim.faults import FaultSpecError, parse_fault
from sim.logfmt_requests import request_lines, sampling_params_repr
from sim.openai_api import (
    ApiError,
    GenerationRequest,
    chat_chunk,
    completion_chunk,
    error_body,
    full_response,
    models_body,
    parse_generation,
    usage,
)
from sim.request import SimRequest
from sim.server_info import has_server_info, server_info_body

# prometheus_fastapi_instrumentator does not count these handlers.
_UNINSTRUMENTED = {"/metrics", "/health", "/load", "/ping", "/version", "/server_info"}
MAX_BODY_BYTES = 64 * 1024 * 1024


class AccessLog:
    """ASGI middleware: uvicorn-style access lines in the profile's format, and http_* metrics."""

    def __init__(self, app: ASGIApp, server: SimServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                excluded = self.server.access_log_excluded
                if excluded is None or scope["path"] in excluded:  # vLLM's UvicornAccessLogFilter
                    await send(message)
                    return
                client = scope.get("client") or ("127.0.0.1", 0)
                path = scope["path"] + (("?" + scope["query_string"].decode()) if scope.get("query_string")
                                        else "")
                self.server.engine.access(self.server.clock(), f"{client[0]}:{client[1]}", scope["method"],
                                           path, status)
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            handler = scope["path"]
            if handler not in _UNINSTRUMENTED and self.server.known_route(handler):
                self.server.engine.record_http(handler, scope["method"], status, time.monotonic() - started)


async def _wait_disconnect(request: Request) -> None:
    """Return when the client goes away (vLLM aborts the request then)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class SimServer:
    """Routes bound to one engine (in process or an EngineCore child, through its client)."""

    def __init__(self, engine: EngineClient, *, dev_mode: bool, fault_endpoint: bool = False,
                 clock: Callable[[], float] = time.time, env: Mapping[str, str] | None = None,
                 log_requests: bool = False, access_log_excluded: frozenset[str] | None = frozenset()) -> None:
        self.engine = engine
        self.env = dict(env or {})  # the API server's environment /server_info reports (vllm_env, 0.15+)
        self.log_requests = log_requests  # vLLM's RequestLogger: the API server writes these lines
        self.access_log_excluded = access_log_excluded  # paths without access lines; None: every path
        self.dev_mode = dev_mode
        self.fault_endpoint = fault_endpoint
        self.clock = clock
        self.paused = False
        self.app = self._build_app()

    # ----- plumbing -----------------------------------------------------------------------------

    def known_route(self, path: str) -> bool:
        return any(getattr(r, "path", None) == path for r in self.app.routes)

    def _error(self, err: ApiError) -> JSONResponse:
        return JSONResponse(error_body(self.engine.profile, err), status_code=err.status)

    def _dead_error(self) -> ApiError:
        if self.engine.profile.name == "0.33":
            return ApiError(500, "The server had an error while processing your request.",
                            "InternalServerError")
        return ApiError(500, "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                        "InternalServerError")

    def _build_app(self) -> Starlette:
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/ping", self.health, methods=["GET", "POST"]),
            Route("/version", self.version, methods=["GET"]),
            Route("/load", self.load, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/detokenize", self.detokenize, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        if self.dev_mode:
            routes += [
                *([Route("/server_info", self.server_info, methods=["GET"])]
                  if has_server_info(self.engine.profile.name) else []),
                Route("/reset_prefix_cache", self.reset_prefix_cache, methods=["POST"]),
                Route("/sleep", self.sleep, methods=["POST"]),
                Route("/wake_up", self.wake_up, methods=["POST"]),
                Route("/is_sleeping", self.is_sleeping, methods=["GET"]),
            ]
        if self.engine.profile.pause_endpoints:
            routes += [
                Route("/pause", self.pause, methods=["POST"]),
                Route("/resume", self.resume, methods=["POST"]),
                Route("/is_paused", self.is_paused, methods=["GET"]),
            ]
        if self.fault_endpoint:
            routes.append(Route("/sim/fault", self.fault, methods=["POST"]))

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

        app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
        app.add_middleware(AccessLog, server=self)
        return app

    async def _json(self, request: Request) -> Any:
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, f"Request body too large ({len(raw)} bytes; the limit is {MAX_BODY_BYTES}).")
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"JSON decode error: {exc}") from None

    # ----- plain endpoints ----------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        if self.engine.dead:
            return Response(status_code=self.engine.profile.health_dead_status)
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": self.engine.profile.version})

    async def load(self, request: Request) -> Response:
        return JSONResponse({"server_load": self.engine.in_flight})

    async def metrics(self, request: Request) -> Response:
        engine = self.engine
        state, delay = await engine.metrics()
        if delay:
            await asyncio.sleep(delay)
        body = render_metrics(engine.profile, state, model_name=engine.config.served_model_name,
                              stats_enabled=not engine.config.disable_log_stats)
        return Response(body, media_type=None, headers={"Content-Type": CONTENT_TYPE})

    async def models(self, request: Request) -> Response:
        c = self.engine.config
        return JSONResponse(models_body(c.served_model_name, c.model, c.max_model_len,
                                        int(self.engine.started_at)))

    async def tokenize(self, request: Request) -> Response:
        try:
            body = await self._json(request)
            if not isinstance(body, dict):
                raise ApiError(400, "Input should be a valid dictionary")
            if "messages" in body and isinstance(body["messages"], list):
                ids = tokenizer.encode_chat(body["messages"])
            elif isinstance(body.get("prompt"), str):
                ids = tokenizer.encode(body["prompt"])
            else:
                raise ApiError(400, "[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]")
        except ApiError as err:
            return self._error(err)
        return JSONResponse({"count": len(ids), "max_model_len": self.engine.config.max_model_len,
                             "tokens": ids, "token_strs": None})

    async def detokenize(self, request: Request) -> Response:
        try:
            body = await self._json(request)
            tokens = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise ApiError(400, "tokens: Input should be a valid list of integers")
        except ApiError as err:
            return self._error(err)
        return JSONResponse({"prompt": tokenizer.decode(tokens)})

    # ----- generation ---------------------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, "completions")

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, "chat")

    async def _generate(self, request: Request, kind: str) -> Response:
        core = self.engine
        try:
            body = await self._json(request)
            if core.dead:
                raise self._dead_error()
            g = parse_generation(kind, body, served_name=core.config.served_model_name,
                                 model_path=core.config.model, max_model_len=core.config.max_model_len,
                                 profile=core.profile, priority_enabled=core.config.scheduling_policy == "priority")
        except ApiError as err:
            return self._error(err)
        prefix = "cmpl-" if kind == "completions" else "chatcmpl-"
        req_id = prefix + uuid.uuid4().hex
        queue: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()

        def listener(req: SimRequest, new_tokens: int, now: float) -> None:
            queue.put_nowait((new_tokens, req.finish_reason))

        target = g.max_tokens if g.ignore_eos else g.eos_after or core.sample_output_len()
        sim_req = SimRequest(req_id, g.prompt_ids, max_tokens=g.max_tokens, target_output=target,
                             arrival_time=self.clock(), priority=g.priority,
                             output_seed=uuid.UUID(req_id[len(prefix):]).int % 1_000_000, listener=listener)
        if self.log_requests:
            self._log_request(body, g, sim_req)
        admit = asyncio.ensure_future(core.add_request(sim_req))
        if g.stream:
            return StreamingResponse(self._stream(g, sim_req, queue, admit, kind),
                                     media_type="text/event-stream")
        return await self._collect(request, g, sim_req, queue, admit, kind)

    def _log_request(self, body: Any, g: GenerationRequest, sim_req: SimRequest) -> None:
        """vLLM's request log lines for one request (--enable-log-requests)."""
        temperature = body.get("temperature", 1.0) if isinstance(body, dict) else 1.0
        xargs = body.get("vllm_xargs") if isinstance(body, dict) else None
        params = sampling_params_repr(self.engine.profile.name, max_tokens=g.max_tokens, ignore_eos=g.ignore_eos,
                                      temperature=float(temperature) if isinstance(temperature, int | float)
                                      else 1.0, extra_args=xargs if isinstance(xargs, dict) else None)
        prompt = body.get("prompt") if isinstance(body, dict) and isinstance(body.get("prompt"), str) else None
        self.engine.log(request_lines(self.engine.fmt, self.clock(), sim_req.request_id, prompt=prompt,
                                      prompt_ids=g.prompt_ids, params=params))

    def _abort(self, sim_req: SimRequest, admit: asyncio.Future[None]) -> None:
        if not admit.done():
            admit.cancel()
        if sim_req.finish_reason is None:
            self.engine.abort(sim_req.request_id, self.clock())

    async def _collect(self, request: Request, g: GenerationRequest, sim_req: SimRequest,
                       queue: asyncio.Queue[tuple[int, str | None]], admit: asyncio.Future[None],
                       kind: str) -> Response:
        disconnect = asyncio.ensure_future(_wait_disconnect(request))
        try:
            while sim_req.finish_reason is None:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, disconnect}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    self._abort(sim_req, admit)
                    return Response(status_code=499)
        finally:
            disconnect.cancel()
        if sim_req.finish_reason == "error":
            return self._error(self._dead_error())
        text = tokenizer.decode([sim_req.output_token_id(i) for i in range(sim_req.output_count)])
        return JSONResponse(full_response(kind, sim_req.request_id, int(sim_req.arrival_time), g.model, text,
                                          sim_req.finish_reason, sim_req.num_prompt, sim_req.output_count))

    async def _stream(self, g: GenerationRequest, sim_req: SimRequest,
                      queue: asyncio.Queue[tuple[int, str | None]], admit: asyncio.Future[None],
                      kind: str) -> AsyncIterator[str]:
        created = int(sim_req.arrival_time)
        sent = 0
        role_sent = kind != "chat"
        try:
            while True:
                _, finish = await queue.get()
                if finish == "error":
                    yield f"data: {json.dumps(error_body(self.engine.profile, self._dead_error()))}\n\n"
                    break
                text = "".join(tokenizer.token_text(sim_req.output_token_id(i))
                               for i in range(sent, sim_req.output_count))
                sent = sim_req.output_count
                if not text and finish is None:
                    continue
                if not role_sent:  # with the first output, as vLLM's serving_chat (first_iteration), not at once
                    role_sent = True
                    first = chat_chunk(sim_req.request_id, created, g.model, {"role": "assistant", "content": ""},
                                       None)
                    yield f"data: {json.dumps(first)}\n\n"
                if kind == "completions":
                    chunk = completion_chunk(sim_req.request_id, created, g.model, text, finish)
                else:
                    chunk = chat_chunk(sim_req.request_id, created, g.model, {"content": text}, finish)
                yield f"data: {json.dumps(chunk)}\n\n"
                if finish is not None:
                    if g.include_usage:
                        tail: dict[str, Any] = {
                            "id": sim_req.request_id,
                            "object": "text_completion" if kind == "completions" else "chat.completion.chunk",
                            "created": created, "model": g.model, "choices": [],
                            "usage": usage(sim_req.num_prompt, sim_req.output_count)}
                        yield f"data: {json.dumps(tail)}\n\n"
                    break
            yield "data: [DONE]\n\n"
        finally:
            self._abort(sim_req, admit)

    # ----- dev-mode and admin -------------------------------------------------------------------

    async def server_info(self, request: Request) -> Response:
        engine = self.engine
        text, cfg = engine.server_config()
        return JSONResponse(server_info_body(engine.profile, engine.preset, text, cfg,
                                             request.query_params.get("config_format"), self.env))

    async def reset_prefix_cache(self, request: Request) -> Response:
        await self.engine.reset_prefix_cache()
        return Response(status_code=200)

    async def sleep(self, request: Request) -> Response:
        try:
            level = int(request.query_params.get("level", "1"))
        except ValueError:
            return self._error(ApiError(400, "level must be an integer"))
        await self.engine.sleep(level, self.clock())
        if self.engine.profile.sleep_returns_body:
            return JSONResponse({"status": "sleeping", "level": level})
        return Response(status_code=200)

    async def wake_up(self, request: Request) -> Response:
        await self.engine.wake_up(self.clock())
        if self.engine.profile.sleep_returns_body:
            return JSONResponse({"status": "awake", "tags": request.query_params.getlist("tags") or None})
        return Response(status_code=200)

    async def is_sleeping(self, request: Request) -> Response:
        return JSONResponse({"is_sleeping": self.engine.sleeping})

    async def pause(self, request: Request) -> Response:
        await self.engine.set_hung(True)
        self.paused = True
        return JSONResponse({"status": "paused"})

    async def resume(self, request: Request) -> Response:
        if self.paused:
            await self.engine.set_hung(False)
            self.paused = False
        return JSONResponse({"status": "resumed"})

    async def is_paused(self, request: Request) -> Response:
        return JSONResponse({"is_paused": self.paused})

    async def fault(self, request: Request) -> Response:
        """POST /sim/fault {"fault": "KIND[:ARG]"}: inject a fault now (sim only, off by default)."""
        try:
            body = await self._json(request)
            spec = body.get("fault") if isinstance(body, dict) else None
            if not isinstance(spec, str):
                raise ApiError(400, 'expected {"fault": "KIND[:ARG]"}')
            fault = parse_fault(spec)
        except ApiError as err:
            return self._error(err)
        except FaultSpecError as exc:
            return self._error(ApiError(400, str(exc)))
        await self.engine.apply_fault(fault, self.clock())
        return JSONResponse({"applied": fault.kind, "arg": fault.arg})
