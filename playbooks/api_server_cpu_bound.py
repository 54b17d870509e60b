"""api_server_cpu_bound: the API server process uses a full core while the GPU waits for work."""

from __future__ import annotations

from typing import ClassVar

from playbooks.base import Condition, EngineView, Playbook
from playbooks.model import Action, Evidence


class ApiServerCpuBound(Playbook):
    id = "api_server_cpu_bound"
    title = "API server CPU-bound"
    severity = "warning"
    signals = ("process_cpu", "api_server_pinned", "sm_utilization", "dram_utilization")
    alerts = ("VllmApiServerCpuBound",)
    defaults: ClassVar[dict[str, float]] = {
        "process_cpu_cores": 0.95,  # the API server process at this share of one core (or more) is pinned
        "gpu_idle_ratio": 0.5,  # SM or DRAM utilization below this: the GPU waits
        "api_server_count": 2.0,  # API server processes to relaunch with
    }
    for_s = 120.0
    runbook = """\
**What it means.** vLLM's API server is one Python process: HTTP, tokenization, detokenization and
streaming all run on one core. When it sits at a full core while the GPU is mostly idle, the frontend is
the bottleneck and the GPU cannot be fed (vLLM issues #580, #8033, #14931; slow tokenizers and
multimodal processors make it worse). Without a GPU reading the finding is less sure: a busy frontend
on a busy GPU is just load.

**Confirm by hand.** `rate(process_cpu_seconds_total[1m])` on the engine's `/metrics` (the API server
process) near 1; `top -H -p $(pgrep -f "vllm serve")` or `pidstat -p PID 1`; the GPU side with
`nvidia-smi dmon -s u` or `DCGM_FI_PROF_SM_ACTIVE` / `DCGM_FI_PROF_DRAM_ACTIVE` under 50%. Note that
with `--api-server-count > 1` (the default for `--data-parallel-size > 1` from 0.15) metrics switch to
multiprocess mode and the `process_*` metrics disappear; the doctor then reads the process's CPU from the
host (psutil) when the engine is local.

**Remedies.** Relaunch with more API server processes (`--api-server-count 2`, internal load balancing
across them). Also worth a look: a faster tokenizer, `--stream-interval` above 1, shorter outputs per
chunk.
"""

    def check(self, view: EngineView) -> Condition | None:
        if view.change_in_progress:
            return None
        p = view.params
        cpu = view.value("process_cpu")
        pinned = view.value("api_server_pinned")
        limit = p["process_cpu_cores"] * (1 - view.hysteresis) if view.active else p["process_cpu_cores"]
        evidence: list[Evidence] = []
        if cpu is not None and cpu >= limit:
            evidence.append(Evidence("process_cpu", cpu, p["process_cpu_cores"], view.window_s, ">=",
                                     "API server process CPU, in cores"))
        if pinned is not None and pinned >= 1.0:
            evidence.append(Evidence("api_server_pinned", pinned, 1.0, view.window_s, "==",
                                     view.signals.reasons.get("api_server_pinned", "host reading: pinned")))
        if not evidence:
            return None
        gpu_known = [s for s in ("sm_utilization", "dram_utilization") if view.value(s) is not None]
        idle = [e for e in (view.below("sm_utilization", "gpu_idle_ratio"),
                            view.below("dram_utilization", "gpu_idle_ratio")) if e is not None]
        if gpu_known and not idle:
            return None  # the GPU is busy too: the frontend keeps up with it
        core = cpu if cpu is not None else p["process_cpu_cores"]
        summary = f"API server at {core:.0%} of a core"
        if idle:
            summary += f" while the GPU idles ({idle[0].signal.replace('_utilization', '')} {idle[0].value:.0%})"
        else:
            summary += " (GPU utilization unknown)"
        # one agreeing signal for the CPU side however many readings show it, plus each idle GPU reading;
        # an unknown GPU counts as considered and not agreeing, which lowers confidence
        return Condition(summary, (*evidence, *idle), agreeing=1 + len(idle), considered=3)

    def remedies(self, view: EngineView, condition: Condition) -> list[Action]:
        count = max(2, int(view.params["api_server_count"]))
        return [Action("relaunch", view.name, {"api_server_count": count}, inverse={"api_server_count": 1},
                       risk="medium",
                       description=f"relaunch with --api-server-count {count}; metrics switch to multiprocess mode "
                                   "and the process_* metrics disappear (the doctor reads CPU from the host)")]


PLAYBOOK = ApiServerCpuBound()
