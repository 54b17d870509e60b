"""`doctor`: the command line. Subcommands import what they need lazily so start-up stays fast."""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """usage: doctor <command> [options]

commands:
  diagnose             read the engines and report what they show (exit 0/1/2, 3 = could not)
  demo                 hot and cold sim engines with load, and what the doctor sees
  sim engine MODEL ... a simulated vLLM engine (flags as `vllm serve`, plus sim flags)
  sim load --url URL   a workload against the sim or a real vLLM (like `vllm bench serve`)
  sim calibrate        the sim's default preset against the seed article's figures
  version              print the doctor's version

Run `doctor <command> --help` for a command's options.
"""


def _sim(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    sub, rest = argv[0], argv[1:]
    runners: dict[str, Callable[[list[str]], int]] = {}
    if sub == "engine":
        from sim.engine_cli import main as engine_main

        runners[sub] = engine_main
    elif sub == "load":
        from sim.load_cli import main as load_main

        runners[sub] = load_main
    elif sub == "calibrate":
        from sim.calibrate import main as calibrate_main

        runners[sub] = calibrate_main
    if sub not in runners:
        print(f"doctor sim: unknown command {sub!r}; expected engine, load or calibrate", file=sys.stderr)
        return 2
    return runners[sub](rest)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; exit codes: 0 ok, 2 usage errors (diagnose defines 1-3 itself)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd == "sim":
        return _sim(rest)
    if cmd == "diagnose":
        from doctor.diagnose import main as diagnose_main

        return diagnose_main(rest)
    if cmd == "demo":
        from doctor.demo import main as demo_main

        return demo_main(rest)
    if cmd in ("version", "--version"):
        from doctor import __version__

        print(f"serving-doctor {__version__}")
        return 0
    print(f"doctor: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
