"""dcgm-exporter's /metrics as the doctor reads an engine's GPUs: parse, read (Xid, ECC, framebuffer) twice and
derive the GPU signals. Contract: GpuReading list or GpuError; the signals are finite or None."""

from __future__ import annotations

import math

from collectors.gpu import DcgmSource, GpuError, gpu_signals


def fuzz_one(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    source = DcgmSource("http://dcgm:9400/metrics", lambda url: text)
    count = None
    for _ in range(2):
        try:
            readings = source.read()
        except GpuError:
            return
        values, _ = gpu_signals(readings, baseline_fb_bytes=1e9, previous_xid_count=count)
        for name, value in values.items():
            assert value is None or math.isfinite(value), (name, value)
        count = sum(r.xid_count for r in readings)
