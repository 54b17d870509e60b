"""The live half of the detection bench: incidents on sim engines over HTTP at real rates, judged by the real
`doctor diagnose` run as cron runs it (a run every --interval seconds, one state directory), with each
detection delay printed against its floor: the playbook's `for` plus two runs (the first run that can see
the condition over a window, and the one that finds it held for its `for`)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from playbooks.registry import all_playbooks
from sim.testing import ALL_GRAPHED, FAST_START
from trials.live import LoadThread, Mix, cron_runs, first_run_with, spawn_engine

# CUDA graphs for every step (no first-batch penalty) and no modelled start-up: the engines are up when timed
BASE = ["m", *ALL_GRAPHED, "--time-scale", "0.1", "--max-model-len", "16384", *FAST_START]
# incident -> (role, engine flags, load, playbooks that report it)
CASES: dict[str, tuple[str, list[str], Mix, set[str]]] = {
    "long_document_storm": ("hot", ["--max-num-seqs", "8"], Mix(rate_qps=0.8, long_every=2),
                            {"long_prompt_share", "p99_spike"}),
    "sequence_cap_queue": ("hot", ["--max-num-seqs", "4"], Mix(clients=16, max_tokens=300),
                           {"queue_pressure", "capacity_scale_out"}),
}


def run_live(interval_s: float, duration_s: float, cases: Sequence[str] | None = None) -> list[str]:
    """Run the live cases side by side (one deployment); lines of the table."""
    chosen = {k: v for k, v in CASES.items() if not cases or k in cases}
    fors = {pb.id: pb.for_s for pb in all_playbooks()}
    lines = [f"live: {len(chosen)} incidents over HTTP, `doctor diagnose` every {interval_s:g}s for {duration_s:g}s",
             f"{'incident':<22} {'reported as':<20} {'delay s':>8} {'floor s':>8} {'delay/floor':>12}"]
    with tempfile.TemporaryDirectory() as tmp:
        engines, loads = {}, {}
        try:
            for gpu, (name, (_, argv, _, _)) in enumerate(chosen.items()):
                engines[name] = spawn_engine(name, [*BASE, *argv], gpu=gpu, ledger=str(Path(tmp) / "gpus.json"))
            config = Path(tmp) / "doctor.toml"
            config.write_text(f'[doctor]\nstate_dir = "{Path(tmp) / "state"}"\n\n' + "".join(
                f'[[engines]]\nname = "{n}"\nrole = "{role}"\nurl = "{engines[n].url}"\n\n'
                for n, (role, _, _, _) in chosen.items()))
            for name, (_, _, mix, _) in chosen.items():
                loads[name] = LoadThread(engines[name].url, mix).start()
            started = time.time()
            runs = cron_runs(["--config", str(config)], interval_s=interval_s, duration_s=duration_s)
        finally:
            for load in loads.values():
                load.stop()
            for engine in engines.values():
                engine.stop()
    for name, (_, _, _, playbooks) in chosen.items():
        hit = first_run_with(runs, name, playbooks)
        if hit is None:
            lines.append(f"{name:<22} {'(not reported)':<20} {'-':>8}")
            continue
        playbook = next(f["playbook"] for f in hit.findings(name) if f["playbook"] in playbooks)
        delay = hit.started - started
        floor = fors[playbook] + 2 * interval_s
        lines.append(f"{name:<22} {playbook:<20} {delay:>8.0f} {floor:>8.0f} {delay / floor:>11.2f}x")
    return lines
