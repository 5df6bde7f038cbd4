"""The guard's old rule, kept to measure the new one against: a night judged by benchcamp.verdicts.compare
against the mean and spread of the last ``baselines.history_runs`` (5) nights (prediction band, relative
threshold 5%), without per-request samples (a night's samples say nothing about run-to-run noise)."""

from __future__ import annotations

import numpy as np

from benchcamp.config import Regression
from benchcamp.verdicts.compare import compare

OLD_HISTORY = 5  # config.Baselines.history_runs' default
OLD_RULE = Regression(relative_threshold=0.05, confidence=0.95)
KEY = {"workload_digest": "w", "model": "m", "gpu": "g", "gpu_count": 1, "engine_kind": "vllm"}


def old_status(metric: str, x: np.ndarray) -> str:
    """The old rule's verdict on the last night of ``x`` (a metric's nightly figures, oldest first)."""
    hist = x[:-1][-OLD_HISTORY:][::-1]
    if len(hist) == 0:
        return "unchanged"
    current = {"summary": {metric: float(x[-1])}, "key": KEY}
    baseline = {"name": "history", "kind": "historical", "key": KEY, "summary": {metric: float(hist[0])}}
    baseline["history"] = [{metric: float(h)} for h in hist]
    return next(v.verdict for v in compare(current, [baseline], OLD_RULE) if v.metric == metric)
