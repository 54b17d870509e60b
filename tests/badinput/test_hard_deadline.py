"""`doctor diagnose` ends by its deadline whatever blocks: a stage that holds the event loop (here the HTTP
transport, the plan's I/O, blocking synchronously as a CPU-starved step would) cannot outrun --timeout; the
watchdog says so, exits 3 and the lock is free for the next cron run."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from doctor.deadline import Watchdog, grace_s
from doctor.diagnose import EXIT_UNUSABLE
from doctor.state import StateDir

ROOT = Path(__file__).resolve().parents[2]

# The real CLI entry, with only the plan's HTTP transport substituted by one that blocks the event loop.
DRIVER = textwrap.dedent("""
    import dataclasses, sys, time
    import httpx
    from doctor import diagnose

    class Stuck(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            time.sleep(3600)  # synchronous: the event loop cannot run, so asyncio's time-out cannot fire

    real = diagnose.plan_of
    diagnose.plan_of = lambda opts, **kw: dataclasses.replace(real(opts, **kw), transport=Stuck())
    sys.exit(diagnose.main(sys.argv[1:]))
""")


def test_a_blocked_event_loop_still_ends_by_the_deadline(tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-c", DRIVER, "--engine", "hot=http://127.0.0.1:9", "--sample", "0.1s",
                           "--timeout", "5s", "--state-dir", str(state), "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # generous: the test's own bound
    assert proc.returncode == EXIT_UNUSABLE, (proc.returncode, proc.stderr)
    # 5 s, not 1: the transport must be reached (and block) before asyncio's own time-out can fire; under a loaded
    # CI host, starting the interpreter and the plan alone took over a second, and the soft time-out spoke first.
    assert "gave up after --timeout 5s (hard deadline" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""  # no half-written report
    with StateDir(state).lock("diagnose"):  # the next run is not locked out
        pass


def test_watchdog_fires_only_when_the_block_overruns() -> None:
    fired = threading.Event()
    with Watchdog(0.05, fired.set):
        assert fired.wait(60)
    quiet = threading.Event()
    with Watchdog(30, quiet.set):
        pass
    assert not quiet.wait(0.2)
    assert grace_s(30) == 3.0 and grace_s(1) == 2.0 and grace_s(3600) == 10.0


def test_in_process_callers_get_no_hard_exit_by_default(tmp_path: Path) -> None:
    from doctor.diagnose import main

    err = io.StringIO()
    code = main(["--engine", "hot=http://127.0.0.1:9", "--sample", "0.1s", "--timeout", "5s",
                 "--state-dir", str(tmp_path / "s")], out=io.StringIO(), err=err)
    assert code == EXIT_UNUSABLE and "no engine could be read" in err.getvalue()
