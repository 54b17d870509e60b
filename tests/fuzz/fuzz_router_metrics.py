"""The router's /metrics as the doctor reads it: two scrapes and the router signals derived over them.
Contract: RouterSnapshot or RouterScrapeError; derivation never raises."""

from __future__ import annotations

from collectors.routersource import RouterScrapeError, derive_router_signals, parse_router_metrics


def fuzz_one(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        prev = parse_router_metrics(text, 1000.0)
        cur = parse_router_metrics(text, 1015.0)
    except RouterScrapeError:
        return
    for engine in (None, "hot"):
        derive_router_signals(None, cur, engine)
        derive_router_signals(prev, cur, engine)
