"""Choose what to do this cycle: one action per target, the strongest finding first.

`plan(findings)` takes the first remedy of each finding. An `escalate` first remedy becomes an escalate
plan (pages a person; changes nothing, so it never conflicts). Conflicts are settled greedily in rank
order: the most severe finding first, then the fixed playbook precedence (playbooks.registry order),
then higher confidence, then engine name. A candidate that conflicts with an already chosen one is
skipped (see `Skipped`; the reason names the winner).

Targets (the lock key of a plan):

- an engine action (relaunch, defragment, warm_up, ...) targets the engine name, e.g. "hot";
- an engine-scoped router action (set_max_in_flight, stop_routing with params.engine) targets "router:hot";
- any other router action (length_limit, set_route_threshold, set_batch_timeout -- the router's batch
  timeout is global -- set_fairness_window) is router-wide and targets "router".

Two plans conflict when they share a target, when one is router-wide and the other is any router
action (a router-wide change locks the whole router), or when they change the same engine ("hot" and
"router:hot"). A router action proposed with an engine as its target (kv_pressure's set_max_in_flight)
is normalised to target "router" with params.engine set, as the router actuator expects.

What must improve after each action (VerifySpec), by (playbook, kind), "*" = any playbook. When it did not,
the action is rolled back with its inverse and a person is paged; "(kept)": it stays and a person is paged
(capacity added during an overload is not taken away again):

| playbook              | kind                 | signal                  | dir  | goal          | within |
|-----------------------|----------------------|-------------------------|------|---------------|--------|
| *                     | length_limit         | waiting                 | down | ratio 0.9     | 120 s  |
| *                     | set_route_threshold  | p99_ttft_s              | down | ratio 0.8     | 120 s  |
| hot_decode_jitter     | set_route_threshold  | p99_itl_s               | down | ratio 0.8     | 120 s  |
| *                     | set_fairness_window  | p99_ttft_s              | down | ratio 0.8     | 120 s  |
| *                     | set_batch_timeout    | batch_utilization       | up   | ratio 1.1     | 120 s  |
| throughput_drop       | set_batch_timeout    | generation_tokens_per_s | up   | ratio 1.1     | 180 s  |
| *                     | set_max_in_flight    | p99_queue_s             | down | ratio 0.8     | 120 s  |
| kv_pressure           | set_max_in_flight    | preemptions_per_s       | down | ratio 0.5     | 120 s  |
| cold_prefill_slow     | set_max_in_flight    | p99_ttft_s              | down | ratio 0.8     | 120 s  |
| throughput_drop       | set_max_in_flight    | generation_tokens_per_s | up   | ratio 1.1     | 180 s  |
| batch_underutilized   | set_max_in_flight    | batch_utilization       | up   | ratio 1.1     | 120 s  |
| *                     | relaunch             | p99_ttft_s              | down | ratio 0.8     | 300 s  |
| kv_pressure           | relaunch             | kv_cache_usage          | down | target 0.9    | 300 s  |
| engine_down           | relaunch             | uptime_s                | up   | target 1      | 300 s  |
| engine_stalled        | relaunch             | generation_tokens_per_s | up   | target 0.001  | 300 s  |
| cuda_oom              | relaunch             | uptime_s                | up   | target 60     | 300 s  |
| hot_decode_jitter     | relaunch             | p99_itl_s               | down | ratio 0.8     | 300 s  |
| memory_fragmentation  | relaunch             | memory_growth_ratio     | down | target 0.05   | 300 s  |
| capacity_scale_out    | relaunch             | generation_tokens_per_s | up   | ratio 1.1     | 300 s  |
| advise                | relaunch             | (none: `doctor advise --apply` checks its prediction) |  |  |  |
| *                     | defragment           | memory_growth_ratio     | down | target 0.05   | 300 s  |
| *                     | scale_out            | p99_queue_s             | down | ratio 0.8     | 600 s  | (kept)
| *                     | scale_in             | (none: the pool's scale-out rule is its check) |  |  |        |
| *                     | warm_up              | p99_ttft_s              | down | ratio 0.8     | 300 s  |
| *                     | rewarm_prefix_cache  | prefix_cache_hit_rate   | up   | target 0.7    | 300 s  |
| *                     | reset_prefix_cache   | (none)                  |      |               |        |
| *                     | stop_routing         | (none: escalate)        |      |               |        |
| *                     | escalate             | (none: escalate)        |      |               |        |
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from doctor.remedy.model import ActionRecord, VerifySpec
from playbooks import registry
from playbooks.action_kinds import kinds
from playbooks.model import SEVERITY_RANK, Action, Finding

ROUTER_KINDS: frozenset[str] = frozenset(kinds(scope="router"))
# Router actions that concern one upstream (params.engine); the others change the whole router's policy.
ENGINE_SCOPED_ROUTER_KINDS: frozenset[str] = frozenset(kinds(scope="router", per_upstream=True))
# Kinds after which a person must look even when they succeed.
ESCALATING_KINDS: frozenset[str] = frozenset(kinds(escalates=True))


def _down(signal: str, *, ratio: float | None = None, target: float | None = None, within: float = 120.0,
          keep: bool = False) -> VerifySpec:
    return VerifySpec(signal, "down", target=target, ratio=ratio, within_s=within, keep_on_fail=keep)


def _up(signal: str, *, ratio: float | None = None, target: float | None = None, within: float = 120.0) -> VerifySpec:
    return VerifySpec(signal, "up", target=target, ratio=ratio, within_s=within)


# (playbook or "*", kind) -> VerifySpec or None (nothing to verify). Keep in step with the module docstring.
VERIFY: dict[tuple[str, str], VerifySpec | None] = {
    # Not p99_ttft_s: right after a limit the backlog it stopped growing still drains, and those requests finish
    # later than ever, so the TTFT of finished requests rises for minutes while the fix works. The queue shows it.
    ("*", "length_limit"): _down("waiting", ratio=0.9),
    ("*", "set_route_threshold"): _down("p99_ttft_s", ratio=0.8),
    ("hot_decode_jitter", "set_route_threshold"): _down("p99_itl_s", ratio=0.8),
    ("*", "set_fairness_window"): _down("p99_ttft_s", ratio=0.8),
    ("*", "set_batch_timeout"): _up("batch_utilization", ratio=1.1),
    ("throughput_drop", "set_batch_timeout"): _up("generation_tokens_per_s", ratio=1.1, within=180.0),
    ("*", "set_max_in_flight"): _down("p99_queue_s", ratio=0.8),
    ("kv_pressure", "set_max_in_flight"): _down("preemptions_per_s", ratio=0.5),
    ("cold_prefill_slow", "set_max_in_flight"): _down("p99_ttft_s", ratio=0.8),
    ("throughput_drop", "set_max_in_flight"): _up("generation_tokens_per_s", ratio=1.1, within=180.0),
    ("batch_underutilized", "set_max_in_flight"): _up("batch_utilization", ratio=1.1),
    ("*", "relaunch"): _down("p99_ttft_s", ratio=0.8, within=300.0),
    ("kv_pressure", "relaunch"): _down("kv_cache_usage", target=0.9, within=300.0),
    ("engine_down", "relaunch"): _up("uptime_s", target=1.0, within=300.0),
    ("engine_stalled", "relaunch"): _up("generation_tokens_per_s", target=0.001, within=300.0),
    ("cuda_oom", "relaunch"): _up("uptime_s", target=60.0, within=300.0),
    ("hot_decode_jitter", "relaunch"): _down("p99_itl_s", ratio=0.8, within=300.0),
    ("memory_fragmentation", "relaunch"): _down("memory_growth_ratio", target=0.05, within=300.0),
    ("capacity_scale_out", "relaunch"): _up("generation_tokens_per_s", ratio=1.1, within=300.0),
    # `doctor advise --apply` measures the engine after the change against the twin's prediction
    # (doctor/advise/apply.py) and audits the error; no single signal says a better setting worked.
    ("advise", "relaunch"): None,
    ("*", "defragment"): _down("memory_growth_ratio", target=0.05, within=300.0),
    # Kept when it did not help (escalated, not rolled back): removing a replica during an overload deepens it.
    ("*", "scale_out"): _down("p99_queue_s", ratio=0.8, within=600.0, keep=True),
    # Nothing to verify on the anchor: a pool that a scale-in left saturated is judged by the scale-out rule.
    ("*", "scale_in"): None,
    ("*", "warm_up"): _down("p99_ttft_s", ratio=0.8, within=300.0),
    ("*", "rewarm_prefix_cache"): _up("prefix_cache_hit_rate", target=0.7, within=300.0),
    ("*", "reset_prefix_cache"): None,
    ("*", "stop_routing"): None,
    ("*", "escalate"): None,
}


def verify_spec(playbook: str, kind: str) -> VerifySpec | None:
    """The VerifySpec for an action of `kind` proposed by `playbook` (None: nothing to verify)."""
    if (playbook, kind) in VERIFY:
        return VERIFY[(playbook, kind)]
    return VERIFY.get(("*", kind))


@dataclass(frozen=True)
class Planned:
    """One action chosen for this cycle."""

    finding: Finding
    action: Action
    target: str  # lock key: an engine name, "router" or "router:<engine>"
    verify: VerifySpec | None
    escalate: bool = False  # a person must be paged (escalate plan, or an action like stop_routing)
    superseded: tuple[str, ...] = ()  # "<finding id> (<playbook> on <engine>): <its action>" that lost to this one

    @property
    def kind(self) -> str:
        return self.action.kind

    @property
    def playbook(self) -> str:
        return self.finding.playbook

    @property
    def is_escalation(self) -> bool:
        """An escalate plan: pages a person, changes nothing."""
        return self.action.kind == "escalate"

    @property
    def router_wide(self) -> bool:
        return self.target == "router"

    @property
    def engine(self) -> str:
        """The engine this plan concerns (for a router-wide action: the finding's engine)."""
        if self.target.startswith("router:"):
            return self.target.split(":", 1)[1]
        if self.target == "router" or self.is_escalation:
            return self.finding.engine
        return self.target

    @property
    def engines(self) -> tuple[str, ...]:
        """Engines this plan changes (the fleet breaker counts them); router-wide and escalate plans: none."""
        if self.is_escalation or self.router_wide:
            return ()
        return (self.engine,)

    def record(self, *, trigger: str = "cron", now: float | None = None) -> ActionRecord:
        """A fresh ActionRecord (status planned) for this plan, created `now` (default: the wall clock)."""
        at = time.time() if now is None else now
        return ActionRecord(action=self.action.to_dict(), engine=self.engine, playbook=self.playbook,
                            finding_id=self.finding.id, trigger=trigger, created_at=at, updated_at=at,
                            inverse=dict(self.action.inverse) if self.action.inverse is not None else None,
                            verify=_spec_dict(self.verify))


@dataclass(frozen=True)
class Skipped:
    """A finding whose first remedy was not planned this cycle, and why."""

    finding: Finding
    action: Action | None
    reason: str


def _spec_dict(spec: VerifySpec | None) -> dict[str, object] | None:
    if spec is None:
        return None
    return {"signal": spec.signal, "direction": spec.direction, "target": spec.target, "ratio": spec.ratio,
            "within_s": spec.within_s, **({"keep_on_fail": True} if spec.keep_on_fail else {})}


def normalise(action: Action) -> tuple[Action, str]:
    """The action as the actuators expect it, and its target key (see the module docstring)."""
    if action.kind in ROUTER_KINDS and action.target != "router":
        engine = action.target  # e.g. kv_pressure proposes set_max_in_flight on the engine itself
        params = {"engine": engine, **dict(action.params)}
        inverse = {"engine": engine, **dict(action.inverse)} if action.inverse is not None else None
        action = replace(action, target="router", params=params, inverse=inverse)
    if action.target != "router":
        return action, action.target
    named = action.params.get("engine")
    if action.kind in ENGINE_SCOPED_ROUTER_KINDS and isinstance(named, str) and named:
        return action, f"router:{named}"
    return action, "router"


def within_gpu_budget(p: Planned, free_gpus: int | None, gpus_per_replica: int = 1) -> Planned:
    """A replica scale-out trimmed to what the free GPUs hold (at least one, so that a budget of none is still
    refused by the guardrails with its reason); anything else unchanged."""
    params = p.action.params
    count = params.get("add_replicas")
    if p.kind != "scale_out" or free_gpus is None or not isinstance(count, int) or isinstance(count, bool):
        return p
    fits = max(1, free_gpus // max(1, gpus_per_replica))
    if count <= fits:
        return p
    action = replace(p.action, params={**params, "add_replicas": fits},
                     inverse={"add_replicas": -fits} if p.action.inverse is not None else None,
                     description=f"{p.action.description} [trimmed from {count} to {fits}: {free_gpus} free GPU(s), "
                                 f"{gpus_per_replica} a replica]".lstrip())
    return replace(p, action=action)


def conflicts(a: Planned, b: Planned) -> bool:
    """Do two plans compete for the same target (see the module docstring)?"""
    if a.is_escalation or b.is_escalation:
        return False
    if a.target == b.target:
        return True
    if (a.router_wide and b.target.startswith("router:")) or (b.router_wide and a.target.startswith("router:")):
        return True
    return bool(set(a.engines) & set(b.engines))


def _safe_precedence(precedence: Callable[[str], int], playbook: str) -> int:
    try:
        return precedence(playbook)
    except (KeyError, ValueError):
        return 10_000  # an unregistered playbook ranks after every registered one


def _describe(p: Planned) -> str:
    return f"{p.finding.id} ({p.playbook} on {p.finding.engine}): {p.kind} on {p.target}"


def plan_all(findings: Sequence[Finding], *,
             precedence: Callable[[str], int] = registry.precedence) -> tuple[list[Planned], list[Skipped]]:
    """The chosen plans (in rank order) and the findings left out this cycle with the reason."""
    candidates: list[Planned] = []
    skipped: list[Skipped] = []
    for finding in findings:
        if not finding.remedies:
            skipped.append(Skipped(finding, None, "the finding proposes no remedy"))
            continue
        action, target = normalise(finding.remedies[0])
        if action.kind == "escalate":
            target = finding.engine
        candidates.append(Planned(finding, action, target, verify_spec(finding.playbook, action.kind),
                                  escalate=action.kind in ESCALATING_KINDS))

    def rank(p: Planned) -> tuple[int, int, float, str]:
        return (-SEVERITY_RANK.get(p.finding.severity, 0), _safe_precedence(precedence, p.playbook),
                -p.finding.confidence, p.finding.engine)

    chosen: list[Planned] = []
    for cand in sorted(candidates, key=rank):
        winner_idx = next((i for i, c in enumerate(chosen) if conflicts(c, cand)), None)
        if winner_idx is None:
            chosen.append(cand)
            continue
        winner = chosen[winner_idx]
        chosen[winner_idx] = replace(winner, superseded=(*winner.superseded, _describe(cand)))
        same = winner.action.id == cand.action.id
        why = ("the same action is already planned for " if same else "superseded by ") + _describe(winner)
        skipped.append(Skipped(cand.finding, cand.action, why))
    return chosen, skipped


def plan(findings: Sequence[Finding], *, precedence: Callable[[str], int] = registry.precedence) -> list[Planned]:
    """One action per target for this cycle (see the module docstring)."""
    return plan_all(findings, precedence=precedence)[0]
