"""What the collectors learn of an engine's configuration, read from a real sim engine over HTTP."""

from __future__ import annotations

import asyncio

import httpx

from collectors.combine import EngineReading, config_of
from collectors.httpsource import read_engine
from collectors.types import EngineConfigView
from sim.testing import ALL_GRAPHED, engine_thread


def _read(url: str, config: EngineConfigView | None = None) -> EngineReading:
    async def go() -> EngineReading:
        reading = EngineReading("hot", "hot", url, config=config or EngineConfigView())
        async with httpx.AsyncClient() as client:
            reading.samples += await read_engine(client, "hot", url, timeout_s=10)
        return reading
    return asyncio.run(go())


def test_gpu_memory_utilization_comes_from_the_engine_when_the_config_does_not_say() -> None:
    argv = ["m", *ALL_GRAPHED, "--gpu-memory-utilization", "0.45", "--max-model-len", "8192"]
    with engine_thread(argv) as e:
        view = config_of(_read(e.url))
        assert view.gpu_memory_utilization == 0.45  # vllm:cache_config_info's label
        assert view.num_gpu_blocks is not None and view.max_model_len == 8192
        declared = config_of(_read(e.url, EngineConfigView(gpu_memory_utilization=0.5)))
        assert declared.gpu_memory_utilization == 0.5  # the operator's config wins
