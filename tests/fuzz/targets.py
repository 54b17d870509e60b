"""The fuzz targets: name -> module exposing `fuzz_one(data: bytes)` (raises only on a broken contract)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"

TARGETS: dict[str, str] = {
    "metrics": "tests.fuzz.fuzz_metrics",  # /metrics text, name mapping and version profile, derived signals
    "logs": "tests.fuzz.fuzz_logs",  # log-line parser, stats lines, event detector, the file scanner
    "alerts": "tests.fuzz.fuzz_alerts",  # Alertmanager webhook v4 body (doctor serve)
    "config": "tests.fuzz.fuzz_config",  # doctor.toml loader
    "router_request": "tests.fuzz.fuzz_router_request",  # the router's request body parsing and token estimate
    "wire": "tests.fuzz.fuzz_wire",  # the router's HTTP/1.1 client: upstream response parsing
    "policy": "tests.fuzz.fuzz_policy",  # the router's policy API body
    "dcgm": "tests.fuzz.fuzz_dcgm",  # dcgm-exporter /metrics (GPU signals)
    "router_metrics": "tests.fuzz.fuzz_router_metrics",  # the router's /metrics as the doctor reads it
}


def load(name: str) -> Callable[[bytes], None]:
    """The target's fuzz_one."""
    fuzz_one: Callable[[bytes], None] = importlib.import_module(TARGETS[name]).fuzz_one
    return fuzz_one


def seeds(name: str) -> list[bytes]:
    """The target's seed corpus (tests/fuzz/corpus/<name>/), sorted by file name."""
    return [p.read_bytes() for p in sorted((CORPUS / name).iterdir()) if p.is_file() and p.name != "README.md"]
