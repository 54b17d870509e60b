"""GPU collector: NVML through a fake pynvml (no GPU here), dcgm-exporter fixtures and the sim's dcgm port."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from collectors.gpu import (
    FATAL_XIDS,
    DcgmSource,
    GpuError,
    GpuReader,
    GpuReading,
    GpuUnavailable,
    NvmlSource,
    engine_fb_bytes,
    gpu_signals,
    parse_dcgm,
)
from sim.harness import Harness
from sim.testing import ALL_GRAPHED, engine_thread

FIXTURES = Path(__file__).parent / "fixtures"
GIB, MIB = 1024**3, 1024**2


# ----- a fake pynvml: the functions NvmlSource calls, with pynvml's names, units and error codes -----


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found",
                13: "Function Not Found"}.get(self.value, f"error {self.value}")


class FakeGpu:
    def __init__(self, *, used: int = 70 * GIB, total: int = 80 * GIB, gpu: int = 85, memory: int = 62,
                 temp: int = 61, power_mw: int = 402_500, ecc: int | Exception = 0,
                 procs: list[tuple[int, int | None]] | None = None, events: bool = True) -> None:
        self.used, self.total, self.gpu, self.memory = used, total, gpu, memory
        self.temp, self.power_mw, self.ecc = temp, power_mw, ecc
        self.procs = procs if procs is not None else [(4242, 68 * GIB)]
        self.events_supported = events
        self.pending: list[int] = []  # Xid codes waiting in the event set


class FakeNvml:
    """The subset of pynvml (nvidia-ml-py) that NvmlSource uses."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0
        self.shutdown_calls = 0
        self.freed: list[Any] = []

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> bytes:
        return f"GPU-{self.gpus.index(h):08d}".encode()  # older bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(total=h.total, used=h.used, free=h.total - h.used)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=h.gpu, memory=h.memory)

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return h.temp

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return h.power_mw

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, self.NVML_VOLATILE_ECC)
        if isinstance(h.ecc, Exception):
            raise h.ecc
        return h.ecc

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in h.procs]

    def nvmlEventSetCreate(self) -> dict[str, Any]:
        return {"gpus": []}

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, event_set: dict[str, Any]) -> None:
        if not h.events_supported:
            raise FakeNVMLError(3)
        assert types == self.nvmlEventTypeXidCriticalError
        event_set["gpus"].append(h)

    def nvmlEventSetWait(self, event_set: dict[str, Any], timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0
        for h in event_set["gpus"]:
            if h.pending:
                return SimpleNamespace(device=h, eventType=self.nvmlEventTypeXidCriticalError,
                                       eventData=h.pending.pop(0), gpuInstanceId=0, computeInstanceId=0)
        raise FakeNVMLError(self.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.freed.append(event_set)


# ----- NVML -------------------------------------------------------------------------------------


def test_nvml_reads_every_field_in_si() -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu(used=10 * GIB, gpu=5, memory=3, procs=[])])
    src = NvmlSource(fake)
    r0, r1 = src.read(None)
    assert (r0.index, r0.uuid, r0.name) == (0, "GPU-00000000", "NVIDIA H100 80GB HBM3")
    assert (r0.fb_used_bytes, r0.fb_total_bytes) == (70 * GIB, 80 * GIB)
    assert r0.dram_utilization == pytest.approx(0.62)  # memory-controller utilization
    assert r0.sm_utilization == pytest.approx(0.85)
    assert r0.power_w == pytest.approx(402.5)  # NVML gives milliwatts
    assert r0.temperature_c == 61
    assert r0.processes == ((4242, 68 * GIB),)
    assert (r0.xid_last, r0.xid_count, r0.ecc_dbe_total) == (0, 0, 0)
    assert r0.notes == () and r0.source == "nvml"
    assert r1.processes == () and r1.sm_utilization == pytest.approx(0.05)
    assert [r.index for r in src.read([1])] == [1]
    src.close()
    assert fake.shutdown_calls == 1 and len(fake.freed) == 2


