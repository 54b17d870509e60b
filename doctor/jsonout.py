"""Strict JSON out: what the doctor writes (reports, API bodies, journal and audit lines) is JSON that jq, Go and
JavaScript accept, so `NaN` and `Infinity` never appear; a non-finite float that slipped through becomes null."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN, ±Infinity) inside dicts, lists and tuples replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps with allow_nan=False; a structure holding a non-finite float is written with nulls instead."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:  # "Out of range float values are not JSON compliant"
        return json.dumps(finite(obj), allow_nan=False, **kwargs)
