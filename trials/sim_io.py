"""The sim harness as HTTP and log files, the I/O a trial substitutes for the doctor's cycle (trials.accuracy,
and trials.efficacy once it runs the cycle): engines named `http://<engine>.sim`, answered by an
`httpx.MockTransport` over the harness (`handler`), each node's dcgm-exporter at `http://<engine>.dcgm.sim/metrics`,
and one log file per engine fed with what it printed (`LogFiles`)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from sim.harness import HarnessEngine
from trials.scenario import ScenarioHarness

HOST_SUFFIX = ".sim"  # http://hot.sim is engine hot's API server
DCGM_SUFFIX = ".dcgm.sim"  # http://hot.dcgm.sim/metrics is the dcgm-exporter of hot's node


def engine_url(name: str) -> str:
    return f"http://{name}{HOST_SUFFIX}"


def dcgm_url(name: str) -> str:
    return f"http://{name}{DCGM_SUFFIX}/metrics"


def handler(h: ScenarioHarness, request: httpx.Request) -> httpx.Response:
    """What the harness's engines (and their nodes' dcgm-exporters) answer over HTTP."""
    host = request.url.host
    if host.endswith(DCGM_SUFFIX) and host[:-len(DCGM_SUFFIX)] in h.engines:
        return httpx.Response(200, text=h.gpu_text(host[:-len(DCGM_SUFFIX)]))
    name = host[:-len(HOST_SUFFIX)] if host.endswith(HOST_SUFFIX) else ""
    if name not in h.engines or h.shut_down(name):
        raise httpx.ConnectError("connection refused", request=request)
    core = h.engines[name].core
    path = request.url.path
    if path == "/metrics":
        return httpx.Response(200, text=h.metrics_text(name),
                              headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"})
    if path == "/health":
        return httpx.Response(h.health(name))
    if path == "/version":
        return httpx.Response(200, json={"version": core.profile.version})
    if path == "/v1/models":
        model = core.config.served_model_name
        return httpx.Response(200, json={"object": "list", "data": [
            {"id": model, "object": "model", "root": model, "max_model_len": core.config.max_model_len}]})
    return httpx.Response(404, json={"detail": "Not Found"})


class LogFiles:
    """One log file per engine, fed with the lines the harness's engine printed since the last cycle."""

    def __init__(self, h: ScenarioHarness, directory: Path) -> None:
        self.h = h
        self.directory = directory
        self._followed: dict[str, tuple[HarnessEngine, int]] = {}

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def append(self) -> None:
        for name, engine in self.h.engines.items():
            followed, offset = self._followed.get(name, (engine, 0))
            if followed is not engine:  # a restarted engine appends to the same log file
                offset = 0
            lines = engine.logs[offset:]
            self._followed[name] = (engine, len(engine.logs))
            path = self.path(name)
            with path.open("a", encoding="utf-8") as fh:
                fh.writelines(line + "\n" for line in lines)
            os.utime(path, (self.h.now, self.h.now))  # a file written now (the scan reads the year from it)
