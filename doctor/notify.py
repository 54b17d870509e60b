"""Notifications for people: a webhook sink with a Slack-compatible payload (`text` plus Block Kit `blocks`).

Events: a new finding, an action awaiting approval, applied, verified, rolled back, escalated. A token
bucket limits how often messages go; what it holds back (and what failed to send) is counted and
summarised in the next message, and `flush()` sends that summary on its own. A slow, failing or absent
receiver is logged, never raised into the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from doctor.config_notify import NotifySettings
from playbooks.model import SEVERITY_RANK, Severity

EventKind = Literal["finding", "approval", "applied", "verified", "rolled_back", "escalated"]
# kind -> (emoji, title), most urgent first (the order a summary of held-back events keeps them in)
KINDS: dict[str, tuple[str, str]] = {
    "escalated": (":rotating_light:", "Escalated to a person"),
    "approval": (":raised_hand:", "Action awaiting approval"),
    "rolled_back": (":rewind:", "Action rolled back"),
    "finding": (":mag:", "New finding"),
    "applied": (":wrench:", "Action applied"),
    "verified": (":white_check_mark:", "Action verified"),
}
SEVERITY_EMOJI = {"info": ":large_blue_circle:", "warning": ":large_orange_circle:", "critical": ":red_circle:"}
HEADER_MAX, SECTION_MAX, FIELD_MAX = 150, 3000, 2000  # Slack's limits on header, section and field text
BACKLOG_SAMPLES = 5  # held-back events named in the summary (the rest are counted by kind)
_log = logging.getLogger("doctor.notify")


@dataclass(frozen=True)
class NotifyEvent:
    """Something a person should hear about."""

    kind: EventKind
    engine: str
    playbook: str
    summary: str
    severity: Severity = "warning"
    action_id: str | None = None
    detail_url: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown event kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r} (known: {', '.join(SEVERITY_RANK)})")

    @property
    def title(self) -> str:
        return KINDS[self.kind][1]

    def headline(self) -> str:
        """One line of plain text: `[critical] Action applied: hot/kv_pressure: summary (action a1)`."""
        action = f" (action {self.action_id})" if self.action_id else ""
        return f"[{self.severity}] {self.title}: {self.engine}/{self.playbook}: {self.summary}{action}"

    def rank(self) -> tuple[int, int]:
        """Higher is more urgent: escalations and approvals first, then by severity."""
        return (len(KINDS) - list(KINDS).index(self.kind), SEVERITY_RANK[self.severity])


@dataclass
class Backlog:
    """Events not delivered yet: held back by the rate limit, or their post failed."""

    counts: Counter[str] = field(default_factory=Counter)
    failed: int = 0
    samples: list[NotifyEvent] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, event: NotifyEvent, *, failed: bool = False) -> None:
        self.counts[event.kind] += 1
        self.failed += int(failed)
        self.samples.append(event)
        self.samples.sort(key=lambda e: e.rank(), reverse=True)  # stable: earlier first among equals
        del self.samples[BACKLOG_SAMPLES:]

    def merge(self, other: Backlog) -> None:
        self.counts.update(other.counts)
        self.failed += other.failed
        self.samples = sorted(self.samples + other.samples, key=lambda e: e.rank(), reverse=True)[:BACKLOG_SAMPLES]

    def describe(self) -> str:
        """`4 earlier notifications were not delivered (3 held back by the rate limit, 1 failed): 3 finding, ...`."""
        kinds = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in
                          sorted(self.counts.items(), key=lambda kv: list(KINDS).index(kv[0])))
        why = [f"{self.total - self.failed} held back by the rate limit"] if self.total > self.failed else []
        why += [f"{self.failed} failed to send"] if self.failed else []
        plural = "s were" if self.total != 1 else " was"
        return f"{self.total} earlier notification{plural} not delivered ({', '.join(why)}): {kinds}"


def escape(text: str) -> str:
    """Slack reads `&`, `<` and `>` as markup (`<!channel>` pings everyone): escape them."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def slack_payload(event: NotifyEvent | None, backlog: Backlog | None = None,
                  source: str = "serving-doctor") -> dict[str, Any]:
    """The JSON body for a Slack incoming webhook: `text` (the notification's fallback) and `blocks`."""
    blocks: list[dict[str, Any]] = []
    text = ""
    if event is not None:
        emoji = KINDS[event.kind][0]
        text = escape(event.headline())
        blocks.append({"type": "header", "text": {"type": "plain_text", "emoji": True,
                                                  "text": _cut(f"{emoji} {event.title}: {event.engine}", HEADER_MAX)}})
        body = f"{SEVERITY_EMOJI[event.severity]} *{escape(event.summary)}*"
        if event.kind == "approval" and event.action_id:
            body += f"\nApprove with `doctor approve {escape(event.action_id)}` (or `doctor reject`)."
        fields = [("Engine", event.engine), ("Playbook", event.playbook), ("Severity", event.severity)]
        if event.action_id:
            fields.append(("Action", f"`{event.action_id}`"))
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(body, SECTION_MAX)},
                       "fields": [{"type": "mrkdwn", "text": _cut(f"*{k}*\n{escape(v)}", FIELD_MAX)}
                                  for k, v in fields]})
        context = [{"type": "mrkdwn", "text": escape(source)}]
        if event.detail_url:
            context.append({"type": "mrkdwn", "text": f"<{escape(event.detail_url)}|Details>"})
        blocks.append({"type": "context", "elements": context})
    if backlog is not None and backlog.total:
        note = backlog.describe()
        text = f"{text} (+{escape(note)})" if text else escape(f"{source}: {note}")
        lines = [f":hourglass: {escape(note)}"] + [f"• {escape(e.headline())}" for e in backlog.samples]
        if backlog.total > len(backlog.samples):
            lines.append(f"• … and {backlog.total - len(backlog.samples)} more")
        if blocks:
            blocks.append({"type": "divider"})
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut("\n".join(lines), SECTION_MAX)}})
    return {"text": text, "blocks": blocks}


