"""Verdicts (from :mod:`benchcamp.verdicts.compare`) as MLflow tags."""

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


# A baseline's kind -> the fixed last part of its verdict tag's key, so the keys line up across runs
# (MLflow's compare view: one column per key). The baseline's own name is the tag's ``...baseline`` twin.
KIND_KEYS = {"historical": "history", "history": "history", "published": "published", "marked": "marked"}


def verdict_tags(verdicts: list) -> tuple[dict[str, str], bool]:
    """``benchcamp.verdict.<metric>.<history|published|marked> = status`` (with two baselines of a kind, a
    regression wins), ``...<kind>.baseline`` = the baselines judged against, plus ``benchcamp.regression``."""
    tags: dict[str, str] = {}
    names: dict[str, list[str]] = {}
    regressed = False
    for v in verdicts:
        status = verdict_status(v)
        metric = str(field(v, "metric", default="?"))
        baseline = field(v, "baseline", "baseline_name", default="")
        baseline = str(field(baseline, "name", default=baseline) or "")
        kind = str(field(v, "baseline_kind", default="") or "")
        part = KIND_KEYS.get(kind) or KIND_KEYS.get(baseline) or "baseline"
        key = f"{TAG}verdict.{metric}.{part}"
        if tags.get(key) != REGRESSED:
            tags[key] = status
        if baseline and baseline not in names.setdefault(key, []):
            names[key].append(baseline)
        regressed |= status == REGRESSED
    for key, found in names.items():
        tags[f"{key}.baseline"] = "; ".join(found)[:4000]
    tags[f"{TAG}regression"] = str(regressed).lower()
    return tags, regressed
