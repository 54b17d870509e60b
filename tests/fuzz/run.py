"""Bounded coverage-guided fuzzing of every outside-input parser (atheris):
`python -m tests.fuzz.run --seconds N [--target T ...] [--json out.json] [--work DIR]`.

Each target runs in its own subprocess for N seconds (killed at N + 60); the summary per target is
{"inputs": executed inputs, "crashes": crash, hang and out-of-memory artifacts, "corpus": the corpus folder}.
Exit 1 when any target crashed or did not finish."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fuzz.targets import CORPUS, TARGETS

ROOT = Path(__file__).resolve().parents[2]
_EXECUTED = re.compile(r"stat::number_of_executed_units:\s*(\d+)")
_PROGRESS = re.compile(r"#(\d+)\s+(?:pulse|NEW|REDUCE|DONE|INITED|RELOAD)")


def run_target(name: str, seconds: int, work: Path) -> dict[str, Any]:
    corpus, artifacts = work / name / "corpus", work / name / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(artifacts, ignore_errors=True)
    artifacts.mkdir(parents=True)
    cmd = [sys.executable, "-m", "tests.fuzz.worker", name, str(seconds), str(corpus), str(CORPUS / name),
           str(artifacts)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds + 60)
        log, finished, rc = proc.stdout + proc.stderr, True, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        err = exc.stderr or b""
        log = (out.decode(errors="replace") if isinstance(out, bytes) else out) + \
              (err.decode(errors="replace") if isinstance(err, bytes) else err)
        finished, rc = False, None
    (work / name / "fuzz.log").write_text(log)
    executed = _EXECUTED.findall(log) or _PROGRESS.findall(log)
    found = sorted(p.name for p in artifacts.iterdir())
    return {"inputs": int(executed[-1]) if executed else 0, "crashes": len(found), "artifacts": found,
            "corpus": str(corpus), "seeds": str(CORPUS / name), "finished": finished, "exit_code": rc,
            "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__)
    p.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    p.add_argument("--target", action="append", choices=sorted(TARGETS), help="only these (repeatable)")
    p.add_argument("--json", type=Path, help="write the summary here")
    p.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz", help="corpora, artifacts and logs")
    args = p.parse_args(argv)
    summary: dict[str, Any] = {}
    for name in args.target or list(TARGETS):
        summary[name] = got = run_target(name, args.seconds, args.work)
        print(f"{name:15} {got['inputs']:>9} inputs {got['crashes']:>3} crashes"
              f"{'' if got['finished'] else '  (did not finish)'}  {got['corpus']}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    bad = any(s["crashes"] or not s["finished"] for s in summary.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
