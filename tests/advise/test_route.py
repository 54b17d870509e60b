"""With a hot and a cold engine, `doctor advise` searches the route threshold on the two calibrated twins. The windows
are short to keep the test cheap, so the fit bar is lifted (--max-fit-error): this checks the route search, not the
fit (test_must_show.py does)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema

from doctor.advise.cli import main
from sim.harness import length_router
from sim.workload import WorkloadSpec, generate
from trials.scenario import ScenarioHarness
from trials.sim_io import SimNetwork, engine_url

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "advise.schema.json").read_text())


def test_route_threshold_candidates_on_two_twins(tmp_path: Path) -> None:
    h = ScenarioHarness(seed=3)
    for gpu, name in enumerate(("hot", "cold")):
        h.add_engine(name, ["m", "--preset", "h100-8b", "--time-scale", "1.3", "--max-num-seqs", "32"],
                     env={"CUDA_VISIBLE_DEVICES": str(gpu)})
    h.load(generate(WorkloadSpec(rate_qps=3.0, duration_s=200, seed=2, long_share=0.3, long_min=2500,
                                 long_max=9000)), router=length_router(5120))
    h.run_for(40)
    net = SimNetwork(h)
    toml = ["[doctor]", "long_prompt_tokens = 5120"]
    for name in ("hot", "cold"):
        net.register(engine_url(name), name)
        toml += ["[[engines]]", f'name = "{name}"', f'url = "{engine_url(name)}"', "max_num_seqs = 32"]
    (tmp_path / "doctor.toml").write_text("\n".join(toml) + "\n")

    async def wait(s: float) -> None:
        h.run_for(s)

    out, err = io.StringIO(), io.StringIO()
    code = main(["--config", str(tmp_path / "doctor.toml"), "--preset", "h100-8b", "--sample", "120s",
                 "--min-requests", "50", "--max-fit-error", "5", "--max-num-seqs-grid", "32",
                 "--batched-tokens-grid", "8192", "--chunked-grid", "on", "--format", "json"],
                out=out, err=err, transport=net.transport(), clock=lambda: h.now, sleep=wait)
    assert code in (0, 1), err.getvalue()
    doc = json.loads(out.getvalue())
    jsonschema.validate(doc, SCHEMA)
    route = doc["route"]
    assert "skipped" not in route, [(e["engine"], e.get("withheld"), e.get("error")) for e in doc["engines"]]
    rows = {r["threshold"]: r for r in route["candidates"]}
    assert set(rows) == {2048, 5120, 8192} and route["best"] in rows
    assert rows[5120]["labels"] == ["current", "seed rules"]
    # a lower threshold sends more of the same traffic cold
    assert rows[2048]["cold"]["requests"] > rows[5120]["cold"]["requests"] > rows[8192]["cold"]["requests"]
