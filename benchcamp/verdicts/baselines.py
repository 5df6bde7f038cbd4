"""Published baselines: external reference results, versioned in
``benchcamp/data/baselines.yaml``. Each loads as the plain baseline dict that
:func:`benchcamp.verdicts.compare.compare` takes:
``{"name", "kind": "published", "key": {...}, "summary": {metric: value}, "meta": {...}}``.
"""

from __future__ import annotations

from typing import Any

from benchcamp.data import load_data
from benchcamp.errors import ConfigError

KEY_FIELDS = ("workload_digest", "model", "gpu", "gpu_count", "engine_kind")
# What was measured: the point (c8, r2.5: load mode and level or rate), the load mode, the window rule, the clock.
# A baseline names them in its key; one that does not is never judged against a run that names its point.
POINT_FIELDS = ("point", "load_mode", "window_rule", "clock")
KINDS = ("published", "historical", "marked")
# How a baseline's total_tokens_per_s_per_gpu was computed (benchcamp.metrics.THROUGHPUT_DEFINITIONS):
# window (benchcamp's, the default) or span (AgentX's); compare uses the run's figure of the same definition.
THROUGHPUT_DEFINITIONS = ("window", "span")
# Which per-user rate a baseline's p90_user_tokens_per_s is (benchcamp.metrics.INTERACTIVITY_DEFINITIONS): tpot
# (1 / P90(TPOT), InferenceX's interactivity, the default) or e2e_normalized (1 / P90(e2e / output tokens)).
INTERACTIVITY_DEFINITIONS = ("tpot", "e2e_normalized")


def _entries() -> list[dict[str, Any]]:
    data = load_data("baselines.yaml") or {}
    entries = data.get("baselines") or []
    for i, e in enumerate(entries):
        where = f"benchcamp/data/baselines.yaml: baselines[{i}]"
        if not isinstance(e, dict) or not e.get("name"):
            raise ConfigError(f"{where}: every baseline needs a name")
        if e.get("kind") not in KINDS:
            raise ConfigError(f"{where} ({e['name']}): kind must be one of {', '.join(KINDS)}")
        figs = e.get("figures")
        if not isinstance(figs, dict) or not figs or not all(isinstance(v, (int, float)) for v in figs.values()):
            raise ConfigError(f"{where} ({e['name']}): figures must map metric names to numbers")
        if e.get("throughput_definition", "window") not in THROUGHPUT_DEFINITIONS:
            raise ConfigError(
                f"{where} ({e['name']}): throughput_definition must be one of {', '.join(THROUGHPUT_DEFINITIONS)}"
            )
        if e.get("interactivity_definition", "tpot") not in INTERACTIVITY_DEFINITIONS:
            raise ConfigError(
                f"{where} ({e['name']}): interactivity_definition must be one of {', '.join(INTERACTIVITY_DEFINITIONS)}"
            )
    return entries


def list_published() -> list[str]:
    return [e["name"] for e in _entries()]


def load_published(name: str) -> dict[str, Any]:
    """The published baseline ``name`` as a compare baseline dict."""
    for e in _entries():
        if e["name"] == name:
            key = {f: (e.get("key") or {}).get(f) for f in KEY_FIELDS + POINT_FIELDS}
            meta = {k: v for k, v in e.items() if k not in ("name", "kind", "key", "figures")}
            meta["throughput_definition"] = e.get("throughput_definition", "window")
            meta["interactivity_definition"] = e.get("interactivity_definition", "tpot")
            return {
                "name": e["name"],
                "kind": e["kind"],
                "throughput_definition": meta["throughput_definition"],
                "interactivity_definition": meta["interactivity_definition"],
                "key": key,
                "summary": {k: float(v) for k, v in e["figures"].items()},
                "meta": meta,
            }
    raise ConfigError(
        f"baselines.published: unknown baseline {name!r}; known: {', '.join(list_published())} "
        "(add it to benchcamp/data/baselines.yaml)"
    )
