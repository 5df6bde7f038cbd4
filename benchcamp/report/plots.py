"""The report's figures (matplotlib, Agg): Pareto curve, latency CDFs, revenue
across the sweep, cache hit rates. Each function takes plain data and returns a
Figure; :func:`png` turns one into bytes for embedding."""

from __future__ import annotations

import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from benchcamp.metrics import Metric  # noqa: E402
from benchcamp.planning.capacity import TierField  # noqa: E402

X, Y = Metric.P90_USER_RATE, Metric.THROUGHPUT_PER_GPU
_COLORS = matplotlib.color_sequences["tab10"]


def png(fig, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def pareto(points: list[dict], frontier: list[dict], baselines: list[dict], title: str, x: str = X):
    """Tokens/s/GPU against a per-user rate (``x``: the P90 per-user rate, or AgentX's E2E-normalized
    interactivity, benchcamp.metrics.INTERACTIVITY_DEFINITIONS): this run's sweep (invalid points hollow),
    its frontier, the sweeps of historical baselines, and published results as stars (a published figure
    only on the axis of the definition it states)."""
    X = x
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    mine = [p for p in points if _finite(p.get(X)) and _finite(p.get(Y))]
    good = [p for p in mine if p.get("valid")]
    bad = [p for p in mine if not p.get("valid")]
    stars = []  # published single results, drawn last so they can be placed against the final scale
    for i, b in enumerate(baselines):
        color = _COLORS[(i + 1) % 10]
        pts = [p for p in b.get("points") or [] if _finite(p.get(X)) and _finite(p.get(Y))]
        s = _on_axis(b, X)
        if pts:
            pts.sort(key=lambda p: p[X])
            ax.plot(
                [p[X] for p in pts],
                [p[Y] for p in pts],
                "--",
                marker=".",
                color=color,
                alpha=0.7,
                label=f"{b['name']} ({b.get('kind', '')})",
            )
        elif _finite(s.get(X)) and _finite(s.get(Y)):
            stars.append((b, s, color))
    if good:
        ax.plot([p[X] for p in good], [p[Y] for p in good], "o", color=_COLORS[0], label="this run (valid)")
    if bad:
        ax.plot([p[X] for p in bad], [p[Y] for p in bad], "o", mfc="none", color="grey", label="this run (invalid)")
    if frontier:
        ax.plot(
            [p[X] for p in frontier],
            [p[Y] for p in frontier],
            "-",
            color=_COLORS[0],
            lw=2,
            label="this run: Pareto frontier",
        )
    for p in mine:
        ax.annotate(str(p.get("point", "")), (p[X], p[Y]), textcoords="offset points", xytext=(3, 5), fontsize=7)
    ymax = max([p[Y] for p in mine] + [0.0])
    for b, s, color in stars:
        label = f"{b['name']} ({b.get('kind', '')})"
        if ymax > 0 and s[Y] > 20 * ymax:
            # Far above this run (a real-hardware record next to a small run): keep this run
            # readable and mark the reference at the top edge with its true value.
            ax.plot(
                [s[X]],
                [ymax * 1.25],
                marker="^",
                markersize=11,
                linestyle="none",
                color=color,
                label=f"{label}, off scale: {s[Y]:,.0f} tokens/s/GPU",
            )
            ax.annotate(
                f"{b['name']} {s[Y]:,.0f} tok/s/GPU",
                (s[X], ymax * 1.25),
                textcoords="offset points",
                xytext=(-4, -12),
                fontsize=7,
                ha="right",
                color=color,
            )
        else:
            ax.plot([s[X]], [s[Y]], marker="*", markersize=14, linestyle="none", color=color, label=label)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(AXIS_LABELS.get(X, str(X)))
    ax.set_ylabel("total tokens/s per GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    return fig


AXIS_LABELS: dict[str, str] = {
    Metric.P90_USER_RATE: "P90 per-user rate (tokens/s per user)",
    Metric.E2E_INTERACTIVITY_P90: "E2E-normalized interactivity, 1 / P90(e2e / output tokens) (tokens/s per user)",
}


def _on_axis(baseline: dict, x: str) -> dict:
    """A baseline's figures with its per-user rate under ``x`` when the rate it states is of that definition:
    a published p90_user_tokens_per_s says which one it is (interactivity_definition)."""
    from benchcamp.metrics import INTERACTIVITY_DEFINITIONS

    s = dict(baseline.get("summary") or {})
    meta = baseline.get("meta") or {}
    stated = baseline.get("interactivity_definition") or meta.get("interactivity_definition")
    if stated is None:
        return s
    rate = s.pop(Metric.P90_USER_RATE, None)
    if INTERACTIVITY_DEFINITIONS.get(str(stated)) == x and rate is not None:
        s[x] = rate
    return s


def latency_cdfs(samples: dict[str, Any]):
    """TTFT and TPOT CDFs, one line per sweep point; ``samples``: label -> request_samples frame."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for (label, df), color in zip(samples.items(), _COLORS * 10):
        for ax, col in zip(axes, ("ttft", "tpot")):
            v = np.sort(df[col].to_numpy(dtype=float))
            v = v[np.isfinite(v)]
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=color, label=label)
    for ax, name in zip(axes, ("TTFT (s)", "TPOT (s)")):
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of requests")
        ax.axhline(0.9, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title="point", title_fontsize=8)
    axes[0].set_title("time to first token", fontsize=10)
    axes[1].set_title("time per output token", fontsize=10)
    fig.tight_layout()
    return fig


def revenue(points: list[dict]):
    """Revenue and cost per GPU-hour across the sweep."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    labels = [str(p.get("point", "")) for p in points]
    rev = [p.get(Metric.REVENUE_PER_GPU_HOUR, math.nan) for p in points]
    cost = [p.get(Metric.COST_PER_GPU_HOUR, math.nan) for p in points]
    x = np.arange(len(points))
    colors = [_COLORS[2] if p.get("valid") else "lightgrey" for p in points]
    ax.bar(x, rev, color=colors, label="revenue per GPU-hour (grey: invalid point)")
    if any(_finite(c) for c in cost):
        ax.plot(x, cost, "k_", markersize=30, mew=2, linestyle="none", label="cost per GPU-hour")
    ax.set_xticks(x, labels)
    ax.set_xlabel("sweep point")
    ax.set_ylabel("USD per GPU-hour")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def cache_hit_rates(points: list[dict]):
    """Prefix-cache hit rate three ways per point: workload theory, client usage (hatched: the part
    a CPU KV tier served, when the server reports it), server metrics."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    kinds = [
        (Metric.CACHE_HIT_RATE_THEORETICAL, "theoretical (workload)"),
        (Metric.CACHE_HIT_RATE_CLIENT, "client (usage)"),
        (Metric.CACHE_HIT_RATE_SERVER, "server (/metrics)"),
    ]
    x = np.arange(len(points))
    w = 0.26
    for i, (key, name) in enumerate(kinds):
        vals = [p[key] if _finite(p.get(key)) else 0.0 for p in points]
        ax.bar(x + (i - 1) * w, vals, w, label=name, color=_COLORS[i + 3])
        cpu_key = Metric.CACHE_HIT_RATE_CPU_TIER
        if key == Metric.CACHE_HIT_RATE_CLIENT and any(_finite(p.get(cpu_key)) for p in points):
            # the third tier: the top of the client's bar that came from CPU memory
            cpu = [p[cpu_key] if _finite(p.get(cpu_key)) else 0.0 for p in points]
            ax.bar(
                x + (i - 1) * w,
                cpu,
                w,
                bottom=[v - c for v, c in zip(vals, cpu)],
                color="none",
                edgecolor="k",
                hatch="///",
                lw=0,
                label="of which CPU KV tier",
            )
    ax.set_xticks(x, [str(p.get("point", "")) for p in points])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("hit rate")
    ax.set_xlabel("sweep point")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def capacity_curve(
    series: list[tuple[str, list[dict]]], tiers: list[dict], xlabel: str, title: str, front: list[dict] | None = None
):
    """Agents against P90 per-agent speed: each series' valid probes ({agents, rate}, in level
    order), the tiers as horizontal lines at their rate with each series' max agents marked
    (``tiers``: {tier, p90_user_tok_s, p90_ttft_s, marks: [(agents, rate)]}), and optionally
    the Pareto front over every series."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    many = len(series) > 10
    for i, (name, pts) in enumerate(series):
        pts = sorted((p for p in pts if _finite(p.get("agents")) and _finite(p.get("rate"))), key=lambda p: p["agents"])
        if not pts:
            continue
        color = "lightgrey" if many else _COLORS[i % 10]
        ax.plot(
            [p["agents"] for p in pts],
            [p["rate"] for p in pts],
            "-o",
            ms=3,
            lw=1,
            color=color,
            label=None if many else name,
        )
    if front:
        ax.plot(
            [p["agents"] for p in front], [p["rate"] for p in front], "-", color="black", lw=2, label="Pareto front"
        )
    for j, t in enumerate(tiers):
        color = matplotlib.color_sequences["Set1"][j % 9]
        ax.axhline(
            t[TierField.RATE],
            color=color,
            ls="--",
            lw=1,
            label=f"tier {t['tier']}: >= {t[TierField.RATE]:g} tok/s, TTFT <= {t[TierField.TTFT]:g} s",
        )
        for agents, rate in t.get("marks") or []:
            if _finite(agents) and _finite(rate) and agents > 0:
                ax.plot([agents], [rate], marker="D", ms=7, color=color, linestyle="none")
                ax.annotate(
                    f"{agents:.3g}", (agents, rate), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color
                )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("P90 per-agent output speed (tokens/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:  # below the plot: inside, it hid the top tier line
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    return fig
