"""The report's capacity section (``load.mode: capacity``): max concurrent agents per
service tier, the search's probes, and the agents-vs-per-agent-speed curve with the
tier lines. Input: the campaign's ``capacity`` dict (``benchcamp.planning.capacity.CapacityResult.to_dict()``);
no ``capacity`` -> no section. Also writes ``plots/capacity_probes.csv`` for ``dvc plots``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchcamp.metrics import Metric
from benchcamp.planning.capacity import TierField

_e = html.escape


def _f(x: Any, pattern: str) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "-"
    return pattern.format(v) if math.isfinite(v) else "-"


def _usd(x: Any, digits: int = 2) -> str:
    text = _f(x, f"{{:,.{digits}f}}")
    return text if text == "-" else ("-$" + text[1:] if text.startswith("-") else "$" + text)


def tiers_table(cap: Mapping[str, Any]) -> str:
    cols = (
        "tier",
        "P90 rate >=",
        "TTFT P90 <=",
        "max agents",
        "per GPU",
        "per MW",
        "tokens/s/GPU",
        "revenue $/GPU-h",
        "cost $/GPU-h",
        "revenue - cost $/GPU-h",
        "cost $/Mtok",
        "point",
        "search",
    )
    rows = []
    for t in cap.get("tiers", []):
        cells = [
            _e(str(t["tier"])),
            _f(t[TierField.RATE], "{:g} tok/s"),
            _f(t[TierField.TTFT], "{:g} s"),
            f"<b>{int(t['max_agents'])}</b>",
            _f(t["agents_per_gpu"], "{:.2f}"),
            _f(t["agents_per_mw"], "{:,.0f}"),
            _f(t[Metric.THROUGHPUT_PER_GPU], "{:,.0f}"),
            _usd(t[Metric.REVENUE_PER_GPU_HOUR]),
            _usd(t[Metric.COST_PER_GPU_HOUR]),
            _usd(t[Metric.MARGIN_PER_GPU_HOUR]),
            _usd(t[Metric.COST_PER_MTOK], 4),
            _e(str(t.get("point") or "-")),
            (
                f'<span class="{"ok" if t["status"] == "ok" else "bad"}">{_e(str(t["status"]))}</span>: '
                f"{_e(str(t['note']))}"
            ),
        ]
        rows.append(
            "<tr>"
            + "".join(
                f'<td class="num">{c}</td>' if i in range(1, 11) else f"<td>{c}</td>" for i, c in enumerate(cells)
            )
            + "</tr>"
        )
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def probes_table(cap: Mapping[str, Any]) -> str:
    tiers = [t["tier"] for t in cap.get("tiers", [])]
    head = "".join(
        f"<th>{_e(c)}</th>"
        for c in ["#", "agents", "attempt", "point", "P90 tok/s per agent", "TTFT P90 s", "tokens/s/GPU"]
        + [f"meets {t}" for t in tiers]
        + ["validity"]
    )
    rows = []
    for i, p in enumerate(cap.get("probes", []), 1):
        meets = [("yes" if p["meets"].get(t) else "no") if p["valid"] else "-" for t in tiers]
        valid = (
            '<span class="ok">valid</span>'
            if p["valid"]
            else '<span class="bad">invalid (not used)</span>: ' + _e("; ".join(p.get("reasons") or []))
        )
        cells = [
            str(i),
            str(p["level"]),
            str(p["attempt"]),
            _e(str(p["label"])),
            _f(p[Metric.P90_USER_RATE], "{:.1f}"),
            _f(p[Metric.TTFT_P90], "{:.3f}"),
            _f(p[Metric.THROUGHPUT_PER_GPU], "{:,.0f}"),
        ] + meets
        rows.append("<tr>" + "".join(f'<td class="num">{c}</td>' for c in cells) + f"<td>{valid}</td></tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def curve(cap: Mapping[str, Any], title: str):
    """Valid probes as concurrent agents vs P90 per-agent speed, tier lines, max agents marked."""
    from benchcamp.report import plots

    rate = Metric.P90_USER_RATE
    pts = [{"agents": p["level"], "rate": p[rate]} for p in cap.get("probes", []) if p["valid"]]
    tiers = [dict(t, marks=[(t["max_agents"], t[rate])]) for t in cap.get("tiers", [])]
    return plots.capacity_curve([("search probes (valid)", pts)], tiers, "concurrent agents", title)


def write_probes_csv(path: Path, cap: Mapping[str, Any], write_csv: Callable[..., None]) -> None:
    tiers = [t["tier"] for t in cap.get("tiers", [])]
    metrics = [Metric.P90_USER_RATE, Metric.TTFT_P90, Metric.THROUGHPUT_PER_GPU]
    write_csv(
        path,
        ["level", "attempt", "valid", *metrics] + [f"meets_{t}" for t in tiers],
        [
            [p["level"], p["attempt"], int(p["valid"])]
            + [p[m] for m in metrics]
            + [int(bool(p["meets"].get(t))) for t in tiers]
            for p in cap.get("probes", [])
        ],
    )


def section(
    cap: Mapping[str, Any] | None,
    img: Callable[[bytes, str], str],
    fig_dir: Path,
    plots_dir: Path,
    write_csv: Callable[..., None],
    title: str,
) -> str:
    """The HTML of the capacity section ('' without a capacity result); writes its PNG and CSV."""
    if not cap or not cap.get("tiers"):
        return ""
    from benchcamp.report import plots

    data = plots.png(curve(cap, title))
    (fig_dir / "capacity.png").write_bytes(data)
    write_probes_csv(plots_dir / "capacity_probes.csv", cap, write_csv)
    s = cap.get("settings") or {}
    rel = float(s.get("resolution_rel") or 0)
    how = (
        f"{cap.get('clock', 'wall')} clock; closed-loop search from {s.get('start')} agents, doubling, then "
        f"bisection to {s.get('resolution_sessions')} agent(s){f' or {rel:.0%}' if rel else ''}, "
        f"up to {s.get('max')}; invalid probes re-run {s.get('retries')} time(s) and never used; "
        f"{cap.get('gpus')} GPUs at {_f(cap.get('watts_per_gpu'), '{:,.0f}')} W each (board power x node overhead)"
    )
    return (
        f'<h2>Capacity at service tiers</h2><p class="sub">{_e(how)}</p>{tiers_table(cap)}'
        f"{img(data, 'capacity curve')}<h2>Capacity search probes</h2>{probes_table(cap)}"
    )
