"""Log lines in the exact format of each vLLM release (see reference section 2).

`LogFormatter` turns engine events into complete log lines (no trailing newline) for one
`VersionProfile`. It never reads the clock: every method takes the event time `now` (unix
seconds), rendered in UTC with `time.gmtime`, so the output is deterministic.

This module is the public entry (import everything from here) and holds the periodic stats and
sleep/wake lines; the rest is split by concern:

* `sim.logfmt_lines`: process prefix, logger header, raw/uvicorn/access lines (`LineFormatter`)
* `sim.logfmt_tags`: the file:line tag tables per release
* `sim.logfmt_startup`: `StartupInfo` and the start-up sequence (`StartupLines`)
* `sim.logfmt_faults`: engine death, OOM, start-up failure and other failure output (`FaultLines`)
"""

from __future__ import annotations

from sim.logfmt_faults import GIB, FaultLines, torch_format_size, torch_oom_message
from sim.logfmt_lines import ANSI_END, ANSI_START, API, CORE, WORKER
from sim.logfmt_startup import StartupInfo, StartupLines

__all__ = [
    "ANSI_END",
    "ANSI_START",
    "API",
    "CORE",
    "GIB",
    "WORKER",
    "LogFormatter",
    "StartupInfo",
    "is_zero_interval",
    "should_log_stats",
    "torch_format_size",
    "torch_oom_message",
]


def is_zero_interval(prompt_tps: float, gen_tps: float) -> bool:
    """True when an interval had no prompt and no generation throughput."""
    return prompt_tps == 0 and gen_tps == 0


def should_log_stats(prev_zero: bool, this_zero: bool) -> bool:
    """Whether the periodic stats line shows at INFO (vLLM's idle suppression).

    vLLM (V0 metrics.py and V1 loggers.py alike) logs the line at DEBUG when this interval's and
    the previous interval's prompt and generation throughputs are all zero, so an idle engine
    prints nothing at the default INFO level. Missing lines do not mean a dead engine. Pass
    `is_zero_interval(...)` of the previous and of this interval.
    """
    return not (prev_zero and this_zero)


class LogFormatter(StartupLines, FaultLines):
    """Formats sim events as the log lines of one vLLM release."""

    # --- periodic stats --------------------------------------------------------------------------
    def stats(
        self,
        now: float,
        *,
        prompt_tps: float,
        gen_tps: float,
        running: int,
        waiting: int,
        kv_usage: float,
        prefix_hit_rate: float | None,
        preemptions_in_interval: int,
        swapped: int = 0,
        cpu_kv_usage: float = 0.0,
        deferred: int = 0,
        device: str = "GPU",
    ) -> list[str]:
        """The periodic stats line(s) in this release's format (always at INFO).

        Use `should_log_stats` to decide whether it shows at all. Ratios are 0..1. On 0.20+
        `waiting` should already include deferred requests, as vLLM counts them.
        """
        p = self.profile
        if p.stats_line == "v0":
            msg = (
                f"Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: {gen_tps:.1f} "
                f"tokens/s, Running: {running} reqs, Swapped: {swapped} reqs, Pending: {waiting} reqs, "
                "GPU KV "
                f"cache usage: {kv_usage * 100:.1f}%, CPU KV cache usage: {cpu_kv_usage * 100:.1f}%."
            )
            out = self.emit(now, msg, where=CORE, tag="stats")
            if prefix_hit_rate is not None:
                out += self.emit(
                    now,
                    f"Prefix cache hit rate: GPU: {prefix_hit_rate * 100:.2f}%, CPU: 0.00%",
                    where=CORE,
                    tag="prefix_v0",
                )
            return out
        head = (
            f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, "
            f"Avg generation throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, "
            f"Waiting: {waiting} reqs"
        )
        if p.stats_line == "v1_fixed":
            hit = (prefix_hit_rate or 0.0) * 100
            msg = f"{head}, GPU KV cache usage: {kv_usage * 100:.1f}%, Prefix cache hit rate: {hit:.1f}%"
            return self.emit(now, msg, tag="stats")
        parts = [head]
        if p.waiting_by_reason and deferred > 0:  # 0.20+
            parts.append(f"Deferred: {deferred} reqs")
        if preemptions_in_interval > 0:
            parts.append(f"Preemptions: {preemptions_in_interval}")
        word = device if p.kv_size_line == "v1_one_line" else "GPU"
        parts.append(f"{word} KV cache usage: {kv_usage * 100:.1f}%")
        if prefix_hit_rate is not None or not p.prefix_hit_only_with_queries:
            parts.append(f"Prefix cache hit rate: {(prefix_hit_rate or 0.0) * 100:.1f}%")
        return self.emit(now, ", ".join(parts), tag="stats")

    # --- sleep mode -------------------------------------------------------------------------------
    def sleep(
        self, now: float, level: int, freed_gib: float, *, still_in_use_gib: float = 1.5, seconds: float = 2.5
    ) -> list[str]:
        """Sleep mode (POST /sleep): worker's freed line then executor's timing. [] on 0.6 (none).

        `level` does not change the text (it only decides what is offloaded).
        """
        del level
        if self.profile.name == "0.6":
            return []
        out = self.emit(
            now,
            f"Sleep mode freed {freed_gib:.2f} GiB memory, {still_in_use_gib:.2f} GiB memory "
            "is still in use.",
            where=CORE,
            tag="sleep_freed",
        )
        out += self.emit(now, f"It took {seconds:.6f} seconds to fall asleep.", where=CORE, tag="sleep_took")
        return out

    def wake_up(self, now: float, *, seconds: float = 1.2, tags: list[str] | None = None) -> list[str]:
        """Wake up (POST /wake_up); `tags=None` prints the default sleeping tags. [] on 0.6."""
        if self.profile.name == "0.6":
            return []
        shown = repr(tags) if tags is not None else "{'weights', 'kv_cache'}"
        return self.emit(
            now, f"It took {seconds:.6f} seconds to wake up tags {shown}.", where=CORE, tag="wake_took"
        )
