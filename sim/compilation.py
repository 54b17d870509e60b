"""`-O` / `--compilation-config` of `vllm serve`, reduced to what the sim models (sim.startup)."""

from __future__ import annotations

import json
from typing import Any


def parse_compilation_config(raw: str | None) -> dict[str, Any]:
    """EngineConfig fields from `-O3`, `-O 0`, `-O.level=0` style or a JSON dict; ValueError when unreadable.

    Modelled keys: `level` (`mode` in 0.11+; 0 = no torch.compile and, on V1, no CUDA graphs),
    `cudagraph_mode` ("NONE" = no graphs), `cudagraph_capture_sizes` and `max_cudagraph_capture_size` (0.12+ in
    vLLM; the sim honours it on every V1 profile); other keys are accepted and ignored.
    """
    if raw is None:
        return {}
    text = raw.strip()
    if text.isdigit():
        return {"compilation_level": int(text)}
    if text.startswith((".level=", ".mode=")):
        return {"compilation_level": int(text.split("=", 1)[1])}
    try:
        cfg = json.loads(text)
    except ValueError:
        raise ValueError(f"invalid compilation config {raw!r}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"invalid compilation config {raw!r}")
    out: dict[str, Any] = {}
    level = cfg.get("level", cfg.get("mode"))
    if level is not None:
        out["compilation_level"] = int(level)
    mode = cfg.get("cudagraph_mode")
    if mode is not None:
        out["cudagraph_mode"] = str(mode).upper()
    top = cfg.get("max_cudagraph_capture_size")
    if top is not None:
        if not isinstance(top, int) or top < 1:
            raise ValueError("max_cudagraph_capture_size must be a positive integer")
        out["max_cudagraph_capture_size"] = top
    sizes = cfg.get("cudagraph_capture_sizes")
    if sizes is not None:
        if not isinstance(sizes, list) or not all(isinstance(x, int) and x > 0 for x in sizes):
            raise ValueError("cudagraph_capture_sizes must be a list of positive integers")
        out["cudagraph_capture_sizes"] = tuple(sizes)
    return out
