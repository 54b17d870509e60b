"""Smoke test of the remediation efficacy bench (the doctor's own cycle over the trial's deployment): one short
paired run, the virtual router's policy semantics, and the launcher's actions on the harness's process table."""

from __future__ import annotations

import asyncio
import math
import tempfile
from dataclasses import replace
from pathlib import Path

from doctor.cycle import run_cycle
from doctor.remedy.router_actuator import RouterActuator
from doctor.remedy.setup import actuator_context
from playbooks.model import Action
from router.policy import initial_policy, with_upstream_state
from sim.scenarios import get_scenario
from sim.workload import RequestSpec
from trials import efficacy as eff
from trials.scenario import WARMUP_S
from trials.sim_io import SimNetwork


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and math.isfinite(v)


def test_long_prompt_storm_pair_runs_and_the_doctor_acts() -> None:
    sc = get_scenario("long_prompt_storm")
    # 900 s: the cold engine finishes too few documents a minute to judge its P99 from one window, so the doctor
    # acts at about 780 s (a 60 s window with 10 requests, then p99_spike's 90 s `for`), not at 750 s
    pair = eff.run_pair(sc, seed=0, duration_s=900.0)
    base, doc = pair.metrics()
    assert pair.baseline.mode == "observe" and pair.doctor.mode == "auto"
    assert not pair.baseline.actions and not pair.baseline.policy_changes
    # the same trace in both runs
    assert [o.spec for o in pair.baseline.outcomes] == [o.spec for o in pair.doctor.outcomes]
    applied = [a for a in pair.doctor.actions if a["status"] in ("applied", "verified")]
    assert applied, pair.doctor.actions
    assert applied[0]["action"] == "length_limit" and applied[0]["playbook"] == "p99_spike"
    assert any("length_limit_tokens" in c for _, c in pair.doctor.policy_changes)
    for m in (base, doc):
        for cls in ("all", "short", "long"):
            stats = m["classes"][cls]
            assert stats["sent"] > 0 and stats["unfinished"] == 0
            assert _finite(stats["p99_e2e_s"]) and _finite(stats["p99_ttft_s"])
        for key in ("throughput_rps", "output_tokens_per_s", "goodput_rps", "peak_qps_served"):
            assert _finite(m[key]) and m[key] > 0
        assert _finite(m["time_to_detect_s"])
    assert base["time_to_fix_s"] is None and _finite(doc["time_to_fix_s"])
    assert doc["classes"]["long"]["rejected_413"] > 0 and base["classes"]["long"]["rejected_413"] == 0
    assert all(o.cls == "long" for o in pair.doctor.outcomes if o.result == "rejected")


def test_virtual_router_length_limit_queue_and_fairness() -> None:
    h = eff.EfficacyHarness(seed=1)
    net = SimNetwork(h)
    h.add_engine("hot", ["m", "--max-num-seqs", "4"], env={"CUDA_VISIBLE_DEVICES": "0"})
    h.add_engine("cold", ["m", "--max-model-len", "32768"], env={"CUDA_VISIBLE_DEVICES": "1"})
    for name in ("hot", "cold"):
        net.register(eff.engine_url(name), name)
    pol = initial_policy([eff.engine_url("hot")], [eff.engine_url("cold")], max_in_flight=2)
    router = eff.VirtualRouter(h, net, replace(pol, length_limit_tokens=8192, length_limit_expires_at=h.now + 5.0))
    specs = [RequestSpec(i, 0.0, 1000 - i * 100, 8, False) for i in range(5)]
    outs = [router.submit(s, h.now) for s in specs]
    big = router.submit(RequestSpec(9, 0.0, 9000, 8, True), h.now)
    late = router.submit(RequestSpec(10, 0.0, 9000, 8, True), h.now + 10.0)  # after the limit expired
    h.run_for(1e-6)
    assert big.rejected == 413 and big.result == "rejected"
    assert router.in_flight("hot") == 2 and router.admission.queue_length("hot") == 3  # max in flight holds the rest
    h.run_for(120.0)
    assert all(o.result == "ok" for o in outs) and late.result == "ok" and late.upstream == "cold"
    # shortest first among the queued once slots free up
    order = sorted(outs[2:], key=lambda o: o.record.sent if o.record else math.inf)
    assert [o.spec.index for o in order] == [4, 3, 2]
    # a drained hot upstream sends short prompts to cold (fail-over where they fit)
    router.set_policy(with_upstream_state(router.policy, "hot", "draining"))
    moved = router.submit(RequestSpec(11, 0.0, 200, 8, False), h.now)
    h.run_for(60.0)
    assert moved.upstream == "cold" and moved.result == "ok"


