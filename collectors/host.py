"""Host signals: the engine's own `process_*` metrics first (remote engines too), psutil for local ones.

`process_signals` reads two scrapes. `LocalProcessFinder` finds a local engine's processes by the
port's owner and vLLM's process titles and reads their CPU, RSS and threads, plus host memory and
swap, and flags an API server pinned at a full core (it serialises tokenisation and detokenisation).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from collectors.types import MetricsSnapshot

PINNED_CORE_RATIO = 0.95  # an API server using this share of one core (or more) is pinned
MULTIPROCESS_REASON = ("no process_* metrics: the engine serves /metrics from prometheus_client's multiprocess "
                       "collector (api-server-count > 1, or the V0 frontend), which does not export them")


def _value(snap: MetricsSnapshot, name: str) -> float | None:
    v = snap.counters.get(name, snap.gauges.get(name))
    return None if v is None else float(v)


def process_signals(snapshot_prev: MetricsSnapshot | None,
                    snapshot_cur: MetricsSnapshot) -> tuple[dict[str, float | None], dict[str, str]]:
    """`process_cpu` (cores: Δcpu_seconds/Δt) and `process_rss_bytes` of the API server from its metrics."""
    values: dict[str, float | None] = {"process_cpu": None, "process_rss_bytes": None}
    reasons: dict[str, str] = {}
    cpu = _value(snapshot_cur, "process_cpu_seconds")
    rss = _value(snapshot_cur, "process_rss_bytes")
    if cpu is None and rss is None:
        return values, dict.fromkeys(values, MULTIPROCESS_REASON)
    values["process_rss_bytes"] = rss
    if rss is None:
        reasons["process_rss_bytes"] = "process_resident_memory_bytes not exported"
    prev = None if snapshot_prev is None else _value(snapshot_prev, "process_cpu_seconds")
    if cpu is None:
        reasons["process_cpu"] = "process_cpu_seconds_total not exported"
    elif snapshot_prev is None or prev is None:
        reasons["process_cpu"] = "needs two scrapes (a rate of process_cpu_seconds_total)"
    else:
        assert snapshot_prev is not None
        dt = snapshot_cur.timestamp - snapshot_prev.timestamp
        start = _value(snapshot_cur, "process_start_time")
        if dt <= 0:
            reasons["process_cpu"] = f"scrapes are not in time order (Δt = {dt:.3f} s)"
        elif cpu >= prev:
            values["process_cpu"] = (cpu - prev) / dt
        elif start is not None and snapshot_cur.timestamp > start:
            values["process_cpu"] = cpu / (snapshot_cur.timestamp - start)
            reasons["process_cpu"] = "the process restarted between scrapes: average since its start"
        else:
            reasons["process_cpu"] = "the process restarted between scrapes (CPU counter went back)"
    return values, reasons


# ----- local processes through psutil -----------------------------------------------------------

# Process titles and command lines, in the order a role is decided.
_TITLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("engine_core", re.compile(r"VLLM::EngineCor")),  # /proc/PID/comm keeps 15 characters of the title
    ("worker", re.compile(r"VLLM::Worker")),
    ("api_server", re.compile(r"VLLM::APIServer|vllm\.entrypoints\.openai\.api_server|(^|[/\s])vllm\s+serve\b"
                              r"|doctor(\.cli)?\s+sim\s+engine")),
)


@dataclass(frozen=True)
class ProcessReading:
    """One process of a local engine. `cpu_cores` is cores used over the interval (1.0 = one full core)."""

    pid: int
    role: str  # api_server | engine_core | worker
    title: str
    cpu_cores: float | None
    rss_bytes: float | None
    threads: int | None


@dataclass(frozen=True)
class HostReading:
    """A local engine's processes and the host's memory and swap."""

    port: int
    timestamp: float
    processes: tuple[ProcessReading, ...]
    mem_total_bytes: float | None = None
    mem_available_bytes: float | None = None
    swap_total_bytes: float | None = None
    swap_used_bytes: float | None = None
    api_server_pinned: bool | None = None  # None when the API server's CPU is not known yet
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def api_server(self) -> ProcessReading | None:
        return next((p for p in self.processes if p.role == "api_server"), None)


def role_of(title: str) -> str | None:
    """The vLLM role a process title or command line names, else None."""
    for role, pattern in _TITLES:
        if pattern.search(title):
            return role
    return None


HOST_MEMORY_TTL_S = 0.5  # one cycle's engines share one reading of /proc/meminfo
RECHECK_S = 60.0  # a remembered port owner, still running, is checked on its sockets this often


class LocalProcessFinder:
    """Finds and reads a local engine's processes. psutil, the clock and sleep are injectable."""

    def __init__(self, psutil_module: Any = psutil, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.ps = psutil_module
        self.clock = clock
        self.sleep = sleep
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (cpu seconds, clock)
        # port -> the pid found listening on it: listing sockets (the host's, or even one process's: psutil parses
        # /proc/net/tcp* whole either way) is the costliest part of a read (measured in the daemon's cycle). A
        # remembered owner still running (same start time) is trusted for RECHECK_S, then checked on its own
        # sockets; the host is searched again only when it no longer listens there.
        self._owners: dict[int, tuple[int, float | None, float]] = {}  # port -> (pid, its start time, checked at)
        # port -> (owner pid, checked at, [(role, process, title)]): finding the owner's children walks every
        # process on the host (psutil's ppid_map reads each /proc/<pid>/stat), measured at 3 ms a read in the
        # daemon. Kept for RECHECK_S while the owner stays the same and none of the family has exited.
        self._families: dict[int, tuple[int, float, list[tuple[str, Any]]]] = {}
        self._titles: dict[int, str] = {}  # pid -> its title, as found with its family
        # The host's memory and swap, read once for all the engines read within HOST_MEMORY_TTL_S (one cycle).
        self._memory: tuple[float, dict[str, float | None], tuple[str, ...]] | None = None

    # -- discovery --

    def _title(self, proc: Any) -> str:
        try:
            cmd = " ".join(proc.cmdline())
        except Exception:
            cmd = ""
        try:
            name = str(proc.name())
        except Exception:
            name = ""
        return f"{name} {cmd}".strip()

    def port_owner(self, port: int, notes: list[str]) -> int | None:
        """The pid listening on `port` (the one found before when it still does; else net_connections, else every
        process's own sockets)."""
        known = self._owners.get(port)
        if known is not None:
            pid, started, checked = known
            if self._started(pid) == started and started is not None:
                if self.clock() - checked < RECHECK_S:
                    return pid
                if self._listens(pid, port):
                    self._owners[port] = (pid, started, self.clock())
                    return pid
        self._owners.pop(port, None)
        found = self._search_owner(port, notes)
        if found is not None:
            self._owners[port] = (found, self._started(found), self.clock())
        return found

    def _started(self, pid: int) -> float | None:
        try:
            return float(self.ps.Process(pid).create_time())
        except Exception:
            return None

    def _listens(self, pid: int, port: int) -> bool:
        listen = getattr(self.ps, "CONN_LISTEN", "LISTEN")
        try:
            proc = self.ps.Process(pid)
            conns = (getattr(proc, "net_connections", None) or proc.connections)(kind="inet")
        except Exception:
            return False
        return any(c.status == listen and c.laddr and c.laddr[1] == port for c in conns)

    def _search_owner(self, port: int, notes: list[str]) -> int | None:
        listen = getattr(self.ps, "CONN_LISTEN", "LISTEN")
        try:
            for c in self.ps.net_connections(kind="inet"):
                if c.status == listen and c.laddr and c.laddr[1] == port and c.pid:
                    return int(c.pid)
        except self.ps.AccessDenied:
            notes.append("listing sockets was denied; looked through each process instead")
        denied = 0
        for proc in self.ps.process_iter():
            try:
                conns = (getattr(proc, "net_connections", None) or proc.connections)(kind="inet")
            except (self.ps.AccessDenied, self.ps.ZombieProcess):
                denied += 1
                continue
            except self.ps.NoSuchProcess:
                continue
            if any(c.status == listen and c.laddr and c.laddr[1] == port for c in conns):
                return int(proc.pid)
        if denied:
            notes.append(f"{denied} processes could not be inspected (access denied): run as the engine's user "
                         "or root to find its port's owner")
        return None

    def find(self, port: int, notes: list[str] | None = None) -> list[tuple[str, Any]]:
        """(role, psutil.Process) of the engine on `port`: the port's owner and its vLLM children."""
        notes = notes if notes is not None else []
        pid = self.port_owner(port, notes)
        if pid is None:
            self._families.pop(port, None)
            notes.append(f"no local process listens on port {port}")
            return []
        kept = self._families.get(port)
        if kept is not None and kept[0] == pid and self.clock() - kept[1] < RECHECK_S and all(
                proc.is_running() for _, proc in kept[2]):
            return list(kept[2])
        found = self._find_family(pid, port, notes)
        if found:
            self._families[port] = (pid, self.clock(), found)
        return found

    def _find_family(self, pid: int, port: int, notes: list[str]) -> list[tuple[str, Any]]:
        try:
            owner = self.ps.Process(pid)
            family = [owner, *owner.children(recursive=True)]
        except (self.ps.NoSuchProcess, self.ps.AccessDenied) as exc:
            notes.append(f"port {port} owner pid {pid} could not be read: {type(exc).__name__}")
            return []
        found: list[tuple[str, Any]] = []
        for proc in family:
            title = self._titles[int(proc.pid)] = self._title(proc)
            role = role_of(title)
            if proc is owner:
                found.append(("api_server", proc))  # the port's owner serves HTTP whatever its title
            elif role in ("engine_core", "worker", "api_server"):
                found.append((role, proc))
        return found

    # -- reading --

    def _cpu_seconds(self, proc: Any) -> float:
        t = proc.cpu_times()
        return float(t.user + t.system)

    def read(self, port: int, interval_s: float | None = None) -> HostReading:
        """Read the engine on `port`. With `interval_s`, CPU is sampled over that sleep; else from the
        cpu_times delta since the previous read (None at the first)."""
        notes: list[str] = []
        procs = self.find(port, notes)
        return self.read_processes(procs, port=port, interval_s=interval_s, notes=notes)

    def read_processes(self, procs: Sequence[tuple[str, Any]], *, port: int = 0, interval_s: float | None = None,
                       notes: list[str] | None = None) -> HostReading:
        """Read given (role, process) pairs; `read` finds them by port first."""
        notes = notes if notes is not None else []
        start: dict[int, tuple[float, float]] = {}
        if interval_s is not None:
            for _, proc in procs:
                with contextlib.suppress(self.ps.NoSuchProcess, self.ps.AccessDenied):
                    start[proc.pid] = (self._cpu_seconds(proc), self.clock())
            self.sleep(interval_s)
        readings = [r for r in (self._read_one_at_once(role, proc, start, notes) for role, proc in procs)
                    if r is not None]
        mem = self._host_memory(notes)
        api = next((r for r in readings if r.role == "api_server"), None)
        pinned = None if api is None or api.cpu_cores is None else api.cpu_cores >= PINNED_CORE_RATIO
        if pinned and api is not None and api.cpu_cores is not None:
            notes.append(f"API server pid {api.pid} is pinned: {api.cpu_cores:.0%} of a core")
        return HostReading(port=port, timestamp=time.time(), processes=tuple(readings), api_server_pinned=pinned,
                           notes=tuple(notes), **mem)

    def _read_one_at_once(self, role: str, proc: Any, start: dict[int, tuple[float, float]],
                          notes: list[str]) -> ProcessReading | None:
        """`_read_one` with /proc/<pid>/stat and status read once for CPU, threads and title (psutil's oneshot)."""
        oneshot = getattr(proc, "oneshot", None)
        if oneshot is None:  # a stand-in process without it
            return self._read_one(role, proc, start, notes)
        try:
            with oneshot():
                return self._read_one(role, proc, start, notes)
        except self.ps.NoSuchProcess:
            notes.append(f"pid {int(proc.pid)} ({role}) exited while being read")
            return None

    def _read_one(self, role: str, proc: Any, start: dict[int, tuple[float, float]],
                  notes: list[str]) -> ProcessReading | None:
        pid = int(proc.pid)
        try:
            cpu_now, now = self._cpu_seconds(proc), self.clock()
            before = start.get(pid) or self._last.get(pid)
            self._last[pid] = (cpu_now, now)
            cores = None
            if before is not None and now > before[1]:
                cores = max(0.0, cpu_now - before[0]) / (now - before[1])
            elif before is None:
                notes.append(f"pid {pid}: CPU needs an interval or a second read")
        except self.ps.NoSuchProcess:
            notes.append(f"pid {pid} ({role}) exited while being read")
            return None
        except self.ps.AccessDenied:
            notes.append(f"pid {pid} ({role}): access denied reading CPU (run as the engine's user or root)")
            cores = None
        rss = threads = None
        try:
            rss = float(proc.memory_info().rss)
            threads = int(proc.num_threads())
        except self.ps.AccessDenied:
            notes.append(f"pid {pid} ({role}): access denied reading memory and threads")
        except self.ps.NoSuchProcess:
            notes.append(f"pid {pid} ({role}) exited while being read")
            return None
        title = self._titles.get(pid) or self._title(proc)
        return ProcessReading(pid=pid, role=role, title=title[:200], cpu_cores=cores, rss_bytes=rss, threads=threads)

    def _host_memory(self, notes: list[str]) -> dict[str, float | None]:
        now = self.clock()
        if self._memory is not None and 0.0 <= now - self._memory[0] < HOST_MEMORY_TTL_S:
            notes.extend(self._memory[2])
            return dict(self._memory[1])
        said: list[str] = []
        out = self._read_host_memory(said)
        notes.extend(said)
        self._memory = (now, dict(out), tuple(said))
        return out

    def _read_host_memory(self, notes: list[str]) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        try:
            vm = self.ps.virtual_memory()
            out["mem_total_bytes"], out["mem_available_bytes"] = float(vm.total), float(vm.available)
        except Exception as exc:
            notes.append(f"host memory unavailable: {exc}")
        try:
            sw = self.ps.swap_memory()
            out["swap_total_bytes"], out["swap_used_bytes"] = float(sw.total), float(sw.used)
        except Exception as exc:
            notes.append(f"swap unavailable: {exc}")
        return out


def local_process_signals(reading: HostReading) -> tuple[dict[str, float | None], dict[str, str]]:
    """`process_cpu` / `process_rss_bytes` of the API server from psutil (when process_* metrics are absent),
    plus host extras."""
    api = reading.api_server
    values: dict[str, float | None] = {
        "process_cpu": None if api is None else api.cpu_cores,
        "process_rss_bytes": None if api is None else api.rss_bytes,
        "host_mem_available_bytes": reading.mem_available_bytes,
        "host_swap_used_bytes": reading.swap_used_bytes,
        "api_server_pinned": None if reading.api_server_pinned is None else float(reading.api_server_pinned),
    }
    why = "; ".join(reading.notes) or "no API server process found"
    reasons = {k: why for k, v in values.items() if v is None}
    return values, reasons


def processes_by_title(psutil_module: Any = psutil) -> Iterable[tuple[str, Any]]:
    """Every local process whose title or command line names a vLLM role (or the sim engine)."""
    finder = LocalProcessFinder(psutil_module)
    for proc in psutil_module.process_iter():
        try:
            role = role_of(finder._title(proc))
        except Exception:
            continue
        if role is not None:
            yield role, proc
