"""`doctor serve --config doctor.toml`: one asyncio process running the doctor cycle every `[serve] interval_s`
and on each alert, with the HTTP API (doctor.serve.app) on `[serve] listen` (127.0.0.1:9361 by default).

Remediation is what `doctor diagnose --fix` does, in the config's mode. The state directory (the config's
`state_dir`, else systemd's $STATE_DIRECTORY, else /var/lib/serving-doctor when writable, else
$XDG_STATE_HOME/serving-doctor) is shared with cron runs:
the same journal, cooldowns, budget and target locks; `serve.lock` keeps a second daemon off it. Exit 3 when it
cannot start (bad flags or config, unreadable token file, address in use, another daemon on the state directory).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

EXIT_OK, EXIT_UNUSABLE = 0, 3
log = logging.getLogger("doctor.serve")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="doctor serve", description=(
        "The doctor as a daemon: the cycle on an interval and on Alertmanager's alerts (POST /v1/alerts), "
        "with an API for people and the TUI (GET /v1/state, /v1/actions, /v1/events, /metrics)."))
    p.add_argument("--config", type=Path, required=True, help="doctor.toml (engines, mode, guardrails, [serve])")
    p.add_argument("--listen", help="HOST:PORT (default [serve] listen, else 127.0.0.1:9361)")
    p.add_argument("--state-dir", type=Path, help="default: the config's state_dir, else $STATE_DIRECTORY, else "
                   "$XDG_STATE_HOME/serving-doctor")
    p.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve https with this certificate (default "
                   "[serve] tls_cert_file); with --tls-key")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="its private key, a file only its owner may read "
                   "(default [serve] tls_key_file)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    return p


DAEMON_STATE_DIR = Path("/var/lib/serving-doctor")


def state_dir_of(flag: Path | None, configured: Path | None) -> Path:
    """--state-dir, the config's, systemd's $STATE_DIRECTORY, /var/lib/serving-doctor when it is there and
    writable (DESIGN: the daemon's default), else $XDG_STATE_HOME/serving-doctor as for cron runs."""
    from doctor.state import default_state_dir

    systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if flag or configured or systemd:
        return flag or configured or Path(systemd)
    return DAEMON_STATE_DIR if os.access(DAEMON_STATE_DIR, os.W_OK) else default_state_dir()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `doctor serve`."""
    from doctor.config import ConfigError, load_config
    from doctor.config_serve import is_loopback
    from doctor.secrets import Redactor, redact_logs
    from doctor.serve.auth import CredentialError, load_credentials
    from doctor.state import LockHeld, StateDir
    from router.listen import ListenError, exposure_warning, tls_options

    try:
        ns = build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))
        config = load_config(ns.config)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_UNUSABLE
    except ConfigError as exc:
        print(f"doctor serve: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    settings = config.serve
    if ns.listen:
        host, sep, port = ns.listen.rpartition(":")
        if not sep or not host or not port.isdigit():
            print(f"doctor serve: --listen {ns.listen!r}: expected HOST:PORT like 127.0.0.1:9361", file=sys.stderr)
            return EXIT_UNUSABLE
        if not is_loopback(host.strip("[]")) and settings.token_file is None:
            print(f"doctor serve: --listen {ns.listen} is reachable from other hosts: set [serve] token_file",
                  file=sys.stderr)
            return EXIT_UNUSABLE
        settings = dataclasses.replace(settings, listen=ns.listen)
        config = dataclasses.replace(config, serve=settings)
    if ns.tls_cert or ns.tls_key:
        if not (ns.tls_cert and ns.tls_key):
            print("doctor serve: --tls-cert and --tls-key go together (the certificate and its key)", file=sys.stderr)
            return EXIT_UNUSABLE
        settings = dataclasses.replace(settings, tls_cert_file=ns.tls_cert, tls_key_file=ns.tls_key)
        config = dataclasses.replace(config, serve=settings)
    if not config.engines:
        print(f"doctor serve: {ns.config}: no [[engines]]: the daemon needs engines to watch", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        creds = load_credentials(settings)
        router_token = config.router.token(os.environ)
        tls = tls_options(settings.tls_cert_file, settings.tls_key_file)
    except (CredentialError, ListenError) as exc:
        print(f"doctor serve: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    if settings.leader is not None:
        from doctor.leader.setup import problem

        if (why := problem(settings.leader, os.environ)) is not None:
            print(f"doctor serve: {why}", file=sys.stderr)
            return EXIT_UNUSABLE
    logging.basicConfig(level=ns.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    redact_logs(Redactor([*creds.secrets(), router_token]))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per engine read is noise
    state_dir = state_dir_of(ns.state_dir, config.state_dir)
    try:
        sock = _bind(settings.host, settings.port)
    except OSError as exc:
        print(f"doctor serve: cannot listen on {settings.listen}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    warning = exposure_warning("doctor serve", settings.host, sock.getsockname()[1], tls=bool(tls),
                               authenticated=creds.write_token is not None)
    if warning:
        print(f"doctor serve: {warning}", file=sys.stderr, flush=True)
    if creds.write_token is None:
        print("doctor serve: warning: no [serve] token_file: alerts (unless alert_token_file or basic auth is set) "
              "and people's decisions are refused", file=sys.stderr, flush=True)
    try:
        with StateDir(state_dir).lock("serve"):
            from doctor.serve.daemon import serve

            asyncio.run(serve(config, state_dir, creds, sock, tls=tls))
    except LockHeld as exc:
        print(f"doctor serve: another doctor serve uses {state_dir} ({exc})", file=sys.stderr)
        return EXIT_UNUSABLE
    except OSError as exc:
        print(f"doctor serve: cannot use the state directory {state_dir}: {exc}", file=sys.stderr)
        return EXIT_UNUSABLE
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return EXIT_OK


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