def test_ramp_arrivals_follow_the_ramp() -> None:
    import random

    times = eff.ramp_arrivals(random.Random(3), 2.0, 10.0, 400.0)
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 400.0
    expected = (2.0 + 10.0) / 2 * 400.0  # the integral of the rate
    assert abs(len(times) - expected) < 0.05 * expected
    first = sum(t < 100 for t in times)  # rate 2 -> 4 over the first quarter: ~300
    last = sum(t >= 300 for t in times)  # rate 8 -> 10 over the last: ~900
    assert 2.4 < last / first < 3.6
    flat = eff.ramp_arrivals(random.Random(3), 5.0, 5.0, 200.0)
    assert abs(len(flat) - 1000) < 100


def test_capacity_probe_measures_what_the_doctor_left_behind() -> None:
    sc = get_scenario("qps_surge")
    pair = eff.run_pair(sc, seed=0, duration_s=720.0, probe=True)
    base, doc = pair.metrics()
    n_trace = len(list(sc.with_duration(720.0).requests(0)))
    for run in (pair.baseline, pair.doctor):
        assert len(run.outcomes) == n_trace  # the probe's requests are kept apart from the trace's
        assert len(run.probe) > n_trace // 2
        low, high = run.probe_rates
        assert high == 6 * low > 0
    assert any(a["action"] == "scale_out" for a in pair.doctor.actions)
    assert _finite(base["capacity_qps"]) and base["capacity_qps"] > 0
    # a second replica roughly doubles what the hot path serves within the SLOs
    assert doc["capacity_qps"] > 1.5 * base["capacity_qps"]
    assert eff.measure(pair.baseline, onset_s=None)["capacity_qps"] == base["capacity_qps"]
    no_probe = eff.run(sc, seed=0, mode="observe", duration_s=480.0)
    assert no_probe.probe == [] and eff.measure(no_probe)["capacity_qps"] is None


