"""Engines found in Prometheus's scrape targets, beside those the config and flags list.

A target whose labels match `[prometheus] discover` (or `--discover LABEL=VALUE`) becomes an engine: named
by its `instance` label (characters a file name cannot hold become `-`), read through Prometheus by
`instance="..."`, reached directly at its scrape URL's root, its role from its `role` label (hot|cold,
else none). A target whose instance a listed engine already selects is that engine, not a second one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from doctor.engines import EngineRef

if TYPE_CHECKING:
    import httpx

    from collectors.promfleet import Target

ROLE_LABEL = "role"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class DiscoveryError(Exception):
    """Prometheus's targets could not be listed, or none matched and no engine is listed either."""


def engines_from_targets(targets: Sequence[Target], known: Sequence[EngineRef] = ()) -> list[EngineRef]:
    """The targets not already among `known` as engines (in the targets' order, names made unique)."""
    taken = {ref.promql_selector for ref in known}
    names = {ref.name for ref in known}
    out: list[EngineRef] = []
    for target in targets:
        instance = target.labels.get("instance", "")
        selector = 'instance="' + instance.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if not instance or selector in taken or f'instance="{instance}"' in taken:
            continue
        taken.add(selector)
        name = base = _NOT_NAME.sub("-", instance).strip("-") or "engine"
        n = 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.add(name)
        role = target.labels.get(ROLE_LABEL)
        out.append(EngineRef(name=name, role=role if role in ("hot", "cold") else None,  # type: ignore[arg-type]
                             url=target.base_url, selector=selector))
    return out


def discover_engines(prometheus: str, match: Mapping[str, str], known: Sequence[EngineRef], *,
                     timeout_s: float, transport: httpx.BaseTransport | None = None) -> list[EngineRef]:
    """`known` followed by the engines Prometheus's matching targets add (synchronous: run it off the loop)."""
    from collectors.promfleet import discover_targets
    from collectors.promsource import PrometheusError

    try:
        targets = discover_targets(prometheus, match, timeout_s=timeout_s, transport=transport)
    except PrometheusError as exc:
        raise DiscoveryError(f"cannot discover engines: {exc}") from None
    engines = [*known, *engines_from_targets(targets, known)]
    if not engines:
        wanted = ", ".join(f'{k}="{v}"' for k, v in match.items())
        raise DiscoveryError(f"no active target of Prometheus at {prometheus} has {wanted}, and no engine is listed")
    return engines
