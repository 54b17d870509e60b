"""The deployment the TUI's tests attach to, once for the session: two sim engines behind the real router, half
the requests 9000-token documents sent through the router (the route threshold keeps them on the hot path), and
`doctor serve` in approve mode with the long-prompt condition seeded as held, so its finding fires on the first
cycles and its remedy (the emergency length limit) waits for a person."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve.stack import daemon_for, engines, load, router, seed_for_state, write_config
from tests.tui.deployment import Deployment


@pytest.fixture(scope="session")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = Path(tmp_path_factory.mktemp("tui"))
    with engines(["hot", "cold"], tmp) as eng, router(eng["hot"].url, eng["cold"].url) as r:
        config = write_config(tmp, hot=eng["hot"].url, cold=eng["cold"].url, router_url=r.url, mode="approve",
                              interval_s=1.0, doctor_extra='sample_s = "0.5s"')
        # a second of cooldown: after a rollback the doctor asks again at once (the tests decide more than once)
        config.write_text(config.read_text().replace('cooldown_s = "15m"', 'cooldown_s = "1s"'))
        seed_for_state(tmp / "state", "long_prompt_share|hot", held_s=100)
        traffic = load(r.url)
        daemon = daemon_for(config, tmp)
        try:
            daemon.start()
            yield Deployment(daemon, tmp / "state", r.url, tmp, eng["hot"].url, eng["cold"].url)
        finally:
            traffic.stop()
            daemon.stop()
