"""`doctor router --hot URL --cold URL --port P [--config router.toml]`: run the admission router."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

from router.app import Router
from router.config import ConfigError, load_config, validate
from router.listen import exposure_warning, tls_options
from router.secrets import Redactor, redact_logs
from router.server import bind, run_loop, serve


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise SystemExit(f"{self.prog}: error: {message}")


def build_parser(prog: str = "doctor router") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="The hot/cold admission router: an OpenAI-compatible reverse proxy in "
                "front of the hot and cold engines, steered through its policy API.")
    p.add_argument("--hot", action="append", default=[], metavar="URL", help="a hot engine (repeatable)")
    p.add_argument("--cold", action="append", default=[], metavar="URL", help="a cold engine (repeatable)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to listen on (default 8080)")
    p.add_argument("--config", metavar="router.toml", help="the router's own configuration file")
    p.add_argument("--tls-cert", metavar="PEM", help="serve https with this certificate (chain); with --tls-key")
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (a file only its owner may read)")
    p.add_argument("--policy-file", help="where the policy is persisted (default router-policy.json)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad arguments or configuration)."""
    args_list = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(args_list)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        return int(exc.code or 0)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(Path(args.config) if args.config else None)
        if args.hot:
            cfg.hot = args.hot
        if args.cold:
            cfg.cold = args.cold
        if args.host:
            cfg.host = args.host
        if args.port is not None:
            cfg.port = args.port
        if args.policy_file is not None:
            cfg.policy_file = args.policy_file
        if args.tls_cert or args.tls_key:
            cfg.tls_cert_file, cfg.tls_key_file = args.tls_cert or "", args.tls_key or ""
        validate(cfg)
        tls_options(cfg.tls_cert_file or None, cfg.tls_key_file or None)
        router = Router(cfg)
    except (ConfigError, ValueError) as exc:
        print(f"doctor router: {exc}", file=sys.stderr)
        return 2
    redact_logs(Redactor([router.token]))  # upstream URLs may carry user:password; the token never shows
    if router.load_warning:
        print(f"doctor router: warning: {router.load_warning}", file=sys.stderr)
    if not router.store.loaded_from_file and not (cfg.hot or cfg.cold):
        print("doctor router: error: no upstreams: give --hot URL and --cold URL (or a policy file)", file=sys.stderr)
        return 2
    if router.token is None:
        print(f"doctor router: the policy API is off (no token in ${cfg.token_env} or token_file)", file=sys.stderr)
    try:
        sock = bind(cfg.host, cfg.port)
    except OSError as exc:
        print(f"doctor router: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]
    warning = exposure_warning("the router", cfg.host, port, tls=bool(cfg.tls_cert_file),
                               authenticated=router.token is not None)
    if warning:
        print(f"doctor router: {warning}", file=sys.stderr)
    logging.getLogger("router").info("listening on %s://%s:%d", "https" if cfg.tls_cert_file else "http", cfg.host,
                                     port)
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(serve(router, sock))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
