"""What the TUI's tests get from tests/tui/conftest.py's `d` fixture."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.serve.stack import Daemon


@dataclass
class Deployment:
    daemon: Daemon
    state: Path  # the daemon's state directory
    router_url: str
    tmp: Path  # holds api-token (the daemon's bearer token)
    hot: str  # the engines' URLs
    cold: str
