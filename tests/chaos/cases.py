"""The reliability account's rows: each fault the doctor must survive and each guarantee it makes, with the tests
that hold them (pytest node ids). `make reliability` runs these tests and docs/reliability.md is rendered from
their results (tools/reliability_report.py): a row whose tests did not pass says so."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

C = "tests/chaos/"


@dataclass(frozen=True)
class Fault:
    """A fault injected on loopback with real processes, the outcome the doctor must reach, and its tests."""

    id: str
    fault: str
    expected: str  # "recovered" | "refused" | "reported": never "lost"
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Guarantee:
    """A promise the doctor makes, and the tests that hold it."""

    id: str
    promise: str
    tests: tuple[str, ...]


FAULTS: tuple[Fault, ...] = (
    Fault("engine-killed", "an engine killed (SIGKILL) mid-request behind the router", "recovered", (
        C + "test_engines.py::test_engine_killed_mid_request",
        "tests/router/test_router_routing.py::test_engine_down_fails_over_when_the_prompt_fits_else_503",
        "tests/doctor/test_diagnose_read.py::test_log_events_and_dead_engine")),
    Fault("engine-hung", "an engine hung: one that accepts connections and never answers, one that answers "
          "/health and /metrics but serves no token", "reported", (
        C + "test_engines.py::test_engine_that_accepts_and_never_answers",
        C + "test_engines.py::test_engine_hung_inside_serving_nothing",
        "tests/doctor/test_diagnose_read.py::test_hung_metrics_and_garbage_scrape_do_not_stop_the_others")),
    Fault("engine-slow", "an engine 5 s late on every scrape", "reported", (
        C + "test_engines.py::test_engine_five_seconds_slow_per_scrape",)),
    Fault("metrics-garbage", "an engine answering garbage on /metrics", "reported", (
        "tests/doctor/test_diagnose_read.py::test_hung_metrics_and_garbage_scrape_do_not_stop_the_others",
        "tests/collectors/test_scrape.py::test_random_text_raises_only_scrape_error")),
    Fault("metrics-truncated", "an engine's /metrics cut short (mid-line, and a body shorter than its "
          "Content-Length)", "reported", (
        C + "test_engines.py::test_truncated_metrics_over_http",
        "tests/collectors/test_scrape.py::test_any_truncation_of_a_real_scrape_is_caught_or_parses")),
    Fault("engine-restart", "an engine restarted on its port with counters reset and another bucket layout",
          "recovered", (
        C + "test_engines.py::test_restart_with_counter_reset_and_new_buckets",
        "tests/collectors/test_window_rules.py::test_a_counter_reset_inside_the_window_counts_both_sides",
        "tests/collectors/test_window_rules.py::test_a_bucket_layout_change_counts_only_since_the_restart")),
    Fault("router-killed", "the router killed (SIGKILL) mid-stream", "reported", (
        C + "test_router_killed.py::test_router_killed_mid_stream",)),
    Fault("prometheus-down", "Prometheus down while the doctor reads history through it", "recovered", (
        C + "test_monitoring_down.py::test_prometheus_down_falls_back_to_direct_reads",)),
    Fault("alertmanager-down", "Alertmanager down while the doctor escalates", "recovered", (
        C + "test_monitoring_down.py::test_alertmanager_down_while_escalating",)),
    Fault("state-full", "the state directory's file system full", "refused", (
        C + "test_state_dir.py::test_full_state_dir_refuses_to_act",
        C + "test_state_dir.py::test_full_state_dir_daemon_refuses_alerts_with_5xx")),
    Fault("state-read-only", "the state directory read-only", "refused", (
        C + "test_state_dir.py::test_read_only_state_dir_refuses_to_act",)),
    Fault("clock-jumps", "the clock jumping forward and back", "recovered", (
        C + "test_clock.py::test_cooldown_and_budget_survive_a_clock_jumping_back",
        C + "test_clock.py::test_for_duration_after_a_clock_jump",
        C + "test_clock.py::test_approval_expiry_after_a_clock_jump")),
    Fault("two-doctors", "two doctors (cron runs and a daemon; a second daemon refuses to start) racing for the "
          "same engine", "recovered", (
        C + "test_two_doctors.py::test_cron_runs_racing_act_exactly_once",
        C + "test_two_doctors.py::test_cron_beside_the_daemon_acts_exactly_once",
        "tests/serve/test_serve_api.py::test_doctor_serve_refuses_to_start_with_a_clear_error",
        "tests/remedy/test_guardrails.py::test_concurrent_engine_lock_one_winner")),
)

GUARANTEES: tuple[Guarantee, ...] = (
    Guarantee("journal-before-acting", "every action is journaled (fsynced) before it is taken; a doctor killed "
              "between steps reconciles it once on restart", (
        "tests/remedy/test_journal.py::test_every_line_is_fsynced",
        "tests/remedy/test_fix_loop.py::test_kill_9_between_journal_steps_then_restart_is_consistent",
        "tests/serve/test_serve_crash.py::test_kill_9_mid_action_then_restart_reconciles_once")),
    Guarantee("no-act-without-journal", "no action without its journal line: a state directory that cannot be "
              "written stops the doctor before it acts, with the reason", (
        C + "test_state_dir.py::test_full_state_dir_refuses_to_act",
        C + "test_state_dir.py::test_read_only_state_dir_refuses_to_act")),
    Guarantee("alert-durable", "an alert is answered 2xx only after it is durably queued (5xx otherwise, so "
              "Alertmanager retries); duplicates are recognised", (
        "tests/serve/test_inbox.py::test_pending_alerts_and_keys_survive_a_restart",
        "tests/serve/test_inbox.py::test_a_full_queue_takes_nothing_of_the_post",
        C + "test_state_dir.py::test_full_state_dir_daemon_refuses_alerts_with_5xx")),
    Guarantee("escalation-never-lost", "an escalation that cannot be delivered is kept, retried and audited "
              "until it is", (
        C + "test_monitoring_down.py::test_alertmanager_down_while_escalating",)),
    Guarantee("exactly-one-actor", "one engine, one actor: the per-target lock, cooldown and budget hold across "
              "processes", (
        C + "test_two_doctors.py::test_cron_runs_racing_act_exactly_once",
        C + "test_two_doctors.py::test_cron_beside_the_daemon_acts_exactly_once",
        "tests/remedy/test_guardrails.py::test_concurrent_cooldown_one_winner",
        "tests/remedy/test_guardrails.py::test_concurrent_budget_exactly_the_allowed_number")),
    Guarantee("bounded-run", "a cron run ends by its --timeout whatever the engines do", (
        "tests/doctor/test_diagnose_read.py::test_own_timeout_exits_3",
        C + "test_engines.py::test_engine_that_accepts_and_never_answers")),
    Guarantee("one-bad-engine", "one unreadable engine never stops the others being read", (
        "tests/doctor/test_diagnose_read.py::test_hung_metrics_and_garbage_scrape_do_not_stop_the_others",
        C + "test_engines.py::test_engine_five_seconds_slow_per_scrape")),
    Guarantee("sane-clock", "cooldowns, budgets, `for` durations and approval expiries stay sane when the clock "
              "jumps", (
        C + "test_clock.py::test_cooldown_and_budget_survive_a_clock_jumping_back",
        C + "test_clock.py::test_for_duration_after_a_clock_jump",
        C + "test_clock.py::test_approval_expiry_after_a_clock_jump")),
    Guarantee("honest-account", "this page is rendered from the results: a row whose tests failed or did not run "
              "says NOT HELD, a fuzz crash fails it, fuzzing not run says so", (
        C + "test_reliability_report.py::test_a_failed_or_missing_test_is_not_held_and_a_crash_fails",
        C + "test_reliability_report.py::test_a_recorded_outcome_other_than_the_expected_one_is_not_held",
        C + "test_reliability_report.py::test_every_named_test_exists")),
)


def registry() -> dict[str, Any]:
    """The rows as plain data (what the recorder writes beside the results)."""
    return {"faults": [asdict(f) for f in FAULTS], "guarantees": [asdict(g) for g in GUARANTEES]}


def all_tests() -> list[str]:
    """Every node id the account names, once each, in order."""
    seen: dict[str, None] = {}
    for tests in [f.tests for f in FAULTS] + [g.tests for g in GUARANTEES]:
        for t in tests:
            seen.setdefault(t, None)
    return list(seen)
