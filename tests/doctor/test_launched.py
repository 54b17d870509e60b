"""The engines a cycle reads where the launcher's records say they run (doctor.launched).

Before, a cron run after a blue/green relaunch read the configured URL (the old, stopped engine: engine_down) and
never read a replica the doctor had added."""

from __future__ import annotations

from doctor.engines import EngineRef
from doctor.launched import base_name, with_launched
from doctor.remedy.model import LaunchedEngine


def _rec(name: str, port: int, *, started: float, role: str | None = None, **args: object) -> LaunchedEngine:
    return LaunchedEngine(name, 100 + port, port, f"http://127.0.0.1:{port}", (port % 8,), "cmd",
                          f"/s/{name}@{port}.log", dict(args), started, role=role)


REFS = (EngineRef("hot", "hot", "http://127.0.0.1:8001", launcher="vllm serve m --port {port}",
                  config={"max_num_seqs": 16}),
        EngineRef("cold", "cold", "http://127.0.0.1:8002", log="/var/log/cold.log"))


def test_a_relaunched_engine_is_read_where_it_runs_now_with_its_new_arguments() -> None:
    out = with_launched(REFS, [_rec("hot", 8001, started=1.0), _rec("hot", 40001, started=2.0, max_num_seqs=24)])
    hot = out[0]
    assert (hot.url, hot.log, hot.config["max_num_seqs"]) == ("http://127.0.0.1:40001", "/s/hot@40001.log", 24)
    assert hot.launcher == REFS[0].launcher and hot.role == "hot"
    assert out[1] == REFS[1]  # not launched by the doctor: as configured


def test_a_replica_is_read_in_its_engines_role() -> None:
    out = with_launched(REFS, [_rec("hot-r2", 40002, started=3.0)])
    assert [e.name for e in out] == ["hot", "cold", "hot-r2"]
    replica = out[2]
    assert (replica.role, replica.url, replica.launcher) == ("hot", "http://127.0.0.1:40002", REFS[0].launcher)
    assert replica.config["max_num_seqs"] == 16  # its engine's arguments, as the launcher started it
    assert with_launched(REFS, [_rec("cold-r3", 40003, started=1.0, role="cold")])[2].role == "cold"


def test_nothing_launched_changes_nothing() -> None:
    assert with_launched(REFS, []) == REFS


def test_base_name() -> None:
    assert base_name("hot-r2", ["hot", "cold"]) == "hot"
    assert base_name("hot-rx", ["hot"]) is None and base_name("warm-r2", ["hot"]) is None
