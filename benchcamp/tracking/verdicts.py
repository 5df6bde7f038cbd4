"""Verdicts (from :mod:`benchcamp.compare`) as MLflow tags."""

from __future__ import annotations

from typing import Any

from benchcamp.tracking.store import TAG

REGRESSED = "regressed"


def field(v: Any, *names: str, default: Any = None) -> Any:
    """A verdict's field whether it is a dataclass or a dict (first name that exists)."""
    for n in names:
        if isinstance(v, dict) and n in v:
            return v[n]
        if hasattr(v, n):
            return getattr(v, n)
    return default


def verdict_status(v: Any) -> str:
    return str(field(v, "verdict", "status", default="")).lower().replace(" ", "_")


def verdict_tags(verdicts: list) -> tuple[dict[str, str], bool]:
    """``benchcamp.verdict.<metric>[.<baseline>] = status``, plus ``benchcamp.regression``."""
    tags: dict[str, str] = {}
    regressed = False
    for v in verdicts:
        status = verdict_status(v)
        metric = str(field(v, "metric", default="?"))
        baseline = field(v, "baseline", "baseline_name", default="")
        baseline = str(field(baseline, "name", default=baseline) or "")
        key = f"{TAG}verdict.{metric}" + (f".{_safe(baseline)}" if baseline else "")
        tags[key] = status
        regressed |= status == REGRESSED
    tags[f"{TAG}regression"] = str(regressed).lower()
    return tags, regressed


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:100]
