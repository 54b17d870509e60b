"""`doctor`: the command line. Subcommands import what they need lazily so start-up stays fast."""

from __future__ import annotations

import importlib
import sys

USAGE = """usage: doctor <command> [options]

commands:
  diagnose             read the engines, run the playbooks, report findings (exit 0/1/2; 3 = could not)
  playbooks            list the playbooks (--format markdown writes the runbooks)
  serve --config F     the daemon: the cycle on an interval and on Alertmanager's alerts, with an API
  actions              pending and recent actions; approve ID, reject ID, rollback ID decide and undo
  tui                  the on-call screen: attach to the daemon (--daemon URL) or run standalone (--config)
  advise               settings for the traffic the engines get: a sim twin fitted to them, searched (exit 0/1; 3)
  rules                Prometheus alerting rules for the same conditions as the playbooks
  router               the hot/cold admission router in front of the engines
  demo                 hot and cold sim engines with load, and what the doctor sees
  sim engine MODEL ... a simulated vLLM engine (flags as `vllm serve`, plus sim flags)
  sim dcgm --port P    the simulated node's dcgm-exporter (outlives the engines on its GPUs)
  sim load --url URL   a workload against the sim or a real vLLM (like `vllm bench serve`)
  sim scenario NAME    hot and cold sim engines with a workload and an incident timeline
  sim calibrate        the sim's default preset against the seed article's figures
  sim fidelity --against URL   compare the sim's /metrics surface with a running vLLM
  version              print the doctor's version

Run `doctor <command> --help` for a command's options.
"""

# command -> module whose `main(argv) -> int` runs it
COMMANDS = {
    "diagnose": "doctor.diagnose",
    "playbooks": "doctor.playbooks_cli",
    "advise": "doctor.advise.cli",
    "rules": "doctor.rules",
    "router": "router.cli",
    "demo": "doctor.demo",
    "actions": "doctor.actions_cli",
    "serve": "doctor.serve.main",
    "tui": "tui.cli",  # the only command that imports textual, and only when it opens the screen
}
PERSON_COMMANDS = ("approve", "reject", "rollback")  # doctor.actions_cli.main_for(command, argv)
SIM_COMMANDS = {
    "engine": "sim.engine_cli",
    "dcgm": "sim.dcgm",
    "load": "sim.load_cli",
    "scenario": "sim.scenario_cli",
    "calibrate": "sim.calibrate",
    "fidelity": "sim.fidelity",
}


def _run(module: str, argv: list[str]) -> int:
    try:
        main = importlib.import_module(module).main
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            print(f"doctor: {module} is not part of this installation", file=sys.stderr)
            return 2
        raise
    return int(main(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand; unknown commands and missing arguments exit 2 with the usage."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    cmd, rest = args[0], args[1:]
    if cmd in ("version", "--version"):
        from doctor import __version__

        print(f"serving-doctor {__version__}")
        return 0
    if cmd == "sim":
        if not rest or rest[0] in ("-h", "--help"):
            print(USAGE)
            return 0 if rest else 2
        if rest[0] not in SIM_COMMANDS:
            print(f"doctor sim: unknown command {rest[0]!r}; expected one of {', '.join(SIM_COMMANDS)}",
                  file=sys.stderr)
            return 2
        return _run(SIM_COMMANDS[rest[0]], rest[1:])
    if cmd in PERSON_COMMANDS:
        from doctor.actions_cli import main_for

        return main_for(cmd, rest)
    if cmd not in COMMANDS:
        print(f"doctor: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return _run(COMMANDS[cmd], rest)


if __name__ == "__main__":
    sys.exit(main())
