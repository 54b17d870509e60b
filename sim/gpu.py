"""Simulated GPUs: memory claimed per GPU across engines, and dcgm-exporter style metrics.

The ledger is what makes two engines on one GPU collide as real ones do: an engine asks for
`gpu_memory_utilization` of each of its GPUs at start and fails with vLLM's error when that much is
not free. It is also the node's driver state that outlives any engine: each GPU's last Xid and ECC
count, and each holder's recent activity, which the separate dcgm-exporter (`sim.dcgm`) reads.
`MemoryLedger` serves engines in one process (the harness, engine threads); `FileLedger` serves
separate `doctor sim engine` processes on one simulated node through a locked JSON file.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

GIB = 1024**3
MIB = 1024**2


class GpuMemoryError(Exception):
    """Not enough free memory on a GPU for what an engine asks."""

    def __init__(self, gpu: int, free_bytes: float, total_bytes: float) -> None:
        super().__init__(f"GPU {gpu}: {free_bytes / GIB:.2f}/{total_bytes / GIB:.2f} GiB free")
        self.gpu = gpu
        self.free_bytes = free_bytes
        self.total_bytes = total_bytes


@dataclass(frozen=True)
class Activity:
    """A holder's recent use of its GPUs (ratios 0..1 over the last second), stamped with unix time."""

    gpu_util: float
    dram_active: float
    tensor_active: float
    at: float


@dataclass
class GpuState:
    """What the driver keeps about one GPU whoever holds it: the last Xid and the double-bit ECC count."""

    xid_last: int = 0
    ecc_dbe: int = 0


@dataclass
class _Claim:
    gpus: tuple[int, ...]
    bytes_per_gpu: float
    pid: int
    activity: Activity | None = None


@dataclass
class NodeView:
    """A consistent copy of the node: live claims and per-GPU driver state."""

    claims: dict[str, _Claim] = field(default_factory=dict)
    gpus: dict[int, GpuState] = field(default_factory=dict)

    def used(self, gpu: int) -> float:
        return sum(c.bytes_per_gpu for c in self.claims.values() if gpu in c.gpus)


class GpuLedger(Protocol):
    """Who holds how much memory on which simulated GPU, and what the driver saw on each."""

    def claim(self, owner: str, gpus: tuple[int, ...], bytes_per_gpu: float, total_bytes: float) -> None: ...

    def update(self, owner: str, bytes_per_gpu: float) -> None: ...

    def release(self, owner: str) -> None: ...

    def used(self, gpu: int) -> float: ...

    def report(self, owner: str, activity: Activity) -> None: ...

    def record_xid(self, gpus: tuple[int, ...], code: int) -> None: ...

    def view(self) -> NodeView: ...


