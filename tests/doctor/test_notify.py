"""Notifications for people: Slack-compatible payloads posted to a real receiver on loopback, rate-limited,
with what the limit held back counted into the next message; a down, slow or failing receiver never raises."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from doctor.config import load_config
from doctor.config_notify import NotifySettings
from doctor.config_schema import ConfigError
from doctor.notify import HEADER_MAX, KINDS, SECTION_MAX, EventKind, Notifier, NotifyEvent, slack_payload
from doctor.secrets import write_private
from tests.http_capture import Receiver, receiver

KV = NotifyEvent("finding", "hot", "kv_pressure", "KV cache at 97% for 5m", "critical")
APPROVAL = NotifyEvent("approval", "cold", "long_prompt_share", "Set a length limit of 8192 tokens", "warning",
                       action_id="a1b2c3")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _event(i: int, kind: EventKind = "applied") -> NotifyEvent:
    return NotifyEvent(kind, "hot", "queue_pressure", f"event {i}", "warning", action_id=f"act{i}")


def _send_all(notifier: Notifier, events: list[NotifyEvent]) -> list[bool]:
    async def go() -> list[bool]:
        return [await notifier.send(e) for e in events]
    return asyncio.run(go())


def _notifier(url: str, clock: Clock | None = None, **kwargs: Any) -> Notifier:
    return Notifier(url, clock=clock or Clock(), **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _section_texts(payload: dict[str, Any]) -> list[str]:
    return [b["text"]["text"] for b in payload["blocks"] if b["type"] == "section"]


# ---------------------------------------------------------------- payload


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_makes_a_slack_message(kind: str) -> None:
    event = NotifyEvent(kind, "hot", "kv_pressure", "KV cache at 97%", "critical", action_id="x1",  # type: ignore[arg-type]
                        detail_url="http://127.0.0.1:9361/v1/actions/x1")
    payload = slack_payload(event)
    assert set(payload) == {"text", "blocks"}
    assert payload["text"] == f"[critical] {KINDS[kind][1]}: hot/kv_pressure: KV cache at 97% (action x1)"
    header, section, context = payload["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "emoji": True,
                                                 "text": f"{KINDS[kind][0]} {KINDS[kind][1]}: hot"}}
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert "*KV cache at 97%*" in section["text"]["text"]
    assert [f["text"] for f in section["fields"]] == ["*Engine*\nhot", "*Playbook*\nkv_pressure",
                                                      "*Severity*\ncritical", "*Action*\n`x1`"]
    assert context["type"] == "context"
    assert {"type": "mrkdwn", "text": "<http://127.0.0.1:9361/v1/actions/x1|Details>"} in context["elements"]
    json.dumps(payload)


def test_approval_says_how_to_approve() -> None:
    text = _section_texts(slack_payload(APPROVAL))[0]
    assert "`doctor approve a1b2c3`" in text and "doctor reject" in text


def test_markup_is_escaped_and_long_text_is_cut_to_slacks_limits() -> None:
    event = NotifyEvent("escalated", "h" * 200, "p99_spike", "<!channel> & " + "x" * 5000, "critical")
    payload = slack_payload(event)
    assert "<!channel>" not in json.dumps(payload) and "&lt;!channel&gt; &amp;" in payload["text"]
    assert len(payload["blocks"][0]["text"]["text"]) <= HEADER_MAX
    assert all(len(t) <= SECTION_MAX for t in _section_texts(payload))
    assert _section_texts(payload)[0].endswith("…")


def test_unknown_kind_or_severity_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event kind 'paged'"):
        NotifyEvent("paged", "hot", "kv_pressure", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown severity 'fatal'"):
        NotifyEvent("finding", "hot", "kv_pressure", "x", "fatal")  # type: ignore[arg-type]


# ---------------------------------------------------------------- posting to a real receiver


def test_posts_the_payload_with_bearer_and_headers() -> None:
    with receiver() as rec:
        n = _notifier(rec.url + "/services/T0/B0/secret", bearer="s3cret", headers={"X-Team": "llm"})
        assert _send_all(n, [KV]) == [True]
        (post,) = rec.wait_for(1)
    assert post.path == "/services/T0/B0/secret"
    assert post.headers["content-type"] == "application/json"
    assert post.headers["authorization"] == "Bearer s3cret" and post.headers["x-team"] == "llm"
    assert post.json() == slack_payload(KV)
    assert (n.stats.sent, n.stats.suppressed, n.stats.failed) == (1, 0, 0)


def test_rate_limit_holds_back_and_counts_into_the_next_message() -> None:
    clock = Clock()
    held = [_event(2), APPROVAL, _event(4, "finding")]
    with receiver() as rec:
        n = _notifier(rec.url, clock, burst=2, min_interval_s=10)

        async def go() -> None:
            assert [await n.send(e) for e in [_event(0), _event(1), *held]] == [True, True, False, False, False]
            assert len(rec.posts) == 2 and n.stats.suppressed == 3
            clock.now += 5
            assert not await n.send(_event(5))  # half a token
            clock.now += 5
            assert await n.send(_event(6))
            clock.now += 10
            assert await n.send(_event(7))
        asyncio.run(go())
        posts = rec.wait_for(4)
    folded = posts[2].json()
    assert folded["text"].startswith("[warning] Action applied: hot/queue_pressure: event 6 (action act6) (+4 earlier")
    note = _section_texts(folded)[-1]
    assert note.startswith(":hourglass: 4 earlier notifications were not delivered (4 held back by the rate limit): "
                           "1 approval, 1 finding, 2 applied")
    lines = note.splitlines()[1:]
    assert lines[0] == f"• {APPROVAL.headline()}"  # the most urgent first
    assert {line[2:] for line in lines} == {e.headline() for e in [*held, _event(5)]}
    assert len(_section_texts(posts[3].json())) == 1  # nothing held back any more
    assert n.stats.sent == 4 and n.stats.suppressed == 4


def test_flush_sends_the_held_back_summary_alone() -> None:
    clock = Clock()
    with receiver() as rec:
        n = _notifier(rec.url, clock, burst=1, min_interval_s=60)

        async def go() -> tuple[bool, bool, bool, bool]:
            await n.send(KV)
            await n.send(APPROVAL)
            early = await n.flush()  # no token yet
            clock.now += 60
            return early, await n.flush(), await n.flush(), n.backlog.total == 0
        assert asyncio.run(go()) == (False, True, True, True)
        posts = rec.wait_for(2)
        assert len(rec.posts) == 2  # the second flush had nothing to send
    summary = posts[1].json()
    assert summary["text"] == ("serving-doctor: 1 earlier notification was not delivered (1 held back by the rate "
                               "limit): 1 approval")
    assert [b["type"] for b in summary["blocks"]] == ["section"]
    assert APPROVAL.headline() in summary["blocks"][0]["text"]["text"]


def test_zero_interval_means_no_limit() -> None:
    with receiver() as rec:
        n = _notifier(rec.url, min_interval_s=0, burst=1)
        assert _send_all(n, [_event(i) for i in range(8)]) == [True] * 8
        assert len(rec.wait_for(8)) == 8


def test_non_2xx_is_logged_and_the_event_folded_into_the_next(caplog: pytest.LogCaptureFixture) -> None:
    with receiver() as rec:
        n = _notifier(rec.url + "/hooks/secret-path", min_interval_s=0)

        async def go() -> None:
            rec.status = 500
            with caplog.at_level(logging.WARNING, logger="doctor.notify"):
                assert not await n.send(KV)
            rec.status = 200
            assert await n.send(APPROVAL)
        asyncio.run(go())
        posts = rec.wait_for(2)
    assert "HTTP 500" in caplog.text and "secret-path" not in caplog.text
    note = _section_texts(posts[1].json())[-1]
    assert "1 earlier notification was not delivered (1 failed to send): 1 finding" in note
    assert KV.headline() in note
    assert (n.stats.sent, n.stats.failed) == (1, 1)


def test_429_retry_after_holds_everything_back_until_then() -> None:
    clock = Clock()
    with receiver() as rec:
        n = _notifier(rec.url, clock, min_interval_s=0)

        async def go() -> None:
            rec.status, rec.headers = 429, {"Retry-After": "30"}
            assert not await n.send(KV)
            rec.status, rec.headers = 200, {}
            clock.now += 29
            assert not await n.send(APPROVAL)
            assert len(rec.posts) == 1  # blocked here: no post was made
            clock.now += 1
            assert await n.send(_event(3))
        asyncio.run(go())
        posts = rec.wait_for(2)
    assert "(1 held back by the rate limit, 1 failed to send)" in _section_texts(posts[1].json())[-1]


def test_receiver_down_or_bad_url_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="doctor.notify"):
        down = _notifier(f"http://127.0.0.1:{_free_port()}/hook", min_interval_s=0)
        assert _send_all(down, [KV, APPROVAL]) == [False, False]
        bad = _notifier("not a url at all", min_interval_s=0)
        assert _send_all(bad, [KV]) == [False]
    assert "ConnectError" in caplog.text and down.stats.failed == 2 and bad.stats.failed == 1
    assert down.backlog.total == 2 and down.backlog.failed == 2


def test_slow_receiver_times_out_without_raising(caplog: pytest.LogCaptureFixture) -> None:
    with receiver() as rec:
        n = _notifier(rec.url, min_interval_s=0, timeout_s=0.3)

        async def go() -> None:
            rec.hold()  # posts arrive and are not answered until release
            with caplog.at_level(logging.WARNING, logger="doctor.notify"):
                assert not await n.send(KV)
            assert "no answer within 0.3s" in caplog.text
            rec.release()
            assert await n.send(APPROVAL)
        asyncio.run(go())
        posts = rec.wait_for(2)
    assert "1 failed to send" in _section_texts(posts[1].json())[-1]


def test_a_callers_client_is_used_and_left_open() -> None:
    with receiver() as rec:
        async def go() -> bool:
            async with httpx.AsyncClient() as client:
                n = Notifier(rec.url, client=client, clock=Clock())
                sent = await n.send(KV)
                await n.aclose()
                return sent and not client.is_closed
        assert asyncio.run(go())
        rec.wait_for(1)


def test_transport_is_used() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)
    n = Notifier("http://receiver.invalid/hook", transport=httpx.MockTransport(handler), clock=Clock())
    assert _send_all(n, [KV]) == [True]
    assert json.loads(seen[0].content) == slack_payload(KV)


# ---------------------------------------------------------------- [notify] in doctor.toml


def _load(tmp_path: Path, text: str) -> NotifySettings:
    path = tmp_path / "doctor.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_config(path).notify


def _error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    return info.value


def test_notify_table_defaults_and_values(tmp_path: Path) -> None:
    off = _load(tmp_path, "")
    assert not off.enabled and Notifier.from_settings(off) is None
    s = _load(tmp_path, '[notify]\nurl_file = "secrets/notify-url"\nmin_interval_s = "1m"\nburst = 3\n'
                        'timeout_s = "500ms"\ntoken_file = "/etc/x/token"\n')
    assert s.enabled and s.url is None and s.url_file == tmp_path / "secrets" / "notify-url"
    assert (s.min_interval_s, s.burst, s.timeout_s, s.token_file) == (60.0, 3, 0.5, Path("/etc/x/token"))
    assert _load(tmp_path, '[notify]\nurl = "https://hooks.example.com/x/"\nmin_interval_s = 0\n').url == \
        "https://hooks.example.com/x"


@pytest.mark.parametrize(("text", "key", "line", "needle"), [
    ('[notify]\nurl = "https://a/x"\nurl_file = "u"\n', "notify.url_file", 3, "not both"),
    ('[notify]\nurl = "hooks.slack.com/x"\n', "notify.url", 2, "expected a URL like http://HOST:PORT"),
    ("[notify]\nburst = 0\n", "notify.burst", 2, "expected a whole number between 1 and 1000, got 0"),
    ('[notify]\nmin_interval_s = "soon"\n', "notify.min_interval_s", 2, "cannot read duration"),
    ('[notify]\ntimeout_s = "2m"\n', "notify.timeout_s", 2, "at most 60 seconds"),
    ('[notify]\nmin_intervall_s = 3\n', "notify.min_intervall_s", 2, "did you mean 'min_interval_s'?"),
])
def test_notify_table_errors_name_the_key_and_line(tmp_path: Path, text: str, key: str, line: int,
                                                    needle: str) -> None:
    err = _error(tmp_path, text)
    assert (err.key, err.line) == (key, line) and needle in str(err)
    assert str(err).startswith(f"{tmp_path / 'doctor.toml'}:{line}: {key}: ")


def test_from_settings_reads_the_url_and_token_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with receiver() as rec:
        write_private(tmp_path / "url", rec.url + "/hook\n")
        write_private(tmp_path / "token", "t0ken\n")
        s = NotifySettings(url_file=tmp_path / "url", token_file=tmp_path / "token", min_interval_s=0)
        n = Notifier.from_settings(s, clock=Clock())
        assert n is not None and n.url == rec.url + "/hook" and n.bucket.interval_s == 0
        assert _send_all(n, [KV]) == [True]
        assert rec.wait_for(1)[0].headers["authorization"] == "Bearer t0ken"
    with caplog.at_level(logging.ERROR, logger="doctor.notify"):
        assert Notifier.from_settings(NotifySettings(url_file=tmp_path / "missing")) is None
        write_private(tmp_path / "empty", "\n")
        assert Notifier.from_settings(NotifySettings(url_file=tmp_path / "empty")) is None
    assert "cannot read" in caplog.text and "is empty" in caplog.text


def test_receiver_is_a_real_server() -> None:
    """The loopback receiver answers over real HTTP (guards the other tests against a silent fake)."""
    with receiver() as rec:
        assert isinstance(rec, Receiver)
        r = httpx.post(rec.url + "/x", json={"a": 1}, trust_env=False)
        assert r.status_code == 200 and rec.wait_for(1)[0].json() == {"a": 1}