def test_nvml_xid_events_are_polled_without_waiting() -> None:
    gpu = FakeGpu()
    src = NvmlSource(FakeNvml([gpu]))
    assert src.read()[0].xid_count == 0  # the first read registers for Xid events
    gpu.pending += [13, 79]
    r = src.read()[0]
    assert (r.xid_last, r.xid_count) == (79, 2)
    values, reasons = gpu_signals([r], baseline_fb_bytes=None, previous_xid_count=0)
    assert values["xid_errors"] == 2 and values["xid_last_code"] == 79
    assert "fallen off the bus" in reasons["xid_last_code"]
    again = src.read()[0]
    assert (again.xid_last, again.xid_count) == (79, 2)
    assert gpu_signals([again], baseline_fb_bytes=None, previous_xid_count=2)[0]["xid_errors"] == 0


def test_nvml_unsupported_fields_are_none_with_a_note() -> None:
    gpu = FakeGpu(ecc=FakeNVMLError(3), procs=[(7, None)], events=False)
    r = NvmlSource(FakeNvml([gpu])).read()[0]
    assert r.ecc_dbe_total is None and r.xid_last is None and r.processes == ()
    text = " | ".join(r.notes)
    assert "ECC double-bit count unavailable: Not Supported" in text
    assert "Xid events unavailable on GPU 0" in text and "pid 7" in text
    values, reasons = gpu_signals([r], baseline_fb_bytes=70 * GIB)
    assert values["ecc_dbe_errors"] is None and "ECC" in reasons["ecc_dbe_errors"]
    assert values["xid_errors"] is None and "Xid events unavailable" in reasons["xid_errors"]


def test_nvml_bad_index_is_a_clear_error() -> None:
    with pytest.raises(GpuError, match="GPU index 3 not present: NVML sees GPUs 0-1"):
        NvmlSource(FakeNvml([FakeGpu(), FakeGpu()])).read([3])


def test_nvml_driver_not_loaded_is_said_once_and_init_not_retried() -> None:
    fake = FakeNvml([], init_error=9)
    said: list[str] = []
    reader = GpuReader(NvmlSource(fake), said.append)
    assert reader.read() == ([], "no GPU: NVIDIA driver not loaded")
    assert reader.read() == ([], "no GPU: NVIDIA driver not loaded")
    assert said == ["no GPU: NVIDIA driver not loaded"] and fake.init_calls == 1


def test_nvml_bindings_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(GpuUnavailable, match="nvidia-ml-py"):
        NvmlSource().read()


def test_real_pynvml_on_this_machine_says_no_gpu() -> None:
    """nvidia-ml-py is installed but there is no driver here: a one-line reason, not a traceback."""
    src = NvmlSource()
    try:
        readings = src.read()
    except GpuUnavailable as exc:
        assert "\n" not in exc.reason
        assert "libnvidia-ml.so.1" in exc.reason or "driver" in exc.reason
        with pytest.raises(GpuUnavailable) as again:
            src.read()
        assert again.value.reason == exc.reason
    else:  # a machine with a GPU runs this suite: the real read must then work
        assert readings and all(r.fb_total_bytes > 0 for r in readings)
        src.close()


# ----- dcgm-exporter fixtures -------------------------------------------------------------------


