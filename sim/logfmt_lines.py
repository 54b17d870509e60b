"""Line building for vLLM log output: process prefixes, logger headers, raw and uvicorn lines.

Line layout per `profile.log_prefix` (vllm/logger.py):

* ``v06``:  ``LEVEL MM-DD HH:MM:SS file.py:LINE] msg``
* ``v08``:  ``LEVEL MM-DD HH:MM:SS [file.py:LINE] msg``
* ``v010``: ``ESC[1;36m(ProcName pid=N)ESC[0;0m `` + the v08 layout (the stdout wrapper colours
  the process prefix unconditionally in 0.10.2); uvicorn and raw traceback lines get the prefix too.
* ``v026``: ``(ProcName pid=N) `` + the v08 layout, no colour.

Multi-line messages repeat the whole header on every line, as vLLM's NewLineFormatter does.
`LineFormatter` is the base that the start-up and fault mixins (and `sim.logfmt.LogFormatter`)
build on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from http import HTTPStatus

from sim.logfmt_tags import tags_for
from sim.profiles import VersionProfile

ANSI_START = "\x1b[1;36m"
ANSI_END = "\x1b[0;0m"

API = "api"  # the API server process (front end)
CORE = "core"  # the engine core process (V1) or MQLLMEngine process (V0)
WORKER = "worker"  # TP worker 0 (V1 with tensor_parallel_size > 1)


@dataclass(frozen=True)
class _Proc:
    name: str | None  # None: no process prefix
    pid: int


class LineFormatter:
    """Builds log lines (prefix, header, message) for one vLLM release; the base of `LogFormatter`."""

    def __init__(self, profile: VersionProfile, *, api_pid: int, core_pid: int) -> None:
        self.profile = profile
        self.api_pid = api_pid
        self.core_pid = core_pid
        self.model = "model"  # set by startup(); used in later fault dumps
        self._tags = tags_for(profile.name)
        prefixed = profile.log_prefix in ("v010", "v026")
        self._procs: dict[str, _Proc] = {
            API: _Proc("APIServer" if prefixed else None, api_pid),
            CORE: _Proc(self._core_name() if prefixed and profile.v1 else None, core_pid),
            WORKER: _Proc(self._worker_name() if prefixed and profile.v1 else None, core_pid + 1),
        }

    # --- naming ---------------------------------------------------------------------------------------
    def _core_name(self) -> str:
        """EngineCore_0 (0.10), EngineCore_DP0 (0.11-0.25), EngineCore (0.26+, one engine)."""
        if self.profile.name == "0.10":
            return "EngineCore_0"
        if self.profile.log_prefix == "v026":
            return "EngineCore"
        return "EngineCore_DP0"

    def _worker_name(self) -> str:
        return "VllmWorker TP0" if self.profile.name == "0.10" else "Worker_TP0"

    @property
    def core_proc_name(self) -> str:
        """The engine core's process name as vLLM's messages spell it."""
        return "EngineCore_0" if self.profile.name in ("0.8", "0.10") else "EngineCore_DP0"

    # --- low-level line building -----------------------------------------------------------------
    @staticmethod
    def timestamp(now: float) -> str:
        """`MM-DD HH:MM:SS` in UTC."""
        return time.strftime("%m-%d %H:%M:%S", time.gmtime(now))

    def _proc_prefix(self, where: str) -> str:
        proc = self._procs[where]
        if proc.name is None:
            return ""
        text = f"({proc.name} pid={proc.pid})"
        if self.profile.log_prefix == "v010":
            return f"{ANSI_START}{text}{ANSI_END} "
        return f"{text} "

    def _header(self, now: float, level: str, tag: str) -> str:
        ts = self.timestamp(now)
        if self.profile.log_prefix == "v06":
            return f"{level} {ts} {tag}]"
        return f"{level} {ts} [{tag}]"

    def emit(
        self, now: float, msg: str, *, level: str = "INFO", where: str = API, tag: str | None = None
    ) -> list[str]:
        """One vLLM logger record: every line of `msg` gets the full prefix.

        `where` is API, CORE or WORKER; `tag` is a key of the tag table or a literal `file.py:N`.
        """
        resolved = self._tags.get(tag or "", tag or "api_server.py:1")
        head = self._proc_prefix(where) + self._header(now, level, resolved)
        return [f"{head} {part}" for part in msg.split("\n")]

    def raw(self, text: str, *, where: str = API) -> list[str]:
        """Unformatted stdout/stderr text (uvicorn, print_exc, C++): only the process prefix."""
        prefix = self._proc_prefix(where)
        return [prefix + part for part in text.split("\n")]

    def uvicorn(self, msg: str) -> list[str]:
        """A uvicorn line: `INFO:     msg`, with the API server's prefix in 0.10+."""
        return self.raw(f"INFO:     {msg}", where=API)

    # --- HTTP access log --------------------------------------------------------------------------
    def access(self, now: float, client: str, method: str, path: str, status: int) -> list[str]:
        """A uvicorn access line; `client` is `host:port`. `now` is unused (uvicorn prints no time)."""
        del now
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:  # uvicorn prints no phrase for codes it does not know (e.g. 499)
            phrase = ""
        return self.uvicorn(f'{client} - "{method} {path} HTTP/1.1" {status} {phrase}')