class TokenBucket:
    """`burst` tokens, one more every `interval_s` (0: never empty); `block_until` honours a Retry-After."""

    def __init__(self, burst: int, interval_s: float, clock: Callable[[], float]) -> None:
        self.burst, self.interval_s, self.clock = burst, interval_s, clock
        self.tokens = float(burst)
        self.stamp = clock()
        self.blocked_until = 0.0

    def take(self) -> bool:
        now = self.clock()
        if now < self.blocked_until:
            return False
        if self.interval_s <= 0:
            return True
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) / self.interval_s)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def block_until(self, when: float) -> None:
        self.blocked_until = max(self.blocked_until, when)


@dataclass
class NotifyStats:
    """Counters for the daemon's /metrics."""

    sent: int = 0
    suppressed: int = 0
    failed: int = 0


class Notifier:
    """Posts events to one webhook URL, rate-limited; `send` returns whether this event went out."""

    def __init__(self, url: str, *, client: httpx.AsyncClient | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, clock: Callable[[], float] = time.monotonic,
                 min_interval_s: float = 10.0, burst: int = 5, timeout_s: float = 5.0, bearer: str | None = None,
                 headers: Mapping[str, str] | None = None, source: str = "serving-doctor",
                 logger: logging.Logger = _log) -> None:
        self.url, self.timeout_s, self.source, self.log = url, timeout_s, source, logger
        self._own = client is None
        self._client = client or httpx.AsyncClient(transport=transport)
        self._headers = dict(headers or {})
        if bearer:
            self._headers["Authorization"] = f"Bearer {bearer}"
        self.bucket = TokenBucket(burst, min_interval_s, clock)
        self.clock = clock
        self.backlog = Backlog()
        self.stats = NotifyStats()

    @classmethod
    def from_settings(cls, settings: NotifySettings, **kwargs: Any) -> Notifier | None:
        """A notifier for [notify], or None when it is off or its url_file/token_file cannot be read (logged)."""
        if not settings.enabled:
            return None
        try:
            url, bearer = settings.resolve_url(), settings.token()
        except ValueError as exc:  # SecretFileError: the message names the file and what is wrong
            _log.error("notify: %s; notifications are off", exc)
            return None
        if not url:
            _log.error("notify: %s is empty; notifications are off", settings.url_file)
            return None
        return cls(url, min_interval_s=settings.min_interval_s, burst=settings.burst, timeout_s=settings.timeout_s,
                   bearer=bearer, **kwargs)

    @property
    def where(self) -> str:
        """The receiver without its path (a Slack webhook URL's path is its secret)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}/…" if parts.path.strip("/") else f"{parts.scheme}://{parts.netloc}"

    async def send(self, event: NotifyEvent) -> bool:
        """Post the event (with a summary of what was held back); False when limited or the post failed."""
        if not self.bucket.take():
            self.backlog.add(event)
            self.stats.suppressed += 1
            return False
        held, self.backlog = self.backlog, Backlog()
        if await self._post(slack_payload(event, held, self.source), event.headline()):
            return True
        held.add(event, failed=True)
        self.backlog.merge(held)
        return False

    async def flush(self) -> bool:
        """Send the summary of held-back events on its own, when the limit allows; True when nothing is left."""
        if not self.backlog.total:
            return True
        if not self.bucket.take():
            return False
        held, self.backlog = self.backlog, Backlog()
        if await self._post(slack_payload(None, held, self.source), held.describe()):
            return True
        held.failed = held.total
        self.backlog.merge(held)
        return False

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def _post(self, payload: dict[str, Any], what: str) -> bool:
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._client.post(self.url, json=payload, headers=self._headers,
                                                    timeout=self.timeout_s)
        except (TimeoutError, httpx.TimeoutException):
            return self._failed(what, f"no answer within {self.timeout_s:g}s")
        except Exception as exc:  # a notification must never break the caller
            return self._failed(what, f"{type(exc).__name__}: {str(exc).replace(self.url, self.where)}")
        if response.status_code == 429:
            with contextlib.suppress(ValueError):
                self.bucket.block_until(self.clock() + float(response.headers.get("retry-after", "")))
        if not 200 <= response.status_code < 300:
            return self._failed(what, f"HTTP {response.status_code}: {response.text[:200]!r}")
        self.stats.sent += 1
        return True

    def _failed(self, what: str, why: str) -> bool:
        self.stats.failed += 1
        self.log.warning("notify: %s did not take %r: %s (counted into the next message)", self.where, what, why)
        return False
