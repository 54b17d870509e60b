"""The python_* and process_* families of prometheus_client's default collectors (V1 servers only).

Inferred, not read: python_gc_* values are a deterministic function of the modelled CPU time.
"""

from __future__ import annotations

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from sim.stats import MetricsState


def runtime_families(s: MetricsState, python_version: tuple[int, int, int]) -> list[Metric]:
    """python_gc_*, python_info and process_* as prometheus_client's default collectors show them."""
    cpu = s.process.cpu_seconds
    gen = ("0", "1", "2")
    collected = CounterMetricFamily(
        "python_gc_objects_collected", "Objects collected during gc", labels=["generation"]
    )
    uncollectable = CounterMetricFamily(
        "python_gc_objects_uncollectable", "Uncollectable objects found during GC", labels=["generation"]
    )
    collections = CounterMetricFamily(
        "python_gc_collections", "Number of times this generation was collected", labels=["generation"]
    )
    for g, n_col, n_runs in zip(
        gen,
        (12000 + int(cpu * 900), 3000 + int(cpu * 120), 800 + int(cpu * 6)),
        (1500 + int(cpu * 40), 130 + int(cpu * 3), 9 + int(cpu * 0.2)),
        strict=True,
    ):
        collected.add_metric([g], float(n_col))
        uncollectable.add_metric([g], 0.0)
        collections.add_metric([g], float(n_runs))
    major, minor, patch = (str(v) for v in python_version)
    info = GaugeMetricFamily(
        "python_info",
        "Python platform information",
        labels=["implementation", "major", "minor", "patchlevel", "version"],
    )
    info.add_metric(["CPython", major, minor, patch, f"{major}.{minor}.{patch}"], 1.0)
    proc = s.process
    return [
        collected,
        uncollectable,
        collections,
        info,
        GaugeMetricFamily(
            "process_virtual_memory_bytes", "Virtual memory size in bytes.", value=proc.virtual_bytes
        ),
        GaugeMetricFamily(
            "process_resident_memory_bytes", "Resident memory size in bytes.", value=proc.resident_bytes
        ),
        GaugeMetricFamily(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            value=proc.start_time,
        ),
        CounterMetricFamily(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            value=proc.cpu_seconds,
        ),
        GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", value=float(proc.open_fds)),
        GaugeMetricFamily(
            "process_max_fds", "Maximum number of open file descriptors.", value=float(proc.max_fds)
        ),
    ]
