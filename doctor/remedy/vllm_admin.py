"""The vLLM admin actuator: prefix cache reset and re-warm, warm-up, and defragment (sleep/wake or relaunch).

Talks HTTP only: `/reset_prefix_cache`, `/sleep?level=1`, `/wake_up`, `/is_sleeping` (dev mode:
VLLM_SERVER_DEV_MODE=1), the OpenAI routes for replay and warm-up, `/load` for in-flight work. The
framebuffer comes from the engine's dcgm-exporter (collectors.gpu); without a reading, freed memory
cannot be verified and defragment falls back to a relaunch.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

from collectors.gpu import DcgmSource, GpuError, engine_fb_bytes
from doctor.remedy.model import ActuatorContext, ActuatorError, Applied, EngineTarget, Launcher, Refused
from doctor.remedy.router_actuator import RouterActuator
from playbooks.action_kinds import kinds
from playbooks.model import Action

ADMIN_KINDS: tuple[str, ...] = kinds(actuator="vllm_admin")
WARM_BATCHES: tuple[int, ...] = (4, 8, 16)
WARM_PROMPT_TOKENS: tuple[int, ...] = (512, 1024, 2048)
REQUEST_TIMEOUT_S = 300.0
ClientFactory = Callable[[float], httpx.AsyncClient]
FbReader = Callable[[EngineTarget], Awaitable[float | None]]


def _default_client(timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0))


def _err_text(resp: httpx.Response) -> str:
    try:
        return str(resp.json()["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return resp.text[:300]


async def served_model(client: httpx.AsyncClient, url: str) -> tuple[str | None, int | None]:
    """(model id, max_model_len) from /v1/models; (None, None) when it cannot be read."""
    try:
        data = (await client.get(url + "/v1/models")).json().get("data") or []
        first = data[0]
        return str(first["id"]), (int(first["max_model_len"]) if first.get("max_model_len") else None)
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, None


WARM_VOCAB = 1000  # token ids below this: valid for any real vocabulary (the real-vLLM tier's tiny Llama has 1024)


def warm_prompt(length: int, salt: int) -> list[int]:
    """A deterministic token-id prompt, distinct per salt so the prefix cache cannot shortcut the prefill; ids in
    [10, WARM_VOCAB), since vLLM refuses an id out of the model's vocabulary (HTTP 400)."""
    return [10 + (salt * 131 + k * 7) % (WARM_VOCAB - 10) for k in range(length)]