def test_dcgm_fixture_with_profiling_metrics() -> None:
    text = (FIXTURES / "dcgm_dcp.txt").read_text()
    src = DcgmSource("http://gpu-node-07:9400/metrics", lambda url: text)
    r0, r1 = src.read()
    assert (r0.index, r0.uuid, r0.name) == (0, "GPU-5a1c2e3f-8b9d-4e6f-a0b1-c2d3e4f5a6b7", "NVIDIA H100 80GB HBM3")
    assert r0.fb_used_bytes == 74137 * MIB
    assert r0.fb_total_bytes == (74137 + 7016 + 406) * MIB  # used + free + reserved
    assert r0.dram_utilization == pytest.approx(0.702514)  # DCGM_FI_PROF_DRAM_ACTIVE, not MEM_COPY_UTIL
    assert r0.sm_utilization == pytest.approx(0.97)
    assert (r0.power_w, r0.temperature_c) == (pytest.approx(512.337), 63)
    assert (r0.xid_last, r0.xid_count, r0.ecc_dbe_total) == (0, 0, 0)
    assert not any("DRAM" in n for n in r0.notes)
    assert (r1.xid_last, r1.xid_count, r1.ecc_dbe_total) == (94, 1, 1)
    assert any("already the last Xid" in n for n in r1.notes)
    values, reasons = gpu_signals([r0, r1], baseline_fb_bytes=None)
    assert values["dram_utilization"] == pytest.approx(0.702514 / 2)
    assert values["fb_used_ratio"] == pytest.approx(74137 / 81559)
    assert values["xid_last_code"] == 94 and "contained ECC error" in reasons["xid_last_code"]
    assert values["ecc_dbe_errors"] == 1
    assert values["memory_growth_ratio"] is None and "warm-up" in reasons["memory_growth_ratio"]
    # The gauge stays at 94: a second read is not a second Xid.
    assert src.read([1])[0].xid_count == 1


def test_dcgm_fixture_without_profiling_metrics_falls_back() -> None:
    text = (FIXTURES / "dcgm_default.txt").read_text()
    readings = DcgmSource("http://a100-node-3:9400/metrics", lambda url: text).read()
    assert [r.index for r in readings] == [0, 1]
    r0 = readings[0]
    assert r0.dram_utilization == pytest.approx(0.43)  # DCGM_FI_DEV_MEM_COPY_UTIL / 100
    assert any("DCGM_FI_PROF_DRAM_ACTIVE absent" in n for n in r0.notes)
    assert r0.fb_total_bytes == 80 * GIB and r0.ecc_dbe_total is None
    values, reasons = gpu_signals(readings, baseline_fb_bytes=None)
    assert values["dram_utilization"] == pytest.approx((0.43 + 0.40) / 2)
    assert "DCGM_FI_DEV_MEM_COPY_UTIL" in reasons["dram_utilization"]
    assert values["xid_errors"] == 0 and values["ecc_dbe_errors"] is None


def test_dcgm_bad_input_is_a_clear_error() -> None:
    with pytest.raises(GpuError, match="no GPUs"):
        DcgmSource("http://x/metrics", lambda url: "# nothing here\n").read()
    with pytest.raises(GpuError, match="not dcgm-exporter text"):
        parse_dcgm('DCGM_FI_DEV_FB_USED{gpu="0" 12\n')

    def down(url: str) -> str:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(GpuError, match="could not be read: ConnectError"):
        DcgmSource("http://x/metrics", down).read()
    text = (FIXTURES / "dcgm_default.txt").read_text()
    with pytest.raises(GpuError, match="GPU index 5 not reported"):
        DcgmSource("http://x/metrics", lambda url: text).read([5])


# ----- dcgm-exporter over HTTP: the sim's dcgm port ---------------------------------------------


