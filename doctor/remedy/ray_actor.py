"""The Ray actor that holds one engine on a Ray node: it spawns the engine process there and supervises it.

Ray schedules the actor with `num_gpus` = the engine's tensor-parallel degree and sets CUDA_VISIBLE_DEVICES in
the actor's process to the GPUs it assigned; the engine inherits that environment, so the engine sees exactly what
Ray gave it. The engine dies with its actor (PR_SET_PDEATHSIG), as it does with its node. Imports only the
standard library: this module is imported by Ray's worker processes on every node (doctor.remedy.ray_engines
wraps the class with `ray.remote`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

START_MARK = "=== serving-doctor launcher: starting "  # as doctor.remedy.engine_procs writes it
_PR_SET_PDEATHSIG = 1
_ASSIGN = "="


def _die_with(parent: int) -> Callable[[], None]:
    """What the child runs before exec (its own session comes from start_new_session): SIGKILL when the actor's
    process dies, or at once when it already has. libc is loaded here, in the parent: the child only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the engine does not die with its actor
        return lambda: None

    def child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return child


def argv_of(line: str) -> tuple[list[str], dict[str, str]] | None:
    """A simple command line as argv plus its leading NAME=value assignments; None when it needs a shell
    (pipes, lists, redirections), which then runs under `sh -c` (the shell, not the engine, dies with the actor)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    if any(w and all(c in "();<>|&" for c in w) for w in words):
        return None
    env: dict[str, str] = {}
    while words and _ASSIGN in words[0] and words[0].split(_ASSIGN, 1)[0].isidentifier():
        key, value = words.pop(0).split(_ASSIGN, 1)
        env[key] = value
    return (words, env) if words else None


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def any_free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class EngineActor:
    """One engine on the node Ray placed this actor on (wrapped with ray.remote by doctor.remedy.ray_engines)."""

    def __init__(self) -> None:
        import ray  # this runs in a Ray worker, where ray is already imported

        self.node_ip = str(ray.util.get_node_ip_address())
        self.gpu_ids = [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
        self.proc: subprocess.Popen[bytes] | None = None
        self.record: dict[str, Any] = {}

    def placement(self, port: int) -> dict[str, Any]:
        """Where Ray put this actor: node IP, the GPUs Ray assigned, CUDA_VISIBLE_DEVICES, and a port free here
        (`port` when it is, else another)."""
        if not (port > 0 and port_free(self.node_ip, port)):
            port = any_free_port(self.node_ip)
        return {"host": self.node_ip, "port": port, "gpus": self.gpu_ids, "pid": os.getpid(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def launch(self, line: str, log: str, env: Mapping[str, str], drop_env: list[str],
               record: dict[str, Any]) -> dict[str, Any]:
        """Start the engine's command line here, output appended to `log` (after a start mark); its record back
        with the pid."""
        child_env = {k: v for k, v in {**os.environ, **env}.items() if k not in drop_env}
        if "CUDA_VISIBLE_DEVICES" in os.environ:  # Ray's assignment, whatever the doctor's environment says
            child_env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        Path(log).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as out:
            out.write(f"{START_MARK}{time.strftime('%Y-%m-%dT%H:%M:%S')} on {self.node_ip}\n".encode())
            out.flush()
            simple = argv_of(line)
            if simple is not None:
                argv, assigned = simple
                self.proc = subprocess.Popen(argv, env={**child_env, **assigned}, stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=subprocess.STDOUT, close_fds=True,
                                             start_new_session=True, preexec_fn=_die_with(os.getpid()))
            else:
                self.proc = subprocess.Popen(["/bin/sh", "-c", line], env=child_env, stdin=subprocess.DEVNULL,
                                             stdout=out, stderr=subprocess.STDOUT, close_fds=True,
                                             start_new_session=True, preexec_fn=_die_with(os.getpid()))
        self.record = {**record, "pid": self.proc.pid, "log": log, "started_at": time.time()}
        return self.record

    def get_record(self) -> dict[str, Any]:
        return self.record

    def poll(self) -> int | None:
        """None while the engine runs, else its exit status (-1 when none was started)."""
        return -1 if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = Path(self.record.get("log", "")).read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        starts = [i for i, t in enumerate(text) if t.startswith(START_MARK)]
        text = text[starts[-1] + 1:] if starts else text
        return "\n".join(text[-lines:]) or "(empty log)"

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM to the engine's process group, SIGKILL after `grace_s`; its exit status."""
        if self.proc is None:
            return None
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # what the leader left of its group (vLLM's workers)
        return self.proc.poll()
