"""Guardrails: may this planned action run now, and in which mode?

`check()` is read-only (plans, dry-runs and reports use it). Before acting, a caller takes the target's
lock with `acquire()` and then calls `record_applied()`, which re-checks the stateful guardrails
(cooldown, hourly budget, fleet breaker) and records the action in one step under the state lock, so
concurrent doctors (cron and the daemon) cannot both take the last slot. `release()` ends the change
for the fleet breaker once the action is verified, rolled back or failed.

State (under the state dir):
- `guardrails.json` {"cooldowns": {"<kind>@<target>": unix_s}, "budget": [unix_s, ...],
  "inflight": {record_id: {"engines": [...], "target": ..., "kind": ..., "at": unix_s, "pid": n}}},
  written atomically under `guardrails.lock`;
- `engine-<name>.lock` (engine and engine-scoped router targets), `router.lock` (router-wide targets).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from doctor.config import DoctorConfig
from doctor.remedy.journal import Journal
from doctor.remedy.model import Mode, Refused
from doctor.remedy.planner import Planned
from doctor.state import LockHeld, StateDir
from playbooks.action_kinds import kinds, scope_of

STATE_FILE = "guardrails.json"
STATE_LOCK = "guardrails"
HOUR_S = 3600.0
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PER_UPSTREAM = kinds(scope="router", per_upstream=True)  # router changes to one upstream (params.engine)
_RELAUNCH_INTS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "api_server_count")


class TargetBusy(LockHeld):
    """Another doctor process is changing this target right now."""


@dataclass(frozen=True)
class Decision:
    """The effective mode and whether the guardrails let the action through (`guard` names the one that did not).

    Escalate plans change nothing: only the mode applies to them.
    """

    mode: Mode
    allowed: bool
    reason: str = ""
    guard: str = ""  # kill_switch | maintenance | unknown_engine | bounds | cooldown | budget | breaker

    @property
    def acts(self) -> bool:
        """Would the doctor change something now (auto mode, allowed)?"""
        return self.allowed and self.mode == "auto"


def lock_name(target: str) -> str:
    """The StateDir lock for a plan's target: `router` for router-wide, `engine-<name>` otherwise."""
    name = target.split(":", 1)[1] if target.startswith("router:") else target
    if name == "router":
        return "router"
    if not _SAFE_NAME.match(name):
        raise ValueError(f"cannot lock target {target!r}: engine names are letters, digits, '_', '.' or '-'")
    return f"engine-{name}"


