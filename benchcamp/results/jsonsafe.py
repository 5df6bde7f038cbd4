"""JSON-compliant values, the one rule for everything benchcamp hands on as JSON: results files (summary.json,
campaign.json, verdicts.json), what a step returns to its caller (Airflow XCom, `benchcamp run`'s table),
MLflow's JSON artifacts, `dvc metrics`' files.

A float that is not finite (NaN, +-inf) becomes ``null``: the figure was not measured or is undefined, e.g.
``cache_hit_rate_server.engine<N>`` of a data-parallel engine that served no request in the window (0 hits of
0 queries), or a latency percentile of a point with no completed request. JSON has no NaN; Python's json writes
one that strict readers (browsers, jq, Airflow's XCom over the execution API: "Out of range float values are
not JSON compliant") refuse, so a valid measurement would be lost to serialization. Keys become strings and
values JSON cannot hold (paths, enums, datetimes) their ``str``. MLflow metrics take numbers only: a
non-finite one is not logged (benchcamp.tracking.log.numeric_metrics), the run's summary.json keeps the null.
"""

from __future__ import annotations

import json
import math
from typing import Any


def strict_json(data: Any) -> Any:
    """``data`` with NaN/inf as None, keys as str and non-JSON values as str: ``json.dumps(allow_nan=False)``
    accepts the result."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {str(k): strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    if data is None or isinstance(data, (str, int, bool)):
        return data
    if hasattr(data, "item") and callable(data.item):  # a numpy scalar (np.float64 is a float: above)
        return strict_json(data.item())
    return str(data)


def dumps(data: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` of :func:`strict_json` ``(data)``: never a NaN in the text."""
    return json.dumps(strict_json(data), allow_nan=False, **kwargs)
