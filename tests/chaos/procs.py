"""The doctor as cron starts it: `doctor diagnose` in a process of its own, its exit code, report and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.serve.stack import ROOT


@dataclass(frozen=True)
class Done:
    code: int
    report: dict[str, Any] | None
    err: str

    def actions(self) -> list[dict[str, Any]]:
        return list((self.report or {}).get("actions", []))


def diagnose(args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120) -> Done:
    """`doctor diagnose ARGS --format json` as its own process."""
    proc = subprocess.run([sys.executable, "-m", "doctor.cli", "diagnose", *args, "--format", "json"],
                          capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    report = json.loads(proc.stdout) if proc.stdout.strip() else None
    return Done(proc.returncode, report, proc.stderr)


def start_diagnose(args: Sequence[str], *, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """The same, started and not waited for (several racing)."""
    return subprocess.Popen([sys.executable, "-m", "doctor.cli", "diagnose", *args, "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def finish(proc: subprocess.Popen[str], timeout_s: float = 120) -> Done:
    out, err = proc.communicate(timeout=timeout_s)
    return Done(proc.returncode, json.loads(out) if out.strip() else None, err)


def engine_on(port: int, argv: Sequence[str], *, gpu: int, ledger: str) -> subprocess.Popen[bytes]:
    """A sim engine process on a given port (a restart keeps its address), as trials.live.spawn_engine starts them;
    the caller waits for /health."""
    return subprocess.Popen([sys.executable, "-m", "doctor.cli", "sim", "engine", *argv, "--port", str(port),
                             "--host", "127.0.0.1", "--gpu-ledger", ledger], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": str(gpu)})
