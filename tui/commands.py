"""The command palette's own commands (ctrl+p): jump to an engine, a finding, a playbook's findings or an action."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.screens.base import Host


class Jumps(Provider):
    """One command per engine, finding, playbook with findings, and action in the current state."""

    def _commands(self) -> list[tuple[str, Callable[[], None], str]]:
        host = cast(Host, self.app)
        state = host.state
        if state is None:
            return []
        out: list[tuple[str, Callable[[], None], str]] = []
        for e in state.engines:
            out.append((f"engine {e.name}", partial(host.jump, "engine", e.name, ""), f"{e.role or '-'} {e.url}"))
        for f in state.findings:
            out.append((f"finding {f.engine}/{f.playbook}", partial(host.jump, "findings", f.id, ""),
                        f"{f.severity} {f.status}: {f.summary[:60]}"))
        for playbook in sorted({f.playbook for f in state.findings}):
            out.append((f"playbook {playbook}", partial(host.jump, "findings", None, playbook),
                        "its findings"))
        for a in state.actions:
            out.append((f"action {a.id} {a.kind}", partial(host.jump, "actions", a.id, ""),
                        f"{a.status} on {a.target}"))
        return out

    async def discover(self) -> Hits:
        for name, command, help_text in self._commands():
            yield DiscoveryHit(name, command, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, command, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), command, text=name, help=help_text)
