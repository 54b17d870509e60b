"""An alert storm while cron runs `doctor diagnose --fix` beside the daemon on the same state directory.

1,000 webhook posts in about 10 s: new firing alerts for a condition the hot engine really has (a storm of
9000-token documents; the `for` state says it has held 100 s), exact repeats, resolved messages, alerts for no
known engine, and garbage. Every post is answered (2xx, 4xx for garbage, 503 only with the queue full; those are
posted again afterwards, as Alertmanager retries 5xx); every accepted alert ends in the audit log; the daemon's
memory stays bounded; and with cron and the daemon both acting, the length limit is applied once. The daemon's
notifications ([notify], a real receiver on loopback) say so once each, not once per cycle.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.http_capture import receiver
from tests.serve.payloads import alert, body
from tests.serve.stack import (
    API_TOKEN,
    ROOT,
    audit,
    daemon_for,
    engines,
    load,
    policy,
    router,
    seed_for_state,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.timeout(300)
POSTS = 1000
SPREAD_S = 10.0
QUEUE = 40


def storm_bodies(instance: str) -> list[tuple[str, bytes]]:
    """(kind, body) of each post, in order."""
    out: list[tuple[str, bytes]] = []
    firing: list[bytes] = []
    for i in range(POSTS):
        k = i % 10
        if k < 4:
            b = body(alert(f"f{i:04d}", instance=instance, starts_at="2026-12-01T10:00:00Z"))
            firing.append(b)
            out.append(("firing", b))
        elif k < 6:
            out.append(("repeat", firing[(i * 7) % len(firing)]))
        elif k == 6:
            out.append(("resolved", body(alert(f"f{(i - 6):04d}", status="resolved", instance=instance,
                                               starts_at="2026-12-01T10:00:00Z"))))
        elif k == 7:
            out.append(("unknown", body(alert(f"u{i:04d}", instance="10.9.9.9:8000"))))
        else:
            out.append(("garbage", [b"{not json", b'{"version": "3", "alerts": []}', b"\xff" * 64,
                                    b'{"version": "4", "status": "firing", "alerts": [{"status": "firing"}]}'][i % 4]))
    return out


async def post_all(url: str, posts: list[tuple[str, bytes]]) -> list[tuple[int, dict[str, object]]]:
    headers = {"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=60, trust_env=False, limits=httpx.Limits(max_connections=32)) as client:
        start = time.monotonic()

        async def one(i: int, content: bytes) -> tuple[int, dict[str, object]]:
            await asyncio.sleep(max(0.0, start + i * SPREAD_S / len(posts) - time.monotonic()))
            for attempt in range(5):
                try:
                    r = await client.post(url + "/v1/alerts", content=content, headers=headers)
                    return r.status_code, r.json()
                except httpx.TransportError:
                    # Alertmanager sends again what failed without an answer: here a pooled connection that the
                    # daemon's server closed as idle (uvicorn's 5 s keep-alive) just as the post went out on it
                    # (seen on CI under load). A post it took is deduplicated, so sending again loses nothing.
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.2 * (attempt + 1))
            raise AssertionError("unreachable")

        return list(await asyncio.gather(*(one(i, b) for i, (_, b) in enumerate(posts))))


def cron(config: Path, stop: threading.Event, codes: list[int]) -> None:
    """`doctor diagnose --fix` as cron would start it, back to back, on the daemon's state directory."""
    while not stop.is_set():
        proc = subprocess.run([sys.executable, "-m", "doctor.cli", "diagnose", "--config", str(config), "--fix",
                               "--format", "json", "--verify-wait", "0"], capture_output=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
        codes.append(proc.returncode)


def test_an_alert_storm_beside_cron(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with engines(["hot", "cold"], tmp_path) as eng, router(eng["hot"].url, eng["cold"].url) as r, \
            receiver() as people:
        storm = load(eng["hot"].url)
        stop, codes = threading.Event(), []  # type: ignore[var-annotated]
        daemon = None
        try:
            config = write_config(tmp_path, hot=eng["hot"].url, cold=eng["cold"].url, router_url=r.url,
                                  interval_s=2.0, serve_extra=f"queue_size = {QUEUE}\n", doctor_extra='sample_s = "1s"')
            config.write_text(config.read_text() + f'\n[notify]\nurl = "{people.url}/hook"\nmin_interval_s = 0\n')
            seed_for_state(state, "long_prompt_share|hot", held_s=100)
            daemon = daemon_for(config, tmp_path).start()
            daemon_pid = daemon.proc.pid if daemon.proc else 0
            crons = threading.Thread(target=cron, args=(config, stop, codes), daemon=True)
            crons.start()
            rss_before = daemon.rss_bytes()
            peak = [rss_before]
            sampling = threading.Event()

            def sample() -> None:
                while not sampling.is_set():
                    try:
                        peak[0] = max(peak[0], daemon.rss_bytes())
                    except psutil.NoSuchProcess:  # stopped: the test has failed and is tearing down
                        return
                    time.sleep(0.2)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            posts = storm_bodies(eng["hot"].url.removeprefix("http://"))
            started = time.monotonic()
            answers = asyncio.run(post_all(daemon.url, posts))
            took = time.monotonic() - started
            first_503 = sum(1 for code, _ in answers if code == 503)
            # Alertmanager retries what was answered 503, until it is taken
            for _ in range(60):
                retry = [i for i, (code, _) in enumerate(answers) if code == 503]
                if not retry:
                    break
                time.sleep(0.5)
                again = asyncio.run(post_all(daemon.url, [posts[i] for i in retry]))
                for i, a in zip(retry, again, strict=True):
                    answers[i] = a
            wait_for("the queue to drain", lambda: daemon.get("/v1/state").json()["alerts"]["queue_depth"] == 0,
                     timeout_s=120)
            sampling.set()
            sampler.join()
            rss_after = daemon.rss_bytes()
            stop.set()
            crons.join(120)
        finally:
            stop.set()
            if daemon is not None:
                daemon.stop()
            storm.stop()
        print(f"\n{POSTS} posts in {took:.1f} s; daemon RSS {rss_before / 2**20:.0f} MB before, peak "
              f"{peak[0] / 2**20:.0f} MB, {rss_after / 2**20:.0f} MB after; {first_503} answered 503 (queue full) "
              f"and posted again; {len(codes)} cron runs beside it")

        kinds = [k for k, _ in posts]
        assert all(code in (200, 400) for code, _ in answers), {code for code, _ in answers}
        assert all(code == 400 for (code, _), k in zip(answers, kinds, strict=True) if k == "garbage")
        assert all(code == 200 for (code, _), k in zip(answers, kinds, strict=True) if k != "garbage")
        events = audit(state)
        received = {(e["fingerprint"], e["alert_status"]) for e in events if e["event"] == "alert_received"}
        sent = {(a["fingerprint"], a["status"]) for k, b in posts if k != "garbage" for a in json.loads(b)["alerts"]}
        assert sent <= received, sorted(sent - received)[:5]  # no accepted alert lost
        ends = {"alert_confirmed", "alert_not_confirmed", "alert_resolved", "alert_unmapped"}
        ended = {(e["fingerprint"], e["alert_status"]) for e in events if e["event"] in ends}
        ended_by_resolve = {e["fingerprint"] for e in events if e["event"] == "alert_resolved" and e["ended_wait"]}
        # each has an end: confirmed, not confirmed, unmapped, resolved, or its wait ended by its resolved message
        assert all(a in ended or a[0] in ended_by_resolve for a in sent), sorted(sent - ended)[:5]
        begun = [e for e in events if e["event"] == "begin"]
        assert [(e["action"], e["target"]) for e in begun] == [("length_limit", "router")], begun
        print(f"the one length limit: {begun[0]['trigger']} (pid {begun[0]['pid']}, daemon pid {daemon_pid})")
        assert policy(r.url)["length_limit_tokens"] == 8192
        assert any(e["event"] == "alert_confirmed" for e in events)
        assert all(c in (0, 1, 2) for c in codes), codes
        assert rss_after - rss_before < 64 * 2**20 and peak[0] < 300 * 2**20
        full = [a for (code, a), k in zip(answers, kinds, strict=True) if code == 503]
        assert not full  # every 503 was retried until taken
        said = [p.json()["text"] for p in people.posts]
        found = [t for t in said if "New finding: hot/long_prompt_share" in t]
        assert len(found) == 1, said  # the finding, once, though every cycle of the storm still had it
        if begun[0]["trigger"].startswith("alert:"):  # the daemon applied it (else cron did, and says so itself)
            assert any("length_limit on router" in t for t in said), said
