"""Incident scenarios: a hot and a cold engine, a workload and a timeline of what goes wrong, with ground truth.

A `Scenario` names the engines (`vllm serve`-style argv and environment, roles), the workload (one or
more `WorkloadSpec` phases; schedule steps inside a phase change rate or long share), the incident
timeline (faults through `sim.faults` specs, engine restarts, workload changes), the symptom onset
(ground truth for detection delay) and the playbook expected to fire with its first remedy.
The same definitions drive `doctor sim scenario NAME` (real time over HTTP) and the accuracy suite
(virtual time in `sim.harness`). Rates are chosen relative to the hot engine's capacity (about 5.3
QPS with the default preset and the seed's hot flags).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from sim.workload import RequestSpec, WorkloadSpec, generate

MODEL = "meta-llama/Llama-2-13b-chat-hf"
HOT_ARGV: tuple[str, ...] = (MODEL, "--max-num-seqs", "16", "--max-num-batched-tokens", "5120",
                             "--gpu-memory-utilization", "0.85", "--scheduling-policy", "fcfs")
COLD_ARGV: tuple[str, ...] = (MODEL, "--enable-chunked-prefill", "--max-model-len", "32768", "--max-num-seqs", "2")
HOT_ENV: Mapping[str, str] = MappingProxyType({"CUDA_VISIBLE_DEVICES": "0"})
COLD_ENV: Mapping[str, str] = MappingProxyType({"CUDA_VISIBLE_DEVICES": "1"})
ROUTE_THRESHOLD = 5120  # prompts at or above go cold
HOT_CAPACITY_QPS = 5.3  # where the hot engine saturates with HOT_ARGV (bench/sim_speed.py)

MIN_BASELINE_S = 60.0  # the shortest baseline `with_baseline` gives (a minute of healthy reads)
ROOMY_UTILIZATION = 0.6  # a fast-growing fragmentation's engine budget (all of the sim's +60% cap fits)
FIRST_READING_S = 30.0  # the doctor's first reading, which memory growth is measured from (the trials' cadence)

IncidentKind = Literal["fault", "restart", "workload", "standing"]


@dataclass(frozen=True)
class EngineSpec:
    """One engine of a scenario."""

    name: str
    role: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Incident:
    """One timeline entry. `fault`: `spec` is a sim fault (`hang`, `engine-death`, `xid:79`, `fragmentation:0.9`)
    applied to `engine` at `at_s`; `restart`: the engine is replaced by a fresh one (same argv, no warm-up);
    `workload`: a change already encoded in the workload phases, `standing`: a fault already on the engine's
    command line (both listed for people and the report, not applied at run time)."""

    at_s: float
    engine: str
    kind: IncidentKind
    spec: str = ""
    note: str = ""

    def describe(self) -> str:
        what = {"fault": f"fault {self.spec}", "restart": "restart without warm-up", "workload": "workload change",
                "standing": f"standing fault {self.spec}"}
        text = f"t={self.at_s:g}s {self.engine}: {what[self.kind]}"
        return text + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Phase:
    """Extra requests from `start_s` on: `workload` (its own duration) shifted by start_s.

    `prefix_group_offset` renumbers its prefix groups so its templates differ from other phases'.
    """

    start_s: float
    workload: WorkloadSpec
    prefix_group_offset: int = 0


@dataclass(frozen=True)
class Scenario:
    """A named incident with its ground truth."""

    name: str
    description: str
    workload: WorkloadSpec
    timeline: tuple[Incident, ...] = ()
    phases: tuple[Phase, ...] = ()
    onset_s: float | None = None  # when the symptom starts (ground truth); None for healthy runs
    expected_playbook: str | None = None
    expected_remedy: str | None = None  # kind of the first remedy of the expected finding
    expected_engine: str | None = None
    consequences: tuple[str, ...] = ()  # other playbooks that truthfully describe the same incident
    hot_argv: tuple[str, ...] = HOT_ARGV
    cold_argv: tuple[str, ...] = COLD_ARGV
    hot_env: Mapping[str, str] = field(default_factory=lambda: dict(HOT_ENV))
    cold_env: Mapping[str, str] = field(default_factory=lambda: dict(COLD_ENV))
    duration_s: float = 600.0
    templates_on: tuple[str, ...] = ()  # engines whose prompt templates the doctor's config lists
    route_threshold: int = ROUTE_THRESHOLD
    max_delay_s: float = 420.0  # the expected finding must appear within this long after onset

    @property
    def engines(self) -> tuple[EngineSpec, EngineSpec]:
        return (EngineSpec("hot", "hot", self.hot_argv, self.hot_env),
                EngineSpec("cold", "cold", self.cold_argv, self.cold_env))

    def engine(self, name: str) -> EngineSpec:
        for e in self.engines:
            if e.name == name:
                return e
        raise KeyError(f"scenario {self.name} has no engine {name!r}")

    def argv_for(self, name: str, seed: int) -> list[str]:
        """The engine's argv with the run's seed."""
        return [*self.engine(name).argv, "--seed", str(seed)]

    def requests(self, seed: int = 0) -> list[RequestSpec]:
        """Every request of the run, sorted by arrival, indices unique (they key the synthetic prompts)."""
        out = list(generate(replace(self.workload, seed=seed, duration_s=_cap(self.workload, self.duration_s))))
        for k, phase in enumerate(self.phases, start=1):
            if phase.start_s >= self.duration_s:
                continue
            spec = replace(phase.workload, seed=seed * 7919 + k,
                           duration_s=_cap(phase.workload, self.duration_s - phase.start_s))
            for r in generate(spec):
                group = None if r.prefix_group is None else r.prefix_group + phase.prefix_group_offset
                out.append(replace(r, arrival_s=r.arrival_s + phase.start_s, prefix_group=group))
        out = [r for r in out if r.arrival_s < self.duration_s]
        out.sort(key=lambda r: (r.arrival_s, r.index))
        return [replace(r, index=i) for i, r in enumerate(out)]

    def route(self, spec: RequestSpec) -> str:
        return "cold" if spec.prompt_tokens >= self.route_threshold else "hot"

    def with_duration(self, seconds: float) -> Scenario:
        """The same scenario cut to `seconds` (real-time demos)."""
        return replace(self, duration_s=seconds)

    def with_baseline(self, seconds: float) -> Scenario:
        """The same incident after `seconds` of baseline instead of the scenario's own (`onset_s`).

        Everything from the incident on moves by the same shift: timeline entries, workload phases, the
        workload's schedule steps and end (a base workload that stops at the incident), the run's length.
        A standing fault (fragmentation, on the engine's command line from t=0) cannot move: its rate is
        scaled so the growth passes the playbook's threshold at the new onset instead. A healthy scenario
        has no incident and comes back unchanged. The catalogue itself (what the trials run) never changes.
        """
        if not seconds >= MIN_BASELINE_S or seconds == float("inf"):
            raise ValueError(f"a baseline must be at least {MIN_BASELINE_S:g} s (the doctor's first minute of "
                             f"healthy reads), got {seconds:g}")
        if self.onset_s is None:
            return self
        d = seconds - self.onset_s
        if d == 0:
            return self

        def at(t: float) -> float:
            return max(0.0, t + d)

        workload = replace(self.workload, schedule=tuple((at(t), m, s) for t, m, s in self.workload.schedule))
        if workload.num_requests is None and workload.duration_s is not None \
                and workload.duration_s < self.duration_s:
            workload = replace(workload, duration_s=at(workload.duration_s))  # a base that ends at the incident
        timeline = tuple(i if i.kind == "standing" else replace(i, at_s=at(i.at_s)) for i in self.timeline)
        hot_argv, cold_argv = self.hot_argv, self.cold_argv
        growth = _scaled_growth(self, seconds)
        if growth is not None:
            old, new = growth
            hot_argv = tuple(new if a == old else a for a in hot_argv)
            cold_argv = tuple(new if a == old else a for a in cold_argv)
            if seconds < self.onset_s:  # growing faster, it would reach an OOM before the doctor's `for` passed:
                hot_argv, cold_argv = _roomy(hot_argv, new), _roomy(cold_argv, new)  # room for all of it
            timeline = tuple(replace(i, spec=new, note=i.note.replace(old, new))
                             if i.kind == "standing" and i.spec == old else i for i in timeline)
        description = self.description.replace(f"t={self.onset_s:g}s", f"t={seconds:g}s")
        return replace(self, workload=workload, timeline=timeline, hot_argv=hot_argv, cold_argv=cold_argv,
                       description=description,
                       phases=tuple(replace(ph, start_s=at(ph.start_s)) for ph in self.phases),
                       onset_s=seconds, duration_s=max(seconds + 60.0, self.duration_s + d))


def _scaled_growth(sc: Scenario, onset_s: float) -> tuple[str, str] | None:
    """A standing `fragmentation:R` fault rescaled so its growth since the first reading reaches the same
    share at `onset_s` as it did at the scenario's own onset: (old spec, new spec), or None."""
    for i in sc.timeline:
        if i.kind == "standing" and i.spec.startswith("fragmentation:") and sc.onset_s is not None:
            rate = float(i.spec.split(":", 1)[1])
            scaled = rate * (sc.onset_s - FIRST_READING_S) / (onset_s - FIRST_READING_S)
            return i.spec, f"fragmentation:{scaled:.4g}"
    return None


def _roomy(argv: tuple[str, ...], fault: str) -> tuple[str, ...]:
    """`argv` (when it has `fault`) with a GPU memory budget that leaves room for all of its growth (the sim caps
    fragmentation at +60% of the footprint: 0.6 x 1.6 < 1), and a context that fits the smaller KV pool (prompts
    of 5120 tokens and more go cold, so the hot engine's 8192 is plenty)."""
    if fault not in argv or "--gpu-memory-utilization" not in argv:
        return argv
    util = float(argv[argv.index("--gpu-memory-utilization") + 1])
    return _with(_with(argv, "--gpu-memory-utilization", f"{min(util, ROOMY_UTILIZATION):g}"),
                 "--max-model-len", "8192")


def _cap(spec: WorkloadSpec, seconds: float) -> float | None:
    """A duration no longer than `seconds` (generating past the scenario's end is wasted work)."""
    if spec.num_requests is not None:
        return spec.duration_s
    return min(spec.duration_s or seconds, seconds)


def _base(rate_qps: float, duration_s: float = 3600.0, **kw: object) -> WorkloadSpec:
    """The deployment's everyday traffic: chat prompts LN(400, 0.8), 3% long prompts 4096-8192 tokens."""
    return replace(WorkloadSpec(rate_qps=rate_qps, duration_s=duration_s, long_share=0.03), **kw)  # type: ignore[arg-type]


def _with(argv: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """`argv` with `flag`'s value replaced (or the flag added)."""
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return tuple(out)


def healthy(load: float = 0.45) -> Scenario:
    """Healthy traffic at `load` x the hot engine's capacity: nothing should warn."""
    return Scenario(
        name="healthy" if load == 0.45 else f"healthy@{round(load * 100)}%",
        description=f"steady chat traffic at {load:.0%} of the hot engine's capacity, 3% long prompts routed cold",
        workload=_base(HOT_CAPACITY_QPS * load),
        duration_s=900.0,
    )


def _scenarios() -> dict[str, Scenario]:
    rate = HOT_CAPACITY_QPS * 0.45
    base = _base(rate)
    s: list[Scenario] = [
        healthy(),
        Scenario(
            name="long_prompt_storm",
            description="a client floods the service with very long prompts (9K-16K tokens, 0.5 QPS) from t=660s: "
                        "they are routed cold, whose two sequence slots cannot keep up; P99 latency spikes",
            workload=base,
            phases=(Phase(660.0, WorkloadSpec(rate_qps=0.5, duration_s=600.0, long_share=1.0, long_min=9000,
                                              long_max=16000, output_median=80.0)),),
            timeline=(Incident(660.0, "cold", "workload", note="+0.5 QPS of 9K-16K-token prompts"),),
            onset_s=660.0, expected_playbook="p99_spike", expected_remedy="length_limit", expected_engine="cold",
            consequences=("queue_pressure", "cold_prefill_slow", "throughput_drop", "capacity_scale_out"),
            duration_s=900.0, max_delay_s=180.0,
        ),
        Scenario(
            name="qps_surge",
            description="traffic steps to 2.4x at t=420s (about 5.7 QPS, above the hot engine's ~5.3 QPS "
                        "capacity): every sequence slot is busy, requests queue, KV has room",
            workload=replace(base, schedule=((420.0, 2.4, None),)),
            timeline=(Incident(420.0, "hot", "workload", note="arrival rate x2.4"),),
            onset_s=420.0, expected_playbook="capacity_scale_out", expected_remedy="scale_out", expected_engine="hot",
            consequences=("queue_pressure", "p99_spike", "throughput_drop", "kv_pressure"),
            duration_s=840.0,
        ),
        Scenario(
            name="kv_pressure",
            description="the hot engine runs with a cut KV budget (--gpu-memory-utilization 0.45) and from t=300s "
                        "longer conversations (1.5K-token prompts, 300-token answers) arrive: KV fills, "
                        "requests are preempted and wait",
            workload=base,
            phases=(Phase(300.0, WorkloadSpec(rate_qps=1.0, duration_s=600.0, prompt_median=1500.0, prompt_sigma=0.4,
                                              output_median=300.0, output_sigma=0.4)),),
            hot_argv=_with(_with(HOT_ARGV, "--gpu-memory-utilization", "0.45"), "--max-model-len", "8192"),
            timeline=(Incident(300.0, "hot", "workload", note="+1 QPS of long conversations"),),
            onset_s=300.0, expected_playbook="kv_pressure", expected_remedy="relaunch", expected_engine="hot",
            consequences=("queue_pressure", "p99_spike", "throughput_drop", "capacity_scale_out"),
            duration_s=720.0,
        ),
        Scenario(
            name="prefix_cache_collapse",
            description="chat prompts (~1.8K tokens) start with one of 4 configured 1.5K-token templates (hit rate "
                        "~0.8); at t=420s a release ships new prompts: most requests no longer share a template",
            workload=replace(base, duration_s=420.0, prefix_share=0.95, n_templates=4, template_tokens=1536,
                             prompt_median=1800.0, prompt_sigma=0.15, prompt_cap=4000),
            phases=(Phase(420.0, replace(base, duration_s=300.0, prefix_share=0.3, n_templates=64,
                                         template_tokens=1536, prompt_median=1800.0, prompt_sigma=0.15,
                                         prompt_cap=4000), prefix_group_offset=1000),),
            timeline=(Incident(420.0, "hot", "workload", note="new prompt templates; prefix share 0.95 -> 0.3"),),
            onset_s=420.0, expected_playbook="prefix_cache_miss", expected_remedy="rewarm_prefix_cache",
            expected_engine="hot",
            consequences=("p99_spike", "throughput_drop", "queue_pressure", "hot_decode_jitter"),
            templates_on=("hot",), duration_s=720.0,
        ),
        Scenario(
            name="fragmentation",
            description="the hot engine's allocator fragments (--fault fragmentation:1.5, +150%/h of its footprint; "
                        "--gpu-memory-utilization 0.70 so the growth is visible before it ends in an OOM)",
            workload=base,
            hot_argv=(*_with(HOT_ARGV, "--gpu-memory-utilization", "0.70"), "--enable-sleep-mode",
                      "--fault", "fragmentation:1.5"),
            timeline=(Incident(0.0, "hot", "standing", spec="fragmentation:1.5",
                               note="on the engine's command line: --fault fragmentation:1.5"),),
            onset_s=395.0,  # growth over the doctor's first reading (t=30s) passes 15%
            expected_playbook="memory_fragmentation", expected_remedy="defragment", expected_engine="hot",
            consequences=(), duration_s=600.0,
        ),
        Scenario(
            name="cold_start",
            description="the hot engine is restarted at t=660s (after 11 minutes of steady serving) and takes full "
                        "traffic at once, without warm-up: the first batches pay kernel warm-up",
            workload=replace(base, duration_s=900.0),
            timeline=(Incident(660.0, "hot", "restart"),),
            onset_s=660.0, expected_playbook="cold_start", expected_remedy="warm_up", expected_engine="hot",
            consequences=("p99_spike", "throughput_drop", "queue_pressure"),
            duration_s=900.0, max_delay_s=120.0,
        ),
        Scenario(
            name="engine_hang",
            description="the hot engine hangs at t=290s: /health still answers 200 but no token comes out",
            workload=base,
            timeline=(Incident(290.0, "hot", "fault", spec="hang"),),
            onset_s=290.0, expected_playbook="engine_stalled", expected_remedy="relaunch", expected_engine="hot",
            consequences=("queue_pressure", "p99_spike", "throughput_drop", "capacity_scale_out", "error_rate"),
            duration_s=480.0, max_delay_s=120.0,
        ),
        Scenario(
            name="engine_crash",
            description="the hot engine core dies at t=290s (illegal memory access); its API server exits",
            workload=base,
            timeline=(Incident(290.0, "hot", "fault", spec="engine-death"),),
            onset_s=290.0, expected_playbook="engine_down", expected_remedy="relaunch", expected_engine="hot",
            consequences=("error_rate",), duration_s=420.0, max_delay_s=60.0,
        ),
        Scenario(
            name="gpu_xid",
            description="Xid 79 (GPU fallen off the bus) on the hot engine's GPU at t=290s: the engine dies with it",
            workload=base,
            timeline=(Incident(290.0, "hot", "fault", spec="xid:79"),),
            onset_s=290.0, expected_playbook="gpu_fault", expected_remedy="stop_routing", expected_engine="hot",
            consequences=("engine_down", "error_rate"), duration_s=420.0, max_delay_s=60.0,
        ),
        Scenario(
            name="cold_prefill_slow",
            description="from t=300s long documents (16K-28K tokens, 0.1 QPS) reach the cold engine: attention over "
                        "such contexts makes its prefill cost 0.16-0.19 ms per token (healthy: 0.14) for minutes",
            workload=base,
            phases=(Phase(300.0, WorkloadSpec(rate_qps=0.1, duration_s=600.0, long_share=1.0, long_min=16000,
                                              long_max=28000)),),
            timeline=(Incident(300.0, "cold", "workload", note="+0.1 QPS of 16K-28K-token documents"),),
            onset_s=300.0, expected_playbook="cold_prefill_slow", expected_remedy="set_max_in_flight",
            expected_engine="cold",
            consequences=("queue_pressure", "p99_spike", "throughput_drop", "capacity_scale_out"),
            duration_s=720.0,
        ),
        Scenario(
            name="hot_decode_jitter",
            description="from t=420s prompts of 3K-5K tokens (under the 5120-token route threshold, 0.8 QPS) reach "
                        "the hot engine: their prefill chunks stall the decoding of short requests",
            workload=base,
            phases=(Phase(420.0, WorkloadSpec(rate_qps=0.8, duration_s=600.0, long_share=1.0, long_min=3000,
                                              long_max=5000)),),
            timeline=(Incident(420.0, "hot", "workload", note="+0.8 QPS of 3K-5K-token prompts"),),
            onset_s=420.0, expected_playbook="hot_decode_jitter", expected_remedy="set_route_threshold",
            expected_engine="hot", consequences=("p99_spike", "queue_pressure", "throughput_drop"),
            duration_s=720.0,
        ),
    ]
    return {x.name: x for x in s}


SCENARIOS: dict[str, Scenario] = _scenarios()


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def names() -> list[str]:
    return list(SCENARIOS)
