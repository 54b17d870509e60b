"""The one table of remedy kinds: what each changes (its scope), what undoes it, its risk, and which actuator applies
it. Everything else that lists kinds (the playbooks' docs, the planner, the guardrails, the actuators, the
efficacy harness) derives from ACTION_TABLE."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Risk = Literal["low", "medium", "high"]
Scope = Literal["router", "engine", "none"]  # none: changes nothing (a page)
ActuatorName = Literal["router", "vllm_admin", "launcher", "escalation"]


@dataclass(frozen=True)
class ActionKind:
    """One kind of remedy."""

    kind: str
    scope: Scope  # the router's policy, an engine, or nothing
    actuator: ActuatorName  # doctor.remedy: router_actuator, vllm_admin, launcher, escalate
    risk: Risk  # the risk the playbooks propose it with
    inverse: str | None  # the kind that undoes it (with the previous values), None = it cannot be undone
    summary: str  # what it changes, for the docs and reports
    per_upstream: bool = False  # a router change to one upstream (params.engine), not to the whole policy
    escalates: bool = False  # a person must look even when it succeeds


def _router(kind: str, risk: Risk, summary: str, **kw: bool) -> ActionKind:
    return ActionKind(kind, "router", "router", risk, kind, summary, **kw)


def _engine(kind: str, actuator: ActuatorName, risk: Risk, undo: bool, summary: str) -> ActionKind:
    return ActionKind(kind, "engine", actuator, risk, kind if undo else None, summary)


ACTION_TABLE: Mapping[str, ActionKind] = {a.kind: a for a in (
    _router("set_batch_timeout", "low",
            "router: release admission groups after params.batch_timeout_ms (50..200 ms)"),
    _router("set_max_in_flight", "low", "router: cap requests in flight on the engine at params.max_in_flight",
            per_upstream=True),
    _router("length_limit", "medium",
            "router: reject prompts over params.max_tokens with 413 until params.expires_in_s passes"),
    _router("set_route_threshold", "low", "router: prompts >= params.threshold_tokens go to the cold engine"),
    _router("set_fairness_window", "low", "router: a waiting long prompt goes next after params.window short ones"),
    _engine("rewarm_prefix_cache", "vllm_admin", "low", False,
            "engine: replay the configured prompt templates to refill the prefix cache"),
    _engine("reset_prefix_cache", "vllm_admin", "low", False, "engine: POST /reset_prefix_cache (dev mode)"),
    _engine("relaunch", "launcher", "medium", True,
            "engine: relaunch with params.args changed (blue/green when spare GPUs exist)"),
    _engine("defragment", "vllm_admin", "medium", False,
            "engine: drain at the router, /sleep + /wake_up with freed memory verified, else relaunch"),
    _engine("scale_out", "launcher", "medium", True,
            "engine: relaunch with more tensor-parallel shards (params.tensor_parallel_size) or add "
            "params.add_replicas replicas behind the router"),
    ActionKind("scale_in", "engine", "launcher", "medium", "scale_out",
               "engine: remove the added replica params.remove_replica (router upstream removed, in-flight requests "
               "finish, process stopped)"),
    _engine("warm_up", "vllm_admin", "low", False, "engine: requests at batch 4/8/16 x 512/1024/2048 tokens"),
    _router("stop_routing", "medium", "router: drain the engine (no new requests; in-flight ones finish)",
            per_upstream=True, escalates=True),
    ActionKind("escalate", "none", "escalation", "low", None,
               "page a person with the evidence (Alertmanager or a webhook)", escalates=True),
)}

# kind -> what it changes (the playbooks' docs and an Action's default description)
ACTION_KINDS: dict[str, str] = {k: a.summary for k, a in ACTION_TABLE.items()}


def kinds(*, scope: Scope | None = None, actuator: ActuatorName | None = None, per_upstream: bool | None = None,
          escalates: bool | None = None) -> tuple[str, ...]:
    """The kinds that match every filter given, in the table's order."""
    return tuple(k for k, a in ACTION_TABLE.items()
                 if (scope is None or a.scope == scope) and (actuator is None or a.actuator == actuator)
                 and (per_upstream is None or a.per_upstream == per_upstream)
                 and (escalates is None or a.escalates == escalates))


def scope_of(kind: str) -> Scope | None:
    """The kind's scope; None for a kind not in the table."""
    a = ACTION_TABLE.get(kind)
    return None if a is None else a.scope