class Guardrails:
    """Mode, kill switch, maintenance windows, bounds, per-target lock, cooldown, hourly budget, fleet breaker."""

    def __init__(self, state_dir: Path, config: DoctorConfig, clock: Callable[[], float] = time.time, *,
                 journal: Journal | None = None, stale_after_s: float = HOUR_S) -> None:
        self.state = StateDir(Path(state_dir))
        self.config = config
        self.clock = clock
        self.journal = journal
        self.stale_after_s = stale_after_s

    # -- read-only

    def mode_for(self, planned: Planned) -> Mode:
        return cast(Mode, self.config.mode_for(planned.playbook))

    def check(self, planned: Planned, *, engines_total: int, free_gpus: int | None = None) -> Decision:
        """Mode and verdict; `free_gpus` (checked by the caller, never assumed) bounds scale_out."""
        mode = self.mode_for(planned)
        refusal = self._static(planned, free_gpus)
        if refusal is None and not planned.is_escalation:
            refusal = self._stateful(self._load(), planned, engines_total)
        if refusal is None:
            return Decision(mode, True)
        return Decision(mode, False, refusal[1], refusal[0])

    def in_progress(self) -> set[str]:
        """Engines the doctor is changing now (reports say `change in progress` instead of paging)."""
        return self._inflight_engines(self._load())

    def cooldown_left(self, kind: str, target: str) -> float:
        """Seconds until `kind` on `target` may be applied again (0: now)."""
        last = self._load()["cooldowns"].get(f"{kind}@{target}")
        if not isinstance(last, int | float):
            return 0.0
        return max(0.0, self.config.cooldown_s - (self.clock() - last))

    def budget_left(self) -> int:
        now = self.clock()
        used = sum(1 for t in self._load()["budget"] if t > now - HOUR_S)
        return max(0, self.config.hourly_action_budget - used)

    # -- acting

    @contextlib.contextmanager
    def acquire(self, target: str) -> Iterator[None]:
        """Hold the target's lock across processes; TargetBusy (never waits) when another process holds it."""
        name = lock_name(target)
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(self.state.lock(name))
        except LockHeld as e:
            what = "the router" if name == "router" else f"engine {name.removeprefix('engine-')!r}"
            raise TargetBusy(f"{what} is being changed by another doctor process ({e}); "
                             "try again when that action has finished") from None
        with stack:
            yield

    def record_applied(self, planned: Planned, *, engines_total: int | None = None,
                       record_id: str | None = None) -> None:
        """Take a cooldown, budget and (with record_id) breaker slot for `planned`, atomically.

        Raises Refused when another process took the slot since `check()`; nothing is recorded then.
        """
        if planned.is_escalation:
            return
        with self.state.lock(STATE_LOCK, wait=True):
            data = self._load(settle=False)
            refusal = self._stateful(data, planned, engines_total)
            if refusal is not None:
                raise Refused(refusal[1])
            now = self.clock()
            data["cooldowns"][_cooldown_key(planned)] = now
            data["budget"] = [t for t in data["budget"] if t > now - HOUR_S] + [now]
            if record_id is not None:
                data["inflight"][record_id] = {"engines": list(planned.engines), "target": planned.target,
                                               "kind": planned.kind, "at": now, "pid": os.getpid()}
            self.state.save_json(STATE_FILE, data)

    def release(self, record_id: str) -> None:
        """The change `record_id` has ended (verified, rolled back, failed): the breaker stops counting it."""
        with self.state.lock(STATE_LOCK, wait=True):
            data = self._load(settle=False)
            if data["inflight"].pop(record_id, None) is not None:
                self.state.save_json(STATE_FILE, data)

    # -- internals

    def _load(self, *, settle: bool = True) -> dict[str, Any]:
        """The document, its times no later than now. A time after now means the clock went back: it is moved to
        now (and saved, unless `settle` is off because the caller holds the lock and saves), so a cooldown or the
        budget's hour lasts at most its own length after the jump, never the jump's length more."""
        data = self.state.load_json(STATE_FILE, {})
        if not isinstance(data, dict):
            data = {}
        cooldowns = data.get("cooldowns")
        budget = data.get("budget")
        inflight = data.get("inflight")
        out = {"cooldowns": cooldowns if isinstance(cooldowns, dict) else {},
               "budget": [float(t) for t in budget if isinstance(t, int | float)] if isinstance(budget, list) else [],
               "inflight": inflight if isinstance(inflight, dict) else {}}
        if _clamp_to(out, self.clock()) and settle:
            with contextlib.suppress(OSError), self.state.lock(STATE_LOCK, wait=True):
                again = self._load(settle=False)  # another process may have written since
                _clamp_to(again, self.clock())
                self.state.save_json(STATE_FILE, again)
        return out

    def _inflight_engines(self, data: Mapping[str, Any]) -> set[str]:
        now = self.clock()
        finished: set[str] = set()
        engines: set[str] = set()
        if self.journal is not None:
            for rec in self.journal.unfinished():
                engines.update(_record_engines(rec.action, rec.engine))
            finished = self.journal.finished_ids()
        for rid, entry in data["inflight"].items():
            if not isinstance(entry, dict) or rid in finished:
                continue
            if now - float(entry.get("at", 0.0)) > self.stale_after_s:
                continue  # a change that never ended: the journal reconciles it; the breaker must not stick
            engines.update(str(e) for e in entry.get("engines", []))
        return engines

    def halted(self) -> tuple[str, str] | None:
        """(guard, reason) while the kill switch is present or a maintenance window is open: nothing may change."""
        kill = self.config.kill_switch_path(self.state.path)
        if kill.exists():
            return "kill_switch", f"the kill switch {kill} is present: the doctor changes nothing until it is removed"
        now = datetime.fromtimestamp(self.clock(), UTC)
        if self.config.in_maintenance(now):
            window = next((w for w in self.config.maintenance if w.contains(now)), None)
            why = f" ({window.reason})" if window is not None and window.reason else ""
            return "maintenance", f"inside a maintenance window{why}: the doctor changes nothing"
        return None

    def _static(self, planned: Planned, free_gpus: int | None) -> tuple[str, str] | None:
        if planned.is_escalation:
            return None  # paging a person changes nothing: only the mode applies
        halted = self.halted()
        if halted is not None:
            return halted
        known = [e.name for e in self.config.engines]
        for name in _named_engines(planned):
            if name not in known:
                return "unknown_engine", (f"unknown engine {name!r} (configured engines: "
                                          f"{', '.join(known) or 'none'})")
        bad = self._bounds(planned, free_gpus)
        return ("bounds", bad) if bad else None

    def _stateful(self, data: Mapping[str, Any], planned: Planned, engines_total: int | None) -> tuple[str, str] | None:
        now = self.clock()
        key = _cooldown_key(planned)
        last = data["cooldowns"].get(key)
        if isinstance(last, int | float) and now - last < self.config.cooldown_s:
            return "cooldown", (f"cooldown: {planned.kind} on {planned.target} was applied {now - last:.0f} s ago; "
                                f"allowed again in {self.config.cooldown_s - (now - last):.0f} s")
        used = sum(1 for t in data["budget"] if t > now - HOUR_S)
        if used >= self.config.hourly_action_budget:
            return "budget", (f"hourly action budget spent: {used} of {self.config.hourly_action_budget} "
                              "actions in the last hour")
        if engines_total is not None and planned.engines:
            changing = self._inflight_engines(data)
            new = set(planned.engines) - changing
            allowed = breaker_limit(self.config.fleet_breaker_ratio, engines_total)
            if new and len(changing | new) > allowed:
                return "breaker", (f"fleet breaker: {len(changing)} of {engines_total} engines are being changed "
                                   f"({', '.join(sorted(changing)) or 'none'}); at most {allowed} at once "
                                   f"(fleet_breaker_ratio {self.config.fleet_breaker_ratio:g})")
        return None

    def _bounds(self, planned: Planned, free_gpus: int | None) -> str | None:
        kind, p, b = planned.kind, planned.action.params, self.config.bounds
        if scope_of(kind) not in ("router", "engine"):
            return f"unknown action kind {kind!r}"
        if kind == "set_batch_timeout":
            return _int_in(p, "batch_timeout_ms", b.batch_timeout_min_ms, b.batch_timeout_max_ms)
        if kind == "set_max_in_flight":
            return _int_in(p, "max_in_flight", 1, None)
        if kind in ("length_limit", "set_route_threshold"):
            key = "max_tokens" if kind == "length_limit" else "threshold_tokens"
            limit, source = self._length_limit()
            if (why := _int_in(p, key, 1, limit)) is not None:
                return why + (f" ({source})" if source and _is_int(p.get(key)) and p[key] > 1 else "")
            expires = p.get("expires_in_s")
            if kind == "length_limit" and expires is not None and not (_is_num(expires) and expires > 0):
                return f"expires_in_s must be a positive number of seconds, got {expires!r}"
            return None
        if kind == "set_fairness_window":
            return _int_in(p, "window", 0, None) if "window" in p else _int_in(p, "fairness_window", 0, None)
        if kind == "relaunch":
            return self._relaunch_bounds(planned, free_gpus)
        if kind == "scale_out":
            return self._scale_out_bounds(planned, free_gpus)
        if kind == "scale_in":
            name = p.get("remove_replica")
            if not isinstance(name, str) or not name or name == planned.engine:
                return f"scale_in needs params.remove_replica, a replica other than {planned.engine}, got {name!r}"
        if kind == "rewarm_prefix_cache" and "variations" in p:
            return _int_in(p, "variations", 1, 1000)
        if kind == "warm_up":
            max_len = self._engine_max_len(planned.engine)
            for key, top in (("batches", None), ("prompt_tokens", max_len)):
                values = p.get(key, [])
                if not isinstance(values, list) or not all(_is_int(v) and v >= 1 for v in values):
                    return f"{key} must be a list of positive integers, got {values!r}"
                if top is not None and any(v > top for v in values):
                    return f"{key} {values} exceed the engine's max_model_len {top}"
        return None

    def _relaunch_bounds(self, planned: Planned, free_gpus: int | None) -> str | None:
        p = planned.action.params
        for key in _RELAUNCH_INTS:
            if key in p and (why := _int_in(p, key, 1, None)) is not None:
                return why
        gmu = p.get("gpu_memory_utilization")
        if gmu is not None and not (_is_num(gmu) and 0 < gmu <= 1):
            return f"gpu_memory_utilization must be within (0, 1], got {gmu!r}"
        if "tensor_parallel_size" in p:
            return self._tp_bounds(planned, free_gpus)
        return None

    def _scale_out_bounds(self, planned: Planned, free_gpus: int | None) -> str | None:
        p = planned.action.params
        if "tensor_parallel_size" in p:
            return self._tp_bounds(planned, free_gpus)
        key = next((k for k in ("add_replicas", "replicas") if k in p), None)
        if key is None:
            return "scale_out needs tensor_parallel_size or add_replicas"
        if (why := _int_in(p, key, 1, None)) is not None:
            return why
        if free_gpus is None:
            return "free GPUs unknown: a new replica needs spare GPUs, checked, never assumed"
        eng = self.config.engine(planned.engine)
        need = int(p[key]) * max(1, (eng.tensor_parallel_size or 1) if eng else 1)
        if need > free_gpus:
            return f"{key}={p[key]} needs {need} free GPU(s); {free_gpus} free"
        return None

    def _tp_bounds(self, planned: Planned, free_gpus: int | None) -> str | None:
        p, cap = planned.action.params, self.config.bounds.tensor_parallel_max
        if (why := _int_in(p, "tensor_parallel_size", 1, cap)) is not None:
            return why + (" (bounds.tensor_parallel_max)" if cap is not None and _is_int(p.get("tensor_parallel_size"))
                          and p["tensor_parallel_size"] > cap else "")
        tp = int(p["tensor_parallel_size"])
        if free_gpus is None:
            if cap is None:
                return ("free GPUs unknown and no bounds.tensor_parallel_max: the tensor-parallel degree is "
                        "checked against free GPUs, never assumed")
            return None
        eng = self.config.engine(planned.engine)
        own = len(eng.gpus) if eng is not None and eng.gpus else (eng.tensor_parallel_size or 1) if eng else 1
        if tp > own + free_gpus:
            return f"tensor_parallel_size={tp} needs {tp} GPUs; the engine has {own} and {free_gpus} are free"
        return None

    def _length_limit(self) -> tuple[int | None, str]:
        if self.config.bounds.length_limit_max_tokens is not None:
            return self.config.bounds.length_limit_max_tokens, "bounds.length_limit_max_tokens"
        lens = [e.max_model_len for e in self.config.engines if e.max_model_len]
        return (max(lens), "the engines' largest max_model_len") if lens else (None, "")

    def _engine_max_len(self, name: str) -> int | None:
        eng = self.config.engine(name)
        return eng.max_model_len if eng is not None else None


