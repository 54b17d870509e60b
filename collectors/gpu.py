"""GPU readings from NVML (local GPUs) or dcgm-exporter (over HTTP), and the GPU signals derived from them.

KV cache usage is never framebuffer use: vLLM reserves `gpu_memory_utilization` of the framebuffer at
start (weights, activations and the whole KV pool), so the framebuffer looks ~90% full on an idle engine.
KV usage comes from `vllm:kv_cache_usage_perc`; here framebuffer use serves `fb_used_ratio` and the
design's fragmentation, `memory_growth_ratio` (memory held beyond the post-warm-up footprint).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Xid classes after which the GPU (or the process on it) cannot go on; one line each.
FATAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error: uncorrectable DRAM error, the process using it is lost",
    63: "ECC page retirement / row remapping event: memory was retired, the GPU needs a reset to use it",
    64: "ECC page retirement / row remapping failure: the GPU must be reset (and maybe replaced)",
    74: "NVLink error: the link is down or flapping, multi-GPU jobs fail",
    79: "GPU has fallen off the bus: the GPU is gone until the node is rebooted",
    92: "high single-bit ECC error rate: DRAM degrading",
    94: "contained ECC error: the affected application must restart",
    95: "uncontained ECC error: every process on the GPU is lost, the GPU must be reset",
}

MIB = 1024**2


class GpuError(Exception):
    """A GPU source could not be read."""


class GpuUnavailable(GpuError):
    """No GPU to read here (no driver, no NVML library, no bindings); `reason` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class GpuReading:
    """One read of one GPU. Ratios are 0..1; a field the source cannot give is None (see `notes`)."""

    index: int
    uuid: str
    name: str
    fb_used_bytes: float
    fb_total_bytes: float
    dram_utilization: float | None
    sm_utilization: float | None
    temperature_c: float | None
    power_w: float | None
    xid_last: int | None  # last Xid code seen (0: none); None when the source cannot see Xids
    xid_count: int  # Xid events seen by this source since it started (cumulative)
    ecc_dbe_total: int | None  # double-bit (uncorrectable) volatile ECC errors since the driver loaded
    processes: tuple[tuple[int, float], ...] = ()  # (pid, framebuffer bytes) of compute processes
    source: str = "nvml"
    notes: tuple[str, ...] = ()


class GpuSource(Protocol):
    """Anything that reads GPUs: `read(None)` reads all, else the given indices."""

    def read(self, gpus: Sequence[int] | None = None) -> list[GpuReading]: ...


