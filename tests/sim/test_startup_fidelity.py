"""Start-up output as vLLM prints it: the non-default args line and the OOM-at-start traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.engine import EngineStartError
from sim.testing import engine_thread


def _non_default(lines: list[str]) -> dict[str, str]:
    """Keys of the `non-default args` dict, with each value's repr."""
    (line,) = [x for x in lines if "non-default args: " in x]
    return dict(re.findall(r"'(\w+)': ([^,}]+)", line.split("non-default args: ", 1)[1]))


def test_non_default_args_lists_only_vllm_keys(tmp_path: Path) -> None:
    argv = ["m", "--max-num-seqs", "48", "--log-file", str(tmp_path / "e.log"), "--gpu-ledger",
            str(tmp_path / "g.json"), "--dcgm-port", "0", "--preset", "cpu-tiny", "--time-scale", "0.5",
            "--vllm-version", "0.33", "--fault", "hang@999"]
    with engine_thread(argv) as eng:
        args = _non_default(eng.logs)
    assert args.get("max_num_seqs") == "48"
    sim_only = {"log_file", "gpu_ledger", "dcgm_port", "preset", "time_scale", "vllm_version", "fault",
                "sim_fault_endpoint"}
    assert not sim_only & set(args), args


@pytest.mark.parametrize("version", ["0.33", "0.12"])
def test_oom_at_start_is_one_consistent_traceback(tmp_path: Path, version: str) -> None:
    argv = ["m", "--fault", "cuda-oom-start", "--vllm-version", version, "--gpu-ledger", str(tmp_path / "g.json")]
    with pytest.raises(EngineStartError) as info, engine_thread(argv):
        pass
    text = "\n".join(re.sub(r"^.*?\[[\w/.]+:\d+\] ", "", line) for line in "\n".join(info.value.lines).split("\n"))
    core = text.split("EngineCore failed to start.", 1)[1].split("\n", 1)[1]
    tb = core.split("\n" + "torch.OutOfMemoryError", 1)[0]
    frames = re.findall(r'^  File "[^"]+", line \d+, in (\w+)\n    (.*)$', tb, re.M)
    assert frames, core
    # The innermost frame must be one that can raise a CUDA OOM (loading weights), not `raise ValueError(`.
    assert not frames[-1][1].startswith("raise ValueError"), frames[-1]
    assert frames[-1][0] == "load_model"