def breaker_limit(ratio: float, engines_total: int) -> int:
    """Engines that may be changing at once: floor(ratio x total), at least 1 unless the ratio is 0."""
    if ratio <= 0 or engines_total <= 0:
        return 0
    return max(1, math.floor(ratio * engines_total + 1e-9))


def _clamp_to(data: dict[str, Any], now: float) -> bool:
    """Move the document's times that lie after `now` to `now`; True when one did."""
    moved = False
    for key, t in list(data["cooldowns"].items()):
        if isinstance(t, int | float) and t > now:
            data["cooldowns"][key], moved = now, True
    if any(t > now for t in data["budget"]):
        data["budget"], moved = [min(t, now) for t in data["budget"]], True
    for entry in data["inflight"].values():
        if isinstance(entry, dict) and isinstance(entry.get("at"), int | float) and entry["at"] > now:
            entry["at"], moved = now, True
    return moved


def _cooldown_key(planned: Planned) -> str:
    return f"{planned.kind}@{planned.target}"


def _named_engines(planned: Planned) -> list[str]:
    names = []
    if not planned.router_wide:
        names.append(planned.engine)
    engine = planned.action.params.get("engine")
    if isinstance(engine, str) and engine not in names:
        names.append(engine)
    return names


def _record_engines(action: Mapping[str, Any], engine: str) -> list[str]:
    target = str(action.get("target", ""))
    if target != "router":
        return [target]
    named = action.get("params", {}).get("engine")
    if str(action.get("action")) in PER_UPSTREAM and isinstance(named, str):
        return [named]
    return []


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _int_in(params: Mapping[str, Any], key: str, low: int | None, high: int | None) -> str | None:
    """None when params[key] is an integer within [low, high], else why not."""
    if key not in params:
        return f"{key} is missing"
    v = params[key]
    if not _is_int(v):
        return f"{key}={v!r} is not a concrete integer (the playbook could not compute one)"
    if (low is not None and v < low) or (high is not None and v > high):
        allowed = f"{low}..{high}" if low is not None and high is not None else \
            f">= {low}" if low is not None else f"<= {high}"
        return f"{key}={v} is outside the allowed {allowed}"
    return None