# ----- NVML -------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Local GPUs through NVML (`import pynvml`, provided by the nvidia-ml-py distribution).

    The module is loaded and `nvmlInit` called at the first read; if that fails the source is
    unavailable for good: every read raises GpuUnavailable with the same one-line reason, no retry.
    """

    def __init__(self, nvml_module: Any | None = None) -> None:
        self._nvml = nvml_module
        self._ready = False
        self.unavailable: str | None = None
        self._events: dict[int, Any] = {}  # gpu index -> event set (one set per GPU: no handle matching)
        self._event_notes: dict[int, str] = {}
        self._xid_last: dict[int, int] = {}
        self._xid_count: dict[int, int] = {}

    def _load(self) -> Any:
        if self.unavailable is not None:
            raise GpuUnavailable(self.unavailable)
        if self._ready:
            return self._nvml
        nvml: Any = self._nvml
        try:
            if nvml is None:
                with warnings.catch_warnings():  # the deprecated `pynvml` shim warns on import
                    warnings.filterwarnings("ignore", message=".*pynvml.*deprecated", category=FutureWarning)
                    import pynvml as nvml  # type: ignore[import-untyped,no-redef,unused-ignore]
            nvml.nvmlInit()
        except ImportError as exc:
            self.unavailable = f"NVML bindings not installed (pip install nvidia-ml-py): {exc}"
        except OSError as exc:
            self.unavailable = f"NVML library could not be loaded: {exc}"
        except Exception as exc:  # NVMLError and its subclasses
            self.unavailable = self._init_reason(nvml, exc)
        if self.unavailable is not None:
            raise GpuUnavailable(self.unavailable)
        self._nvml, self._ready = nvml, True
        return nvml

    @staticmethod
    def _init_reason(nvml: Any, exc: Exception) -> str:
        code = getattr(exc, "value", None)
        if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
            return "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this host"
        if code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
            return "NVIDIA driver not loaded"
        if code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return "no permission to use NVML (check /dev/nvidia* permissions)"
        return f"NVML could not start: {type(exc).__name__}: {exc}"

    def _events_for(self, nvml: Any, index: int, handle: Any) -> Any | None:
        if index in self._events or index in self._event_notes:
            return self._events.get(index)
        try:
            event_set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
        except Exception as exc:
            self._event_notes[index] = f"Xid events unavailable on GPU {index}: {exc}"
            return None
        self._events[index] = event_set
        self._xid_last[index] = 0
        self._xid_count[index] = 0
        return event_set

    def _drain_xids(self, nvml: Any, index: int, event_set: Any) -> str | None:
        """Collect pending Xid events without waiting (timeout 0)."""
        timeout_code = getattr(nvml, "NVML_ERROR_TIMEOUT", 10)
        for _ in range(10_000):
            try:
                data = nvml.nvmlEventSetWait(event_set, 0)
            except Exception as exc:
                if getattr(exc, "value", None) == timeout_code:
                    return None
                return f"Xid event poll failed on GPU {index}: {exc}"
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                self._xid_last[index] = int(data.eventData)
                self._xid_count[index] += 1
        return None

    def read(self, gpus: Sequence[int] | None = None) -> list[GpuReading]:
        nvml = self._load()
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            raise GpuError(f"NVML could not count GPUs: {exc}") from None
        indices = list(range(count)) if gpus is None else list(gpus)
        missing = [i for i in indices if not 0 <= i < count]
        if missing:
            have = f"GPUs 0-{count - 1}" if count else "no GPUs"
            raise GpuError(f"GPU index {missing[0]} not present: NVML sees {have}")
        return [self._read_one(nvml, i) for i in indices]

    def _read_one(self, nvml: Any, index: int) -> GpuReading:
        notes: list[str] = []
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as exc:
            raise GpuError(f"NVML could not read GPU {index}: {exc}") from None

        def opt(what: str, fn: Callable[[], Any]) -> Any | None:
            try:
                return fn()
            except Exception as exc:  # NotSupported, FunctionNotFound (old driver), NoPermission
                notes.append(f"{what} unavailable: {exc}")
                return None

        name = opt("name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
        uuid = opt("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
        util = opt("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        temp = opt("temperature", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        power_mw = opt("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        ecc = opt("ECC double-bit count", lambda: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC))
        procs_raw = opt("per-process memory", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        procs: list[tuple[int, float]] = []
        for p in procs_raw or ():
            used = getattr(p, "usedGpuMemory", None)
            if used is None:
                notes.append(f"pid {p.pid}: per-process memory not reported (MIG or no permission)")
                continue
            procs.append((int(p.pid), float(used)))
        event_set = self._events_for(nvml, index, handle)
        xid_last: int | None = None
        if event_set is not None:
            problem = self._drain_xids(nvml, index, event_set)
            if problem:
                notes.append(problem)
            xid_last = self._xid_last[index]
        else:
            notes.append(self._event_notes[index])
        return GpuReading(
            index=index, uuid=uuid or f"gpu{index}", name=name or "unknown",
            fb_used_bytes=float(mem.used), fb_total_bytes=float(mem.total),
            dram_utilization=None if util is None else float(util.memory) / 100.0,
            sm_utilization=None if util is None else float(util.gpu) / 100.0,
            temperature_c=None if temp is None else float(temp),
            power_w=None if power_mw is None else float(power_mw) / 1000.0,
            xid_last=xid_last, xid_count=self._xid_count.get(index, 0),
            ecc_dbe_total=None if ecc is None else int(ecc),
            processes=tuple(procs), source="nvml", notes=tuple(notes),
        )

    def close(self) -> None:
        """Free the event sets and shut NVML down (safe to call twice)."""
        if not self._ready or self._nvml is None:
            return
        for event_set in self._events.values():
            with contextlib.suppress(Exception):
                self._nvml.nvmlEventSetFree(event_set)
        self._events.clear()
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()
        self._ready = False


# ----- dcgm-exporter ----------------------------------------------------------------------------

HttpGet = Callable[[str], str]
_PROF_DRAM, _COPY_UTIL = "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_MEM_COPY_UTIL"
_SUMMED = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}  # MIG instances add up


def parse_dcgm(text: str) -> dict[str, dict[str, Any]]:
    """dcgm-exporter text -> {gpu index label: {"uuid", "name", metric family: value}}."""
    from collectors.promtext import families

    gpus: dict[str, dict[str, Any]] = {}
    try:
        for family in families(text):
            base = family.name  # the parser appends `_total` to counter samples; the family keeps DCGM's name
            if not base.startswith("DCGM_"):
                continue
            for s in family.samples:
                if "gpu" not in s.labels or math.isnan(s.value):
                    continue
                g = gpus.setdefault(s.labels["gpu"], {"uuid": s.labels.get("UUID", ""),
                                                      "name": s.labels.get("modelName", "")})
                if base in g and base in _SUMMED:
                    g[base] += s.value
                else:
                    g[base] = max(s.value, g.get(base, s.value))
    except ValueError as exc:
        raise GpuError(f"not dcgm-exporter text: {exc}") from None
    return gpus


class DcgmSource:
    """GPUs as a dcgm-exporter endpoint reports them (`http_get`: url -> text, or an httpx.Client)."""

    def __init__(self, url: str, http_get: HttpGet | Any, *, timeout_s: float = 5.0) -> None:
        self.url = url
        self._get = http_get
        self.timeout_s = timeout_s
        self._xid_last: dict[str, int] = {}
        self._xid_count: dict[str, int] = {}

    def _fetch(self) -> str:
        try:
            if callable(self._get) and not hasattr(self._get, "get"):
                return str(self._get(self.url))
            resp = self._get.get(self.url, timeout=self.timeout_s)
            resp.raise_for_status()
            return str(resp.text)
        except Exception as exc:
            raise GpuError(f"dcgm-exporter at {self.url} could not be read: {type(exc).__name__}: {exc}") from None

    def read(self, gpus: Sequence[int] | None = None) -> list[GpuReading]:
        parsed = parse_dcgm(self._fetch())
        if not parsed:
            raise GpuError(f"dcgm-exporter at {self.url} reported no GPUs (no DCGM_* series with a gpu label)")
        out: list[GpuReading] = []
        for label, g in sorted(parsed.items(), key=lambda kv: (int(kv[0]) if kv[0].isdigit() else 1 << 30, kv[0])):
            index = int(label) if label.isdigit() else -1
            if gpus is not None and index not in gpus:
                continue
            out.append(self._reading(index, g))
        if gpus is not None:
            missing = sorted(set(gpus) - {r.index for r in out})
            if missing:
                raise GpuError(f"GPU index {missing[0]} not reported by dcgm-exporter at {self.url}")
        return out

    def _reading(self, index: int, g: dict[str, Any]) -> GpuReading:
        notes: list[str] = []
        used = g.get("DCGM_FI_DEV_FB_USED")
        free = g.get("DCGM_FI_DEV_FB_FREE")
        if used is None or free is None:
            notes.append("DCGM_FI_DEV_FB_USED/FB_FREE absent: framebuffer unknown")
        used_b = float(used or 0.0) * MIB
        total_b = (float(used or 0.0) + float(free or 0.0) + float(g.get("DCGM_FI_DEV_FB_RESERVED", 0.0))) * MIB
        dram: float | None
        if _PROF_DRAM in g:
            dram = float(g[_PROF_DRAM])
        elif _COPY_UTIL in g:
            dram = float(g[_COPY_UTIL]) / 100.0
            notes.append(f"{_PROF_DRAM} absent (profiling metrics disabled); DRAM utilization from "
                         f"{_COPY_UTIL}, the memory-controller busy percentage (coarser)")
        else:
            dram = None
            notes.append(f"neither {_PROF_DRAM} nor {_COPY_UTIL} exported: DRAM utilization unknown")
        sm: float | None = None
        if "DCGM_FI_DEV_GPU_UTIL" in g:
            sm = float(g["DCGM_FI_DEV_GPU_UTIL"]) / 100.0
        elif "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in g:
            sm = float(g["DCGM_FI_PROF_GR_ENGINE_ACTIVE"])
        uuid = g["uuid"] or f"gpu{index}"
        xid_last: int | None = None
        if "DCGM_FI_DEV_XID_ERRORS" in g:
            xid_last = int(g["DCGM_FI_DEV_XID_ERRORS"])
            before = self._xid_last.get(uuid)
            if xid_last and xid_last != before:
                self._xid_count[uuid] = self._xid_count.get(uuid, 0) + 1
                if before is None:
                    notes.append(f"Xid {xid_last} was already the last Xid at the first read (it may be old)")
            self._xid_last[uuid] = xid_last
        else:
            notes.append("DCGM_FI_DEV_XID_ERRORS absent: Xid errors unknown")
        ecc = g.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
        if ecc is None:
            notes.append("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL absent (not in dcgm-exporter's default counters)")
        return GpuReading(
            index=index, uuid=uuid, name=g["name"] or "unknown", fb_used_bytes=used_b, fb_total_bytes=total_b,
            dram_utilization=dram, sm_utilization=sm,
            temperature_c=_opt(g.get("DCGM_FI_DEV_GPU_TEMP")), power_w=_opt(g.get("DCGM_FI_DEV_POWER_USAGE")),
            xid_last=xid_last, xid_count=self._xid_count.get(uuid, 0),
            ecc_dbe_total=None if ecc is None else int(ecc), processes=(), source="dcgm", notes=tuple(notes),
        )


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


# ----- signals ----------------------------------------------------------------------------------

GPU_SIGNALS = ("dram_utilization", "fb_used_ratio", "memory_growth_ratio", "sm_utilization", "xid_errors",
               "xid_last_code", "ecc_dbe_errors")


def engine_fb_bytes(readings: Sequence[GpuReading], pids: Collection[int] | None = None) -> float:
    """Framebuffer an engine holds over its GPUs: its processes' memory when NVML gives it, else GPU use.

    With `pids`, only those processes count; without, every compute process on the engine's GPUs.
    Record the post-warm-up baseline with this same function.
    """
    total = 0.0
    for r in readings:
        procs = [b for pid, b in r.processes if pids is None or pid in pids]
        total += sum(procs) if r.processes else r.fb_used_bytes
    return total


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def gpu_signals(readings: Sequence[GpuReading], *, baseline_fb_bytes: float | None,
                previous_xid_count: int | None = None,
                pids: Collection[int] | None = None) -> tuple[dict[str, float | None], dict[str, str]]:
    """The engine's GPU signals from one read of its GPUs, and a reason for each None or caveat."""
    values: dict[str, float | None] = dict.fromkeys(GPU_SIGNALS)
    reasons: dict[str, str] = {}
    if not readings:
        return values, dict.fromkeys(GPU_SIGNALS, "no GPU readings for this engine")
    notes = "; ".join(dict.fromkeys(n for r in readings for n in r.notes))

    dram = [r.dram_utilization for r in readings if r.dram_utilization is not None]
    values["dram_utilization"] = _mean(dram)
    if not dram or any("DRAM" in n for r in readings for n in r.notes):
        reasons["dram_utilization"] = notes or "DRAM utilization not reported"
    sm = [r.sm_utilization for r in readings if r.sm_utilization is not None]
    values["sm_utilization"] = _mean(sm)
    if not sm:
        reasons["sm_utilization"] = "SM utilization not reported"

    ratios = [r.fb_used_bytes / r.fb_total_bytes for r in readings if r.fb_total_bytes > 0]
    values["fb_used_ratio"] = max(ratios) if ratios else None
    if not ratios:
        reasons["fb_used_ratio"] = "framebuffer total unknown"

    used = engine_fb_bytes(readings, pids)
    if baseline_fb_bytes is None:
        reasons["memory_growth_ratio"] = "no post-warm-up footprint recorded yet (baseline comes after warm-up)"
    elif baseline_fb_bytes <= 0:
        reasons["memory_growth_ratio"] = f"baseline footprint {baseline_fb_bytes} bytes is not positive"
    else:
        growth = (used - baseline_fb_bytes) / baseline_fb_bytes
        values["memory_growth_ratio"] = max(0.0, growth)
        if growth < 0:
            reasons["memory_growth_ratio"] = (f"engine holds {-growth:.0%} less than its post-warm-up footprint "
                                              "(sleeping, restarted or dead)")

    seen = [r for r in readings if r.xid_last is not None]
    if not seen:
        reasons["xid_errors"] = reasons["xid_last_code"] = notes or "Xid errors not visible from this source"
    else:
        total = sum(r.xid_count for r in seen)
        if previous_xid_count is not None and total >= previous_xid_count:
            total -= previous_xid_count
        values["xid_errors"] = float(total)
        codes = [r.xid_last for r in seen if r.xid_last]
        fatal = [c for c in codes if c in FATAL_XIDS]
        last = (fatal or codes or [0])[-1]
        values["xid_last_code"] = float(last)
        if last in FATAL_XIDS:
            reasons["xid_last_code"] = f"Xid {last}: {FATAL_XIDS[last]}"
        if any(r.source == "dcgm" for r in seen):
            reasons["xid_errors"] = "counted from changes of dcgm-exporter's last-Xid gauge (a repeat is missed)"

    ecc = [r.ecc_dbe_total for r in readings if r.ecc_dbe_total is not None]
    values["ecc_dbe_errors"] = float(sum(ecc)) if ecc else None
    if not ecc:
        reasons["ecc_dbe_errors"] = "ECC double-bit count not reported (ECC off or counter not exported)"
    return values, reasons


class GpuReader:
    """Reads a source and says "no GPU: <reason>" once (through `say`) when there is none; never raises."""

    def __init__(self, source: GpuSource, say: Callable[[str], None]) -> None:
        self.source = source
        self._say = say
        self._said: set[str] = set()

    def read(self, gpus: Sequence[int] | None = None) -> tuple[list[GpuReading], str | None]:
        """Readings and None, or [] and the reason there are none."""
        try:
            return self.source.read(gpus), None
        except GpuUnavailable as exc:
            reason = f"no GPU: {exc.reason}"
        except GpuError as exc:
            reason = str(exc)
        if reason not in self._said:
            self._said.add(reason)
            self._say(reason)
        return [], reason