def test_a_replica_the_launcher_added_is_read_in_its_role_and_one_it_removed_is_not_reported_down() -> None:
    """The cycle reads the engines the launcher's process table holds (doctor.launched): a replica it started is
    judged as a hot engine; once stopped it is neither read nor reported down."""
    sc = get_scenario("qps_surge")
    h = eff.EfficacyHarness(seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        d = eff.deploy(h, sc, seed=0, tmp=Path(tmp), gpus=4)
        h.run_until(h.start + WARMUP_S)
        [hot] = [e for e in d.config.engines if e.name == "hot"]
        assert hot.launcher is not None
        rec = d.procs.start("hot-r2", hot.launcher.format(port=40100), url=eff.engine_url("hot", 40100), port=40100,
                            gpus=(2,), args={}, role="hot")
        h.run_for(300.0)  # its modelled start-up
        plan = d.plan(fix=False)
        report = asyncio.run(run_cycle(plan, clock=lambda: h.now)).report
        read = {e["name"]: e for e in report["engines"]}
        assert set(read) == {"hot", "cold", "hot-r2"} and read["hot-r2"]["reachable"], report["engines"]
        assert read["hot-r2"]["role"] == "hot"
        asyncio.run(d.procs.stop(rec))
        report = asyncio.run(run_cycle(plan, clock=lambda: h.now)).report
        assert {e["name"] for e in report["engines"]} == {"hot", "cold"}
        assert not [f for f in report["findings"] if f["playbook"] == "engine_down"], report["findings"]


def test_relaunch_is_blue_green_on_a_spare_gpu_and_drops_nothing() -> None:
    run = eff.run(get_scenario("kv_pressure"), seed=0, mode="auto")
    [relaunch] = [a for a in run.actions if a["action"] == "relaunch"]
    assert relaunch["params"] == {"gpu_memory_utilization": 0.9} and relaunch["playbook"] == "kv_pressure"
    steps = " | ".join(relaunch["steps"])
    assert "blue/green: starting hot on port 4" in steps, steps
    assert "router: hot now http://hot.sim:4" in steps and "(was http://hot.sim:8000)" in steps, steps
    served_by = {o.engine for o in run.outcomes if o.result == "ok" and o.upstream == "hot"}
    assert "hot" in served_by and any(k.startswith("hot@4") for k in served_by if k), served_by  # old, then new
    assert all(o.result != "failed" for o in run.outcomes)  # nothing dropped by the swap


def test_an_in_place_relaunch_serves_after_the_modelled_start_up_in_virtual_time() -> None:
    """The doctor's launcher without a spare GPU: drain at the router, stop, start (the new process pays its
    modelled start-up, sim.startup, before /health answers), warm up, resume; all in virtual time."""
    sc = get_scenario("kv_pressure")
    h = eff.EfficacyHarness(seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        d = eff.deploy(h, sc, seed=0, tmp=Path(tmp), gpus=2)
        h.run_until(h.start + WARMUP_S)
        transport = d.net.transport()
        import httpx

        router = RouterActuator(client_factory=lambda t: httpx.AsyncClient(transport=transport, timeout=t),
                                clock=lambda: h.now, sleep=d.sleep)
        launcher = d.launcher(router)
        ctx = actuator_context(d.config, d.state_dir, engines=[e.ref() for e in d.config.engines])
        started = h.now
        applied = asyncio.run(launcher.apply(Action("relaunch", "hot", {"max_num_seqs": 8}), ctx))
        took = h.now - started
    steps = " | ".join(applied.steps)
    assert applied.steps[0].startswith("router: hot draining"), steps
    assert "stopped hot (pid" in steps and "started hot (pid" in steps and applied.steps[-1] == "router: hot active"
    assert applied.changed["url"] == eff.engine_url("hot", 8000)  # in place: the same port
    startup = h.engines["hot"].core.startup.total_s
    assert startup > 0 and took >= startup, (took, startup)
    assert h.engines["hot"].core.config.max_num_seqs == 8


def test_a_storm_that_ends_has_its_limit_lifted_by_the_doctor() -> None:
    sc = get_scenario("long_prompt_storm")
    storm = sc.phases[0]
    short = replace(sc, phases=(replace(storm, workload=replace(storm.workload, duration_s=150.0)),))
    run = eff.run(short, seed=0, mode="auto", duration_s=1800.0)
    limits = [a for a in run.actions if a["action"] == "length_limit"]
    assert limits and limits[0]["params"]["max_tokens"] == 8192, run.actions
    lifted = [a for a in limits if a["status"] == "expired"]
    assert lifted and lifted[0]["reason"].startswith("lifted early: refused nothing for"), limits
    changes = [c for _, c in run.policy_changes if "length_limit_tokens" in c]
    assert len(changes) >= 2 and changes[-1].rstrip().endswith("None"), changes
    # Long documents after the lift are served again, not refused.
    lift_at = max(t for t, c in run.policy_changes if "length_limit_tokens" in c)
    later = [o for o in run.outcomes if o.sent - run.t0 > lift_at and o.cls == "long"]
    assert all(o.result != "rejected" for o in later)
