"""[notify]: the webhook (Slack-compatible) that tells people about findings and actions; see doctor/notify.py.

Kept beside doctor/config.py, which reads the table through `notify_settings`; errors are the same
`FILE:LINE: notify.KEY: ...` ConfigErrors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from doctor.config_schema import Table
from doctor.secrets import read_secret_file

NOTIFY_KEYS = ("url", "url_file", "token_file", "min_interval_s", "burst", "timeout_s")


@dataclass(frozen=True)
class NotifySettings:
    """Where notifications go (`url`, or the URL in `url_file`: a Slack webhook URL is a secret) and how often.

    Up to `burst` messages go at once, then one per `min_interval_s` (0: no limit); what the limit holds back
    is counted into the next message. `token_file` holds an optional bearer token for a receiver that wants one.
    """

    url: str | None = None
    url_file: Path | None = None
    token_file: Path | None = None
    min_interval_s: float = 10.0
    burst: int = 5
    timeout_s: float = 5.0

    @property
    def enabled(self) -> bool:
        return self.url is not None or self.url_file is not None

    def resolve_url(self) -> str | None:
        """The URL, read from `url_file` when that is set (OSError when it cannot be read)."""
        if self.url_file is not None:
            return read_secret_file(self.url_file, "url file")
        return self.url

    def token(self) -> str | None:
        return None if self.token_file is None else read_secret_file(self.token_file, "token file")


def notify_settings(t: Table, resolve: Callable[[str | None], Path | None]) -> NotifySettings:
    """Check the [notify] table; `resolve` turns a configured path into one relative to the config file."""
    t.only(NOTIFY_KEYS)
    if t.has("url") and t.has("url_file"):
        raise t.error("url_file", "give either url or url_file (a file holding the URL), not both")
    timeout = cast(float, t.duration("timeout_s", 5.0))
    if timeout > 60:
        raise t.error("timeout_s", f"expected at most 60 seconds (a notification must not hold the doctor up), "
                                   f"got {timeout:g}s")
    return NotifySettings(
        url=t.url("url"), url_file=resolve(t.string("url_file")), token_file=resolve(t.string("token_file")),
        min_interval_s=cast(float, t.duration("min_interval_s", 10.0, positive=False)),
        burst=cast(int, t.integer("burst", 5, minimum=1, maximum=1000)), timeout_s=timeout)