class MemoryLedger:
    """In-process ledger (safe to share between threads)."""

    def __init__(self) -> None:
        self.claims: dict[str, _Claim] = {}
        self.gpus: dict[int, GpuState] = {}
        self._lock = threading.RLock()

    def used(self, gpu: int) -> float:
        with self._lock:
            return sum(c.bytes_per_gpu for c in self.claims.values() if gpu in c.gpus)

    def claim(self, owner: str, gpus: tuple[int, ...], bytes_per_gpu: float, total_bytes: float) -> None:
        with self._lock:
            self.claims.pop(owner, None)
            for gpu in gpus:
                free = total_bytes - self.used(gpu)
                if free < bytes_per_gpu:
                    raise GpuMemoryError(gpu, free, total_bytes)
            self.claims[owner] = _Claim(gpus, bytes_per_gpu, os.getpid())

    def update(self, owner: str, bytes_per_gpu: float) -> None:
        with self._lock:
            if owner in self.claims:
                self.claims[owner].bytes_per_gpu = bytes_per_gpu

    def release(self, owner: str) -> None:
        with self._lock:
            self.claims.pop(owner, None)

    def report(self, owner: str, activity: Activity) -> None:
        with self._lock:
            if owner in self.claims:
                self.claims[owner].activity = activity

    def record_xid(self, gpus: tuple[int, ...], code: int) -> None:
        """The driver logged Xid `code` on these GPUs (48 is a double-bit ECC error)."""
        with self._lock:
            for gpu in gpus:
                state = self.gpus.setdefault(gpu, GpuState())
                state.xid_last = code
                if code == 48:
                    state.ecc_dbe += 1

    def view(self) -> NodeView:
        with self._lock:
            return NodeView({o: _Claim(c.gpus, c.bytes_per_gpu, c.pid, c.activity) for o, c in self.claims.items()},
                            {g: GpuState(s.xid_last, s.ecc_dbe) for g, s in self.gpus.items()})


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FileLedger:
    """A ledger shared by processes through a JSON file under an exclusive lock; dead owners are pruned.

    A claim's pid is the process that holds the memory: when it is gone, the driver has freed it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def _load(self) -> MemoryLedger:
        ledger = MemoryLedger()
        try:
            raw = json.loads(self.path.read_text()) if self.path.exists() else {}
        except (OSError, ValueError):
            raw = {}
        if not isinstance(raw, dict):
            raw = {}
        claims = raw.get("claims", raw if "gpus" not in raw else {})  # a pre-"claims" file is all claims
        for owner, c in claims.items():
            try:
                act = c.get("activity")
                activity = Activity(*(float(v) for v in act)) if act else None
                claim = _Claim(tuple(int(g) for g in c["gpus"]), float(c["bytes"]), int(c["pid"]), activity)
            except (AttributeError, KeyError, TypeError, ValueError):
                continue
            if _pid_alive(claim.pid):
                ledger.claims[owner] = claim
        for gpu, st in (raw.get("gpus") or {}).items():
            try:
                ledger.gpus[int(gpu)] = GpuState(int(st["xid_last"]), int(st["ecc_dbe"]))
            except (KeyError, TypeError, ValueError):
                continue
        return ledger

    @contextmanager
    def _locked(self, write: bool = True) -> Iterator[MemoryLedger]:
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            ledger = self._load()
            yield ledger
            if not write:
                return
            claims = {o: {"gpus": list(c.gpus), "bytes": c.bytes_per_gpu, "pid": c.pid,
                          "activity": None if c.activity is None else
                          [c.activity.gpu_util, c.activity.dram_active, c.activity.tensor_active, c.activity.at]}
                      for o, c in ledger.claims.items()}
            gpus = {str(g): {"xid_last": st.xid_last, "ecc_dbe": st.ecc_dbe} for g, st in ledger.gpus.items()}
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"claims": claims, "gpus": gpus}))
            tmp.replace(self.path)

    def claim(self, owner: str, gpus: tuple[int, ...], bytes_per_gpu: float, total_bytes: float) -> None:
        with self._locked() as ledger:
            ledger.claim(owner, gpus, bytes_per_gpu, total_bytes)

    def update(self, owner: str, bytes_per_gpu: float) -> None:
        with self._locked() as ledger:
            ledger.update(owner, bytes_per_gpu)

    def release(self, owner: str) -> None:
        with self._locked() as ledger:
            ledger.release(owner)

    def used(self, gpu: int) -> float:
        with self._locked(write=False) as ledger:
            return ledger.used(gpu)

    def report(self, owner: str, activity: Activity) -> None:
        with self._locked() as ledger:
            ledger.report(owner, activity)

    def record_xid(self, gpus: tuple[int, ...], code: int) -> None:
        with self._locked() as ledger:
            ledger.record_xid(gpus, code)

    def view(self) -> NodeView:
        with self._locked(write=False) as ledger:
            return ledger.view()


def default_ledger_path() -> Path:
    """One simulated node per machine user: $TMPDIR/serving-doctor-sim/gpus.json."""
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"serving-doctor-sim-{os.getuid()}"
    return base / "gpus.json"


@dataclass(frozen=True)
class GpuReading:
    """What dcgm-exporter (or NVML) would say about one GPU."""

    index: int
    name: str
    uuid: str
    total_bytes: float
    used_bytes: float
    gpu_util: float  # 0..1
    dram_active: float  # 0..1
    tensor_active: float  # 0..1
    power_w: float
    temperature_c: float
    xid_last: int
    ecc_dbe_total: int


_DCGM_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
)


def _dcgm_value(name: str, r: GpuReading) -> str:
    values: dict[str, float] = {
        "DCGM_FI_DEV_SM_CLOCK": 1410 if r.gpu_util > 0 else 210,
        "DCGM_FI_DEV_MEM_CLOCK": 1593,
        "DCGM_FI_DEV_GPU_TEMP": round(r.temperature_c),
        "DCGM_FI_DEV_POWER_USAGE": round(r.power_w, 3),
        "DCGM_FI_DEV_GPU_UTIL": round(r.gpu_util * 100),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(r.dram_active * 100),
        "DCGM_FI_DEV_XID_ERRORS": r.xid_last,
        "DCGM_FI_DEV_FB_FREE": round((r.total_bytes - r.used_bytes) / MIB),
        "DCGM_FI_DEV_FB_USED": round(r.used_bytes / MIB),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": r.ecc_dbe_total,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(r.gpu_util, 6),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(r.tensor_active, 6),
        "DCGM_FI_PROF_DRAM_ACTIVE": round(r.dram_active, 6),
    }
    v = values[name]
    return str(int(v)) if float(v).is_integer() and not name.startswith("DCGM_FI_PROF") else repr(float(v))


def render_dcgm(readings: list[GpuReading], *, hostname: str = "sim-node",
                driver_version: str = "550.90.07") -> str:
    """dcgm-exporter's text exposition for the given GPUs."""
    lines: list[str] = []
    for name, kind, help_text in _DCGM_FAMILIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for r in readings:
            labels = (
                f'gpu="{r.index}",UUID="{r.uuid}",pci_bus_id="00000000:{r.index + 7:02X}:00.0",'
                f'device="nvidia{r.index}",modelName="{r.name}",Hostname="{hostname}",'
                f'DCGM_FI_DRIVER_VERSION="{driver_version}"'
            )
            lines.append(f"{name}{{{labels}}} {_dcgm_value(name, r)}")
    return "\n".join(lines) + "\n"


def gpu_uuid(index: int, seed: int = 0) -> str:
    """A stable fake UUID per simulated GPU."""
    h = f"{(index + 1) * 2654435761 + seed * 40503:032x}"[-32:]
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