def _complete_in_background(url: str, n: int) -> threading.Thread:
    def run() -> None:
        with httpx.Client(timeout=30) as client:
            threads = [threading.Thread(target=client.post, args=(url + "/v1/completions",),
                                        kwargs={"json": {"model": "m", "prompt": "hello " * 200, "max_tokens": 60,
                                                         "ignore_eos": True}}) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_dcgm_source_against_the_sim() -> None:
    with engine_thread(["m", "--dcgm-port", "0", *ALL_GRAPHED, "--sim-fault-endpoint"]) as eng:
        assert eng.handle is not None and eng.handle.dcgm_port
        with httpx.Client() as client:
            src = DcgmSource(f"http://127.0.0.1:{eng.handle.dcgm_port}/metrics", client)
            idle = src.read()
            assert len(idle) == 1
            assert idle[0].fb_used_bytes == pytest.approx(0.92 * 80 * GIB, abs=MIB)  # default profile: 0.92
            assert idle[0].fb_total_bytes == 80 * GIB
            assert idle[0].dram_utilization == 0.0 and idle[0].xid_last == 0
            baseline = engine_fb_bytes(idle)

            load = _complete_in_background(eng.url, 4)
            peak = 0.0
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and load.is_alive() and peak < 0.2:
                peak = max(peak, src.read()[0].dram_utilization or 0.0)
                time.sleep(0.05)
            load.join(30)
            assert peak > 0.05, "DRAM active should rise while completions run"

            values, _ = gpu_signals(src.read(), baseline_fb_bytes=baseline)
            assert values["memory_growth_ratio"] == pytest.approx(0.0, abs=1e-4)

            resp = client.post(eng.url + "/sim/fault", json={"fault": "xid:79"})
            assert resp.status_code == 200
            after = src.read()[0]  # the exporter keeps serving after the engine died
            assert (after.xid_last, after.xid_count) == (79, 1)
            assert after.fb_used_bytes == 0.0  # the dead engine released its memory
            assert client.get(eng.url + "/health").status_code != 200
            values, reasons = gpu_signals([after], baseline_fb_bytes=baseline, previous_xid_count=0)
            assert values["xid_errors"] == 1 and values["xid_last_code"] == 79
            assert values["memory_growth_ratio"] == 0.0 and "less than" in reasons["memory_growth_ratio"]


def test_memory_growth_from_the_sim_fragmentation_fault_in_virtual_time() -> None:
    h = Harness()
    h.add_engine("hot", ["m", "--fault", "fragmentation:0.3"])
    src = DcgmSource("harness://hot", lambda url: h.gpu_text("hot"))
    baseline = engine_fb_bytes(src.read())
    h.run_for(600)
    values, reasons = gpu_signals(src.read(), baseline_fb_bytes=baseline)
    assert values["memory_growth_ratio"] == pytest.approx(0.3 * 600 / 3600, abs=1e-4)
    assert "memory_growth_ratio" not in reasons


# ----- gpu_signals ------------------------------------------------------------------------------


def _reading(index: int = 0, **kw: Any) -> GpuReading:
    base: dict[str, Any] = dict(index=index, uuid=f"GPU-{index}", name="x", fb_used_bytes=60 * GIB,
                                fb_total_bytes=80 * GIB, dram_utilization=0.5, sm_utilization=0.9,
                                temperature_c=60.0, power_w=300.0, xid_last=0, xid_count=0, ecc_dbe_total=0)
    base.update(kw)
    return GpuReading(**base)


def test_gpu_signals_aggregate_over_the_engine_gpus() -> None:
    rs = [_reading(0, dram_utilization=0.2, fb_used_bytes=40 * GIB),
          _reading(1, dram_utilization=0.6, fb_used_bytes=72 * GIB, ecc_dbe_total=2)]
    values, reasons = gpu_signals(rs, baseline_fb_bytes=100 * GIB)
    assert values["dram_utilization"] == pytest.approx(0.4)  # mean
    assert values["fb_used_ratio"] == pytest.approx(0.9)  # max
    assert values["memory_growth_ratio"] == pytest.approx(0.12)  # (112 - 100) / 100
    assert values["ecc_dbe_errors"] == 2 and values["xid_last_code"] == 0
    assert reasons == {}


def test_memory_growth_prefers_per_process_memory() -> None:
    r = _reading(fb_used_bytes=79 * GIB, processes=((10, 66 * GIB), (11, 2 * GIB)))
    assert engine_fb_bytes([r]) == 68 * GIB
    assert engine_fb_bytes([r], pids={10}) == 66 * GIB
    values, _ = gpu_signals([r], baseline_fb_bytes=60 * GIB, pids={10})
    assert values["memory_growth_ratio"] == pytest.approx(0.1)


def test_gpu_signals_without_readings_say_why() -> None:
    values, reasons = gpu_signals([], baseline_fb_bytes=None)
    assert all(v is None for v in values.values())
    assert set(reasons) == set(values)


def test_fatal_xid_table() -> None:
    assert set(FATAL_XIDS) == {48, 63, 64, 74, 79, 92, 94, 95}
    assert all(FATAL_XIDS[c] and "\n" not in FATAL_XIDS[c] for c in FATAL_XIDS)
