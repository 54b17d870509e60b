"""The Ray launcher's cheap part, in every `make test` run (the 3-node cluster is tests/remedy/test_ray_launcher.py,
`make test-ray`): the [launcher] table, ray imported only when used, and an engine dying with its actor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from doctor.config import config_from_dict
from doctor.config_schema import ConfigError
from doctor.remedy.ray_actor import argv_of
from playbooks.model import Action


def test_the_launcher_table_selects_the_backend() -> None:
    assert config_from_dict({}).launcher.backend == "local"
    cfg = config_from_dict({"launcher": {"backend": "ray", "ray_address": "10.0.0.5:6379", "ray_namespace": "prod",
                                         "placement_timeout_s": "2m"}}).launcher
    assert (cfg.backend, cfg.ray_address, cfg.ray_namespace, cfg.placement_timeout_s) == ("ray", "10.0.0.5:6379",
                                                                                         "prod", 120.0)
    assert config_from_dict({"launcher": {"backend": "ray", "ray_address": "ray://head:10001"}}).launcher.ray_address


@pytest.mark.parametrize(("table", "message"), [
    ({"backend": "slurm"}, r'launcher\.backend: expected one of local, ray, got "slurm"'),
    ({"ray_address": "head:6379"}, r"launcher\.backend: ray_address and ray_namespace apply to backend = \"ray\""),
    ({"backend": "ray", "ray_address": "http://head"}, r"launcher\.ray_address: expected HOST:PORT"),
    ({"backend": "ray", "ray_namespace": "a b"}, r"launcher\.ray_namespace: expected letters"),
    ({"backend": "ray", "placement": 5}, r"launcher\.placement: unknown key .*did you mean 'placement_timeout_s'"),
])
def test_a_bad_launcher_table_names_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"launcher": table})


def test_ray_is_imported_only_when_the_ray_backend_acts(tmp_path: Path) -> None:
    """`doctor diagnose` and a remediator built for backend = "ray" do not import ray; Ray is reached on first use."""
    code = textwrap.dedent(f"""
        import sys, doctor.cli
        from pathlib import Path
        from doctor.config import config_from_dict
        from doctor.remedy.setup import remediator
        try:
            doctor.cli.main(['diagnose', '--help'])
        except SystemExit:
            pass
        cfg = config_from_dict({{"launcher": {{"backend": "ray", "ray_address": "127.0.0.1:1"}}}})
        r = remediator(cfg, Path({str(tmp_path)!r}))
        print("LAUNCHER", type(r.registry.by_kind["scale_out"]).__name__, "ray" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert "LAUNCHER RayLauncher False" in r.stdout, r.stdout + r.stderr


def test_a_simple_command_runs_without_a_shell() -> None:
    assert argv_of("CUDA_LAUNCH_BLOCKING=1 vllm serve 'my model' --port 8000") == (
        ["vllm", "serve", "my model", "--port", "8000"], {"CUDA_LAUNCH_BLOCKING": "1"})
    assert argv_of("vllm serve m --api-key 'a;b'") == (["vllm", "serve", "m", "--api-key", "a;b"], {})
    assert argv_of("vllm serve m | tee log") is None and argv_of("cd /x && vllm serve m") is None
    assert argv_of("'unterminated") is None


def test_the_engine_dies_with_its_actor(tmp_path: Path) -> None:
    """The actor's process killed (SIGKILL, as when Ray kills it or its node goes): its engine goes too."""
    marker = f"61.{os.getpid()}"  # a duration no other process here sleeps for
    code = textwrap.dedent(f"""
        import sys, time
        from doctor.remedy.ray_actor import EngineActor
        a = EngineActor.__new__(EngineActor)  # its state without Ray (__init__ asks Ray where it runs)
        a.node_ip, a.gpu_ids, a.proc, a.record = "127.0.0.1", [], None, {{}}
        rec = a.launch("sleep {marker}", {str(tmp_path / "e.log")!r}, {{"X": "1"}}, ["SECRET"], {{"name": "e"}})
        print(rec["pid"], a.poll(), flush=True)
        time.sleep(60)
    """)
    actor = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd(), "SECRET": "s"})
    try:
        assert actor.stdout is not None
        pid_s, poll = actor.stdout.readline().split()
        engine = psutil.Process(int(pid_s))
        assert poll == "None" and engine.cmdline() == ["sleep", marker]  # no shell between the actor and it
        env = engine.environ()
        assert env.get("X") == "1" and "SECRET" not in env and os.getpgid(engine.pid) == engine.pid
        actor.send_signal(signal.SIGKILL)
        actor.wait(10)
        gone, _ = psutil.wait_procs([engine], timeout=10)
        assert gone, "the engine outlived its actor"
    finally:
        actor.kill()
        actor.wait(10)
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] == ["sleep", marker]:
                p.kill()
    assert (tmp_path / "e.log").read_text().startswith("=== serving-doctor launcher: starting ")


def test_an_unreachable_cluster_is_refused_at_once(tmp_path: Path) -> None:
    """No Ray at the address: refused with the reason (ray.init alone would retry for minutes), and a cycle reads
    the configured engines."""
    from doctor.config_launcher import LauncherSettings
    from doctor.remedy.model import ActuatorContext, EngineTarget, Refused
    from doctor.remedy.ray_engines import ray_records
    from doctor.remedy.ray_launcher import RayLauncher

    lau = RayLauncher(tmp_path, address="127.0.0.1:1", router=None)
    hot = EngineTarget("hot", "hot", "http://127.0.0.1:8000", launcher="vllm serve m --port {port}")
    ctx = ActuatorContext(engines={"hot": hot}, state_dir=tmp_path)
    with pytest.raises(Refused, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1"):
        lau.check(Action("scale_out", "hot", {"add_replicas": 1}), ctx)
    assert lau.free_gpu_count(ctx) is None and lau.spare_gpus(ctx) == []
    assert ray_records(tmp_path / "engines", LauncherSettings("ray", "127.0.0.1:1")) == []
