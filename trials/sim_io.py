"""The sim harness as a network, the I/O a trial substitutes for the doctor's cycle (trials.accuracy,
trials.efficacy): engines at `http://<engine>.sim[:port]`, answered by an `httpx.MockTransport` over the
harness (`SimNetwork`), each node's dcgm-exporter at `http://<engine>.dcgm.sim/metrics`, services such as the
virtual router at their own hosts, and one log file per engine fed with what it printed (`LogFiles`).

A completion request waits in virtual time: its handler submits the request to the engine, yields once so that
requests sent together (a warm-up batch) arrive together, then advances the harness in `step_s` steps until
the engine finishes it. Nothing else advances the clock but the cycle's own waits (`Plan.sleep`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from sim import tokenizer
from sim.harness import ClientRecord, HarnessEngine
from sim.workload import RequestSpec
from trials.scenario import ScenarioHarness

HOST_SUFFIX = ".sim"  # http://hot.sim is engine hot's API server
DCGM_SUFFIX = ".dcgm.sim"  # http://hot.dcgm.sim/metrics is the dcgm-exporter of hot's node
STEP_S = 0.05  # how far a waiting completion advances the harness at a time
ADMIN_PATHS = ("/sleep", "/wake_up", "/is_sleeping", "/reset_prefix_cache")  # dev mode only, as in vLLM
Service = Callable[[httpx.Request], "httpx.Response | Awaitable[httpx.Response]"]


def engine_url(name: str, port: int | None = None) -> str:
    return f"http://{name}{HOST_SUFFIX}" + (f":{port}" if port else "")


def dcgm_url(name: str) -> str:
    return f"http://{name}{DCGM_SUFFIX}/metrics"


def address(url: str | httpx.URL) -> str:
    """host:port of a URL, port 80 when it names none."""
    parts = urlsplit(str(url))
    return f"{parts.hostname}:{parts.port or 80}"


def _json(status: int, body: object) -> httpx.Response:
    return httpx.Response(status, json=body)


class SimNetwork:
    """Who answers which address: harness engines (by key) and services (a handler each)."""

    def __init__(self, h: ScenarioHarness, *, step_s: float = STEP_S) -> None:
        self.h = h
        self.step_s = step_s
        self.engines: dict[str, str] = {}  # address -> harness engine key
        self.current: dict[str, str] = {}  # engine name -> the key of its newest process (its node's dcgm)
        self.services: dict[str, Service] = {}  # address -> handler
        self._ids = itertools.count(1)

    # ----- the address book --------------------------------------------------------------------

    def register(self, url: str, key: str, *, name: str | None = None) -> None:
        """`url` is answered by the harness engine `key` (a process of engine `name`, default `key`)."""
        self.engines[address(url)] = key
        self.current[name or key] = key

    def unregister(self, url: str) -> None:
        self.engines.pop(address(url), None)

    def serve(self, url: str, service: Service) -> None:
        self.services[address(url)] = service

    def engine_at(self, url: str | httpx.URL) -> str | None:
        """The harness key of the engine answering `url` (None: nothing listens there)."""
        return self.engines.get(address(url))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def sync_transport(self) -> httpx.MockTransport:
        """For synchronous clients (dcgm-exporter reads in a thread): every answer but a completion."""
        return httpx.MockTransport(self.answer)

    # ----- answers -----------------------------------------------------------------------------

    async def handle(self, request: httpx.Request) -> httpx.Response:
        service = self.services.get(address(request.url))
        if service is not None:
            result = service(request)
            return await result if isinstance(result, Awaitable) else result
        key = self.engine_at(request.url)
        if key is not None and request.method == "POST" and request.url.path in ("/v1/completions",
                                                                                  "/v1/chat/completions"):
            self._check_up(key, request)
            return await self._complete(key, request)
        return self.answer(request)

    def answer(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host.endswith(DCGM_SUFFIX):
            key = self.current.get(host[:-len(DCGM_SUFFIX)])
            if key is not None and key in self.h.engines:
                return httpx.Response(200, text=self.h.gpu_text(key))
        service = self.services.get(address(request.url))
        if service is not None:
            result = service(request)
            if isinstance(result, httpx.Response):
                return result
        key = self.engine_at(request.url)
        if key is None:
            raise httpx.ConnectError("connection refused", request=request)
        self._check_up(key, request)
        return self._engine(key, request)

    def _check_up(self, key: str, request: httpx.Request) -> None:
        if key not in self.h.engines or self.h.shut_down(key):
            raise httpx.ConnectError("connection refused", request=request)

    def _engine(self, key: str, request: httpx.Request) -> httpx.Response:
        """What a harness engine answers that needs no virtual time to pass."""
        h, engine = self.h, self.h.engines[key]
        core, path = engine.core, request.url.path
        if path == "/metrics":
            return httpx.Response(200, text=h.metrics_text(key),
                                  headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"})
        if path == "/health":
            return httpx.Response(h.health(key))
        if path == "/version":
            return _json(200, {"version": core.profile.version})
        if path == "/load":
            return _json(200, {"server_load": len(core.requests)})
        if path == "/v1/models":
            model = core.config.served_model_name
            return _json(200, {"object": "list", "data": [
                {"id": model, "object": "model", "root": model, "max_model_len": core.config.max_model_len}]})
        if path in ADMIN_PATHS and engine.runtime.dev_mode:
            return self._admin(engine, request)
        return _json(404, {"detail": "Not Found"})

    def _admin(self, engine: HarnessEngine, request: httpx.Request) -> httpx.Response:
        path, now, core = request.url.path, self.h.now, engine.core
        if path == "/is_sleeping" and request.method == "GET":
            return _json(200, {"is_sleeping": bool(core.sleep_level)})
        if request.method != "POST":
            return _json(405, {"detail": "Method Not Allowed"})
        if path == "/sleep":
            try:
                level = int(request.url.params.get("level", "1"))
            except ValueError:
                return _json(400, {"error": {"message": "level must be an integer"}})
            engine.runtime.sleep(level, now)
        elif path == "/wake_up":
            engine.runtime.wake_up(now)
            self.h._kick(engine)
        else:
            core.reset_prefix_cache()
        return httpx.Response(200)

    async def _complete(self, key: str, request: httpx.Request) -> httpx.Response:
        try:
            body = json.loads(request.content or b"{}")
            tokens = _prompt_tokens(body)
            max_tokens = int(body.get("max_tokens") or 16)
        except (ValueError, TypeError, AttributeError) as exc:
            return _json(400, {"error": {"message": f"bad request body: {exc}"}})
        spec = RequestSpec(-1_000_000 - next(self._ids), 0.0, tokens, max_tokens, False)
        record = self.h.submit(key, spec, at=self.h.now)
        await asyncio.sleep(0)  # requests sent together arrive together
        while record.finished is None:
            self.h.run_until(self.h.now + self.step_s)
            await asyncio.sleep(0)
        return _completion_response(record)


def _prompt_tokens(body: dict[str, object]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, str):
        return max(1, tokenizer.count(prompt))
    messages = body.get("messages")
    if isinstance(messages, list):
        return max(1, len(tokenizer.encode_chat(messages)))
    raise ValueError("no prompt or messages")


def _completion_response(record: ClientRecord) -> httpx.Response:
    if record.error is not None:
        status = 400 if record.error.startswith("400") else 500
        return _json(status, {"error": {"message": record.error}})
    return _json(200, {"object": "text_completion", "choices": [
        {"index": 0, "text": " x" * record.tokens, "finish_reason": record.finish_reason or "length"}],
        "usage": {"prompt_tokens": record.spec.prompt_tokens, "completion_tokens": record.tokens}})


class LogFiles:
    """One log file per engine process, fed with the lines the harness's engine printed since the last cycle."""

    def __init__(self, h: ScenarioHarness, directory: Path) -> None:
        self.h = h
        self.directory = directory
        self.paths: dict[str, Path] = {}  # harness key -> its log file (default: DIRECTORY/KEY.log)
        self._followed: dict[str, tuple[HarnessEngine, int]] = {}

    def path(self, key: str) -> Path:
        return self.paths.get(key) or self.directory / f"{key}.log"

    def append(self, keys: Iterable[str] | None = None) -> None:
        for key in list(self.h.engines) if keys is None else keys:
            engine = self.h.engines[key]
            followed, offset = self._followed.get(key, (engine, 0))
            if followed is not engine:  # a restarted engine appends to the same log file
                offset = 0
            lines = engine.logs[offset:]
            self._followed[key] = (engine, len(engine.logs))
            path = self.path(key)
            with path.open("a", encoding="utf-8") as fh:
                fh.writelines(line + "\n" for line in lines)
            os.utime(path, (self.h.now, self.h.now))  # a file written now (the scan reads the year from it)