async def warm_up(url: str, client: httpx.AsyncClient, *, batches: Sequence[int] = WARM_BATCHES,
                  prompt_tokens: Sequence[int] = WARM_PROMPT_TOKENS, max_model_len: int | None = None,
                  max_tokens: int = 2, clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Requests at each batch size x prompt length (concurrent within a batch); ActuatorError on any failure."""
    model, served_len = await served_model(client, url)
    limit = max_model_len or served_len
    steps: list[str] = []
    salt = 0
    for batch in batches:
        for length in prompt_tokens:
            if limit is not None and length + max_tokens > limit:
                steps.append(f"warm-up {batch}x{length}: skipped (max_model_len {limit})")
                continue
            bodies = []
            for _ in range(batch):
                salt += 1
                body: dict[str, Any] = {"prompt": warm_prompt(length, salt), "max_tokens": max_tokens,
                                        "ignore_eos": True, "temperature": 0}
                if model:
                    body["model"] = model
                bodies.append(body)
            started = clock()
            results = await asyncio.gather(*(client.post(url + "/v1/completions", json=b) for b in bodies),
                                           return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise ActuatorError(f"warm-up of {url} failed at batch {batch} x {length} tokens: "
                                        f"{type(r).__name__}: {r}")
                if r.status_code != 200:
                    raise ActuatorError(f"warm-up of {url} failed at batch {batch} x {length} tokens: "
                                        f"HTTP {r.status_code}: {_err_text(r)}")
            steps.append(f"warm-up {batch}x{length} tokens: {clock() - started:.2f}s")
    return steps


def _template_body(template: str) -> tuple[str, dict[str, Any]]:
    """(route, body) for one template: a JSON list of chat messages goes to chat completions."""
    text = template.strip()
    if text.startswith("["):
        try:
            messages = json.loads(text)
        except ValueError:
            messages = None
        if isinstance(messages, list) and all(isinstance(m, dict) and "role" in m for m in messages):
            return "/v1/chat/completions", {"messages": messages}
    return "/v1/completions", {"prompt": template}


def _vary(route: str, body: dict[str, Any], i: int) -> dict[str, Any]:
    """Variation i of a template: the same prefix, a small deterministic suffix (i = 0: as written)."""
    if i == 0:
        return dict(body)
    if route == "/v1/completions":
        return {"prompt": f"{body['prompt']} (variation {i})"}
    messages = [dict(m) for m in body["messages"]]
    messages[-1]["content"] = f"{messages[-1].get('content', '')} (variation {i})"
    return {"messages": messages}


class VllmAdminActuator:
    """Applies reset_prefix_cache, rewarm_prefix_cache, warm_up and defragment to one engine."""

    kinds: tuple[str, ...] = ADMIN_KINDS

    def __init__(self, *, router: RouterActuator | None = None, launcher: Launcher | None = None,
                 client_factory: ClientFactory = _default_client, fb_reader: FbReader | None = None,
                 dcgm_urls: Mapping[str, str] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 sync_transport: httpx.BaseTransport | None = None) -> None:
        """I/O passed in: the HTTP clients (engine admin endpoints; dcgm-exporter through `sync_transport`, default
        the network), the clock of the drain's deadline and the wait between polls."""
        self.router = router
        self.clock = clock
        self.sync_transport = sync_transport
        self.launcher = launcher
        self.client_factory = client_factory
        self.dcgm_urls = dict(dcgm_urls or {})
        self.fb_reader = fb_reader or self._dcgm_fb
        self.sleep = sleep

    # ----- check ---------------------------------------------------------------------------------

    def check(self, action: Action, ctx: ActuatorContext) -> None:
        if action.kind not in self.kinds:
            raise Refused(f"{action.kind!r} is not a vLLM admin action ({', '.join(self.kinds)})")
        if action.target not in ctx.engines:
            raise Refused(f"unknown engine {action.target!r} "
                          f"(configured: {', '.join(sorted(ctx.engines)) or 'none'})")
        p = action.params
        if action.kind == "rewarm_prefix_cache":
            if not ctx.templates:
                raise Refused("no prompt templates are configured ([templates] prompts) to re-warm the cache")
            v = p.get("variations", 1)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100:
                raise Refused(f"params.variations must be an integer 1..100, got {v!r}")
        if action.kind == "warm_up":
            for key in ("batches", "prompt_tokens"):
                vals = p.get(key, [1])
                if not isinstance(vals, list | tuple) or not all(isinstance(x, int) and 1 <= x <= 1024 * 1024
                                                                 for x in vals):
                    raise Refused(f"params.{key} must be a list of positive integers, got {vals!r}")
        if action.kind == "defragment" and (self.router is None or not ctx.router_url):
            raise Refused("defragment drains the engine at the router first, and no router is configured")

    # ----- apply ---------------------------------------------------------------------------------

    async def apply(self, action: Action, ctx: ActuatorContext) -> Applied:
        self.check(action, ctx)
        target = ctx.engines[action.target]
        if action.kind == "reset_prefix_cache":
            return await self.reset_prefix_cache(target)
        if action.kind == "rewarm_prefix_cache":
            return await self.rewarm(target, ctx.templates, int(action.params.get("variations", 1)))
        if action.kind == "warm_up":
            async with self.client_factory(REQUEST_TIMEOUT_S) as client:
                steps = await warm_up(target.url.rstrip("/"), client,
                                      batches=action.params.get("batches", WARM_BATCHES),
                                      prompt_tokens=action.params.get("prompt_tokens", WARM_PROMPT_TOKENS),
                                      max_model_len=target.max_model_len)
            return Applied(None, tuple(steps))
        return await self.defragment(target, action.params, ctx)

    async def reset_prefix_cache(self, target: EngineTarget) -> Applied:
        url = target.url.rstrip("/")
        async with self.client_factory(30.0) as client:
            try:
                resp = await client.post(url + "/reset_prefix_cache")
            except httpx.HTTPError as exc:
                raise ActuatorError(f"{target.name}: /reset_prefix_cache failed: {type(exc).__name__}") from None
        if resp.status_code == 404:
            raise Refused(f"{target.name}: /reset_prefix_cache is not served: dev mode is off (start vLLM with "
                          "VLLM_SERVER_DEV_MODE=1)")
        if resp.status_code >= 300:
            raise ActuatorError(f"{target.name}: /reset_prefix_cache answered HTTP {resp.status_code}: "
                                f"{_err_text(resp)}")
        return Applied(None, (f"POST {url}/reset_prefix_cache: {resp.status_code}",))

    async def rewarm(self, target: EngineTarget, templates: Sequence[str], variations: int) -> Applied:
        url = target.url.rstrip("/")
        sem = asyncio.Semaphore(8)
        async with self.client_factory(REQUEST_TIMEOUT_S) as client:
            model, _ = await served_model(client, url)

            async def one(route: str, body: dict[str, Any]) -> str | None:
                body = {**body, "max_tokens": 1, "temperature": 0}
                if model:
                    body["model"] = model
                async with sem:
                    try:
                        r = await client.post(url + route, json=body)
                    except httpx.HTTPError as exc:
                        return type(exc).__name__
                return None if r.status_code == 200 else f"HTTP {r.status_code}: {_err_text(r)}"

            jobs = []
            for template in templates:
                route, body = _template_body(template)
                jobs += [one(route, _vary(route, body, i)) for i in range(variations)]
            errors = [e for e in await asyncio.gather(*jobs) if e]
        sent = len(jobs)
        if errors and len(errors) == sent:
            raise ActuatorError(f"{target.name}: every prefix-cache re-warm request failed ({errors[0]})")
        return Applied(None, (f"replayed {len(templates)} template(s) x {variations} variation(s): "
                              f"{sent - len(errors)}/{sent} ok" + (f"; first error: {errors[0]}" if errors else ""),))

    # ----- defragment ----------------------------------------------------------------------------

    async def _dcgm_fb(self, target: EngineTarget) -> float | None:
        url = getattr(target, "dcgm", None) or self.dcgm_urls.get(target.name)
        if not url:
            return None

        def read() -> float:
            with httpx.Client(timeout=5.0, transport=self.sync_transport) as client:
                return engine_fb_bytes(DcgmSource(url, client).read(list(target.gpus) or None))

        try:
            return await asyncio.to_thread(read)
        except GpuError:
            return None

    async def _engine_get(self, client: httpx.AsyncClient, url: str) -> httpx.Response | None:
        try:
            return await client.get(url)
        except httpx.HTTPError:
            return None

    async def _wait_drained(self, client: httpx.AsyncClient, target: EngineTarget, ctx: ActuatorContext,
                            timeout_s: float) -> bool:
        assert self.router is not None
        deadline = self.clock() + timeout_s
        if not await self.router.wait_idle(ctx, target.name, timeout_s):
            return False
        while True:  # requests sent to the engine directly, not through the router
            r = await self._engine_get(client, target.url.rstrip("/") + "/load")
            if r is None or r.status_code != 200 or int(r.json().get("server_load", 0)) == 0:
                return True
            if self.clock() > deadline:
                return False
            await self.sleep(0.05)

    async def _is_sleeping(self, client: httpx.AsyncClient, url: str) -> bool | None:
        r = await self._engine_get(client, url + "/is_sleeping")
        if r is None or r.status_code != 200:
            return None
        try:
            return bool(r.json().get("is_sleeping"))
        except ValueError:
            return None

    async def defragment(self, target: EngineTarget, params: Mapping[str, Any], ctx: ActuatorContext) -> Applied:
        """Drain, sleep level 1, verify memory freed, wake, resume; else relaunch. Never left drained or asleep."""
        assert self.router is not None
        url = target.url.rstrip("/")
        steps: list[str] = []
        min_freed = max(0.05, float(params.get("min_freed_ratio", 0.05) or 0.05))
        level = int(params.get("sleep_level", 1))
        async with self.client_factory(30.0) as client:
            sleeping = await self._is_sleeping(client, url)
            fb_before = await self.fb_reader(target)
            if sleeping is None:
                return await self._fallback(target, ctx, [
                    *steps, f"{url}/is_sleeping not served: dev mode is off (VLLM_SERVER_DEV_MODE=1), no sleep/wake"])
            if fb_before is None:
                return await self._fallback(target, ctx, [
                    *steps, "no framebuffer reading for this engine (dcgm): freed memory could not be verified"])
            prev_state = await self.router.drain(ctx, target.name)
            steps.append(f"router: {target.name} {prev_state} -> draining")
            slept = False
            why = ""
            try:
                if not await self._wait_drained(client, target, ctx, float(params.get("drain_timeout_s", 60.0))):
                    raise ActuatorError(f"{target.name} still had requests in flight after the drain timeout; "
                                        "not put to sleep")
                r = await client.post(url + "/sleep", params={"level": level})
                slept = True
                if r.status_code >= 300:
                    why = f"/sleep answered HTTP {r.status_code}: {_err_text(r)}"
                elif await self._is_sleeping(client, url) is not True:
                    why = "/is_sleeping did not turn true after /sleep"
                else:
                    fb_asleep = await self.fb_reader(target)
                    freed = 0.0
                    if fb_asleep is not None and fb_before > 0:
                        freed = max(0.0, (fb_before - fb_asleep) / fb_before)
                    steps.append(f"sleep level {level}: framebuffer {fb_before / 2**30:.2f} -> "
                                 f"{(fb_asleep or 0) / 2**30:.2f} GiB (freed {freed:.0%})")
                    if fb_asleep is None:
                        why = "the framebuffer could not be read while asleep"
                    elif freed < min_freed:
                        why = (f"sleep freed {freed:.0%} of the framebuffer (< {min_freed:.0%}): sleep mode is "
                               "off (--enable-sleep-mode) or not supported")
            finally:
                try:
                    if slept:
                        await self._wake(client, url, target.name, steps)
                finally:
                    await self.router.resume(ctx, target.name, prev_state)
                    steps.append(f"router: {target.name} -> {prev_state}")
        if why:
            return await self._fallback(target, ctx, [*steps, why])
        fb_after = await self.fb_reader(target)
        if fb_after is not None:
            steps.append(f"after wake-up: framebuffer {fb_after / 2**30:.2f} GiB (was {fb_before / 2**30:.2f})")
        return Applied(None, tuple(steps), {"fb_before_bytes": fb_before, "fb_after_bytes": fb_after,
                                            "method": "sleep"})

    async def _wake(self, client: httpx.AsyncClient, url: str, name: str, steps: list[str]) -> None:
        for _ in range(3):
            try:
                r = await client.post(url + "/wake_up")
                if r.status_code < 300 and await self._is_sleeping(client, url) is False:
                    steps.append("woke up")
                    return
            except httpx.HTTPError:
                pass
            await self.sleep(0.2)
        raise ActuatorError(f"{name}: /wake_up did not bring the engine back (it may still be asleep); "
                            "relaunch it")

    async def _fallback(self, target: EngineTarget, ctx: ActuatorContext, steps: list[str]) -> Applied:
        if self.launcher is None:
            raise ActuatorError(f"{target.name}: cannot defragment by sleep/wake ({steps[-1]}) and no launcher "
                                "is configured to relaunch it")
        steps.append("falling back to a relaunch")
        applied = await self.launcher.relaunch(target, ctx, {})
        return Applied(None, (*steps, *applied.steps), {**applied.changed, "method": "relaunch"})
