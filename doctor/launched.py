"""The engines the doctor's launcher started, seen by every cycle: an engine a blue/green relaunch moved to a new
port is read (and acted on) there, and a replica it added is read and judged in its engine's role.

The configuration names the engines as they were first deployed; the launcher's records (STATE_DIR/engines/, or
what a trial substitutes) say where they are now. Without this, a cron run after a blue/green relaunch reads the
old, stopped engine and reports it down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from doctor.engines import EngineRef, Role

if TYPE_CHECKING:
    from doctor.remedy.model import LaunchedEngine


def _role(value: str | None) -> Role | None:
    return "hot" if value == "hot" else "cold" if value == "cold" else None


def base_name(replica: str, names: Sequence[str]) -> str | None:
    """The configured engine a replica was added for (`hot-r2` -> `hot`), None when none matches."""
    stem, sep, tail = replica.rpartition("-r")
    return stem if sep and tail.isdigit() and stem in names else None


def with_launched(refs: Sequence[EngineRef], records: Sequence[LaunchedEngine]) -> tuple[EngineRef, ...]:
    """`refs` where the launcher's live records say an engine now runs (URL, GPUs, log, arguments), plus the
    replicas it added (newest record per name)."""
    newest: dict[str, LaunchedEngine] = {}
    for rec in records:
        if rec.name not in newest or rec.started_at >= newest[rec.name].started_at:
            newest[rec.name] = rec
    by_name = {r.name: r for r in refs}
    out: list[EngineRef] = []
    for ref in refs:
        found = newest.get(ref.name)
        if found is None:
            out.append(ref)
            continue
        rec = found
        args = {k: v for k, v in rec.args.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        out.append(dataclasses.replace(ref, url=rec.url, gpus=rec.gpus or ref.gpus, log=rec.log or ref.log,
                                       config={**ref.config, **args}))
    for name, rec in newest.items():
        if name in by_name:
            continue
        base = by_name.get(base_name(name, list(by_name)) or "")
        args = {k: v for k, v in rec.args.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        out.append(EngineRef(name=name, role=_role(rec.role) or (base.role if base else None), url=rec.url,
                             log=rec.log or None, gpus=rec.gpus, launcher=base.launcher if base else None,
                             config={**(base.config if base else {}), **args}))
    return tuple(out)
