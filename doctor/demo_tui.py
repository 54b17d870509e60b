"""`doctor demo` with a terminal: the same engines, router and storm, watched by `doctor serve` in approve mode and
shown in `doctor tui`, where the person watching approves the fix. Without a terminal, or under CI=true, or with
--headless, the demo tells its story as text instead (doctor.demo)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from doctor.secrets import write_private

API_TOKEN = "demo-api-token"


def wants_tui(choice: str | None, *, stdin_tty: bool, stdout_tty: bool, environ: Mapping[str, str]) -> bool:
    """The TUI only with a terminal on both ends and not under CI, unless --headless; --tui cannot make a terminal."""
    if choice == "headless" or environ.get("CI", "").lower() in ("true", "1"):
        return False
    return stdin_tty and stdout_tty


def serve_section(work: Path, port: int) -> str:
    """The config's [serve] part for the demo's daemon (its token in a file beside the config)."""
    write_private(work / "api-token", API_TOKEN + "\n")
    return f'\n[serve]\nlisten = "127.0.0.1:{port}"\ninterval_s = 2\ntoken_file = "api-token"\n'


async def _ready(url: str, timeout_s: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url + "/readyz")).status_code == 200:
                    return True
            await asyncio.sleep(0.5)
    return False


async def run(config: Path, work: Path, port: int, load: Callable[[], Awaitable[Any]],
              say: Callable[[str], None], *, timeline: Path | None = None) -> int:
    """Start the daemon, the load and the TUI (in this terminal); when the person quits, stop and summarize."""
    url = f"http://127.0.0.1:{port}"
    log = open(work / "serve.log", "wb")  # noqa: SIM115 (closed below, after the daemon)
    daemon = await asyncio.create_subprocess_exec(sys.executable, "-m", "doctor.cli", "serve", "--config",
                                                  str(config), stdout=log, stderr=log)
    traffic: asyncio.Future[Any] | None = None
    try:
        if not await _ready(url):
            say(f"doctor serve did not become ready; its log: {work / 'serve.log'}")
            return 1
        traffic = asyncio.ensure_future(load())
        shown = ["--timeline", str(timeline)] if timeline is not None else []
        tui = await asyncio.create_subprocess_exec(sys.executable, "-m", "doctor.cli", "tui", "--daemon", url,
                                                   "--token-file", str(work / "api-token"), *shown)
        await tui.wait()
    finally:
        if traffic is not None:
            traffic.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await traffic
        daemon.terminate()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(daemon.wait(), 15)
        log.close()
    audit = work / "state" / "audit.jsonl"
    lines = [json.loads(x) for x in audit.read_text().splitlines() if x.strip()] if audit.exists() else []
    done = [e for e in lines if e.get("event") in ("approved", "applied", "rejected", "rolled_back", "verified")]
    say(f"demo over: {len(done)} decisions and changes in the audit log {audit}")
    for e in done:
        say(f"  {e.get('event')}: {e.get('action')} on {e.get('target')} ({e.get('who') or e.get('trigger') or ''})")
    return 0
