"""Helpers for the router tests: sim engines and a real router on loopback, an injectable clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx

from router.config import RouterConfig
from router.server import RouterThread, router_thread
from sim.engine_cli import EngineThread
from sim.testing import ALL_GRAPHED, engine_thread

FAST = [*ALL_GRAPHED, "--time-scale", "0.1"]
TOKEN = "t0k-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
THRESHOLD = 1000


class FakeClock:
    """Wall clock for the router's rules (expiry, history), moved by hand."""

    def __init__(self, now: float = 1_900_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def engine(name: str, *extra: str) -> AbstractContextManager[EngineThread]:
    """A sim engine whose served model name tells which engine answered (requests omit `model`)."""
    return engine_thread(["m", *FAST, "--served-model-name", name, "--sim-fault-endpoint", *extra])


def prompt(tokens: int) -> str:
    """Exactly `tokens` sim tokens, and as many by the router's 4-chars-per-token estimate."""
    return "tok " * tokens


@contextmanager
def router(hot: list[str] | str, cold: list[str] | str, *, clock: Callable[[], float] | None = None,
           token: str | None = TOKEN, **settings: Any) -> Iterator[RouterThread]:
    settings.setdefault("policy_file", "")
    settings.setdefault("route_threshold_tokens", THRESHOLD)
    settings.setdefault("health_interval_s", 0.2)
    cfg = RouterConfig(hot=[hot] if isinstance(hot, str) else hot, cold=[cold] if isinstance(cold, str) else cold,
                       port=0, **settings)
    kwargs: dict[str, Any] = {"token": token or ""}
    if clock is not None:
        kwargs["clock"] = clock
    with router_thread(cfg, **kwargs) as rt:
        yield rt


def policy_doc(client: httpx.Client) -> dict[str, Any]:
    """The current policy as a PUT-able document."""
    doc = client.get("/router/policy", headers=AUTH).json()
    doc.pop("status", None)
    doc.pop("updated_at", None)
    return dict(doc)


def put(client: httpx.Client, doc: dict[str, Any]) -> httpx.Response:
    return client.put("/router/policy", json=doc, headers=AUTH)


def change(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    doc = policy_doc(client)
    doc.update(fields)
    r = put(client, doc)
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll until `cond()` (a generous bound: tests assert outcomes, not speed)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def served_by(resp: httpx.Response) -> str:
    return str(resp.json()["model"])


def complete(client: httpx.Client, tokens: int, **extra: Any) -> httpx.Response:
    return client.post("/v1/completions", json={"prompt": prompt(tokens), "max_tokens": 3, **extra})
