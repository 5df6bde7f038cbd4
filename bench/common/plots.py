"""The one plot writer of bench/: panels of bars or points over labelled positions (vertical or horizontal),
with reference lines and bands: side-by-side ratios, grouped and stacked bars, per-round points."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Series:
    """Values at a panel's positions: ``bar`` (``offset``/``width`` place grouped bars, ``bottom`` stacks) or
    ``points`` (a value or a list of values per position); ``color`` one, or one per position."""

    values: Sequence[float | Sequence[float]]
    label: str | None = None
    kind: str = "bar"
    color: str | Sequence[str] | None = "#4c72b0"
    offset: float = 0.0
    width: float = 0.8
    bottom: Sequence[float] | None = None
    alpha: float = 1.0
    size: float = 4.0


@dataclass
class Line:
    """A reference line at ``at`` (across the value axis), or a band from ``at`` to ``to``."""

    at: float
    to: float | None = None
    color: str = "black"
    style: str = "-"
    width: float = 0.8
    alpha: float = 1.0
    label: str | None = None


@dataclass
class Panel:
    labels: Sequence[str]
    series: Sequence[Series]
    lines: Sequence[Line] = ()
    title: str = ""
    value_label: str = ""
    axis_label: str = ""
    horizontal: bool = False
    log: bool = False
    limits: tuple[float, float] | None = None
    annotate: str | None = None  # a format spec: write each bar's value beside it
    label_size: float = 8.0
    rotation: float = 0.0
    legend: bool = True
    legend_loc: str = "best"
    grid: bool = False
    title_size: float = 9.0


def finite_limits(values: Sequence[float], low: float = 0.8, high: float = 1.2) -> tuple[float, float]:
    """Ratio-axis limits that hold every finite value and at least [low, high]."""
    finite = [v for v in values if v == v and abs(v) != float("inf")] or [1.0]
    return min(low, min(finite) - 0.05), max(high, max(finite) + 0.1)


def _draw(ax, p: Panel) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    pos = np.arange(len(p.labels))
    for s in p.series:
        if s.kind == "points":
            first = True
            for i, v in enumerate(s.values):
                vs = list(v) if isinstance(v, (list, tuple)) else [v]
                xs, ys = [i + s.offset] * len(vs), vs
                ax.plot(*((ys, xs) if p.horizontal else (xs, ys)), "o", color=s.color, ms=s.size, alpha=s.alpha,
                        label=s.label if first else None)
                first = False
            continue
        bar = ax.barh if p.horizontal else ax.bar
        kw = {"left" if p.horizontal else "bottom": s.bottom} if s.bottom is not None else {}
        bar(pos + s.offset, [float(v) for v in s.values], s.width, color=s.color, alpha=s.alpha, label=s.label, **kw)
        if p.annotate:
            for i, v in enumerate(s.values):
                if v == v:
                    ax.text(v, i + s.offset, " " + format(v, p.annotate), va="center", fontsize=7)
    for ln in p.lines:
        if ln.to is not None:
            (ax.axvspan if p.horizontal else ax.axhspan)(ln.at, ln.to, color=ln.color, alpha=ln.alpha, label=ln.label)
        else:
            (ax.axvline if p.horizontal else ax.axhline)(ln.at, color=ln.color, ls=ln.style, lw=ln.width,
                                                          alpha=ln.alpha, label=ln.label)
    ticks = ax.set_yticks if p.horizontal else ax.set_xticks
    ticks(pos, list(p.labels), fontsize=p.label_size, rotation=p.rotation,
          **({"ha": "right"} if p.rotation and not p.horizontal else {}))
    if p.horizontal:
        ax.invert_yaxis()
    if p.log:
        (ax.set_xscale if p.horizontal else ax.set_yscale)("log")
    if p.limits:
        (ax.set_xlim if p.horizontal else ax.set_ylim)(*p.limits)
    (ax.set_xlabel if p.horizontal else ax.set_ylabel)(p.value_label)
    if p.axis_label:
        (ax.set_ylabel if p.horizontal else ax.set_xlabel)(p.axis_label)
    if p.title:
        ax.set_title(p.title, fontsize=p.title_size)
    if p.grid:
        ax.grid(axis="x" if p.horizontal else "y", alpha=0.3)
    if p.legend and (any(s.label for s in p.series) or any(ln.label for ln in p.lines)):
        ax.legend(fontsize=7, loc=p.legend_loc)


def write(path: Path, panels: Sequence[Panel], size: tuple[float, float] = (7.0, 4.0), columns: int = 1,
          title: str | None = None, dpi: int = 110, share: bool = False) -> Path:
    """Draw ``panels`` (``columns`` across) into the PNG ``path``; returns it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False, sharey=share)
    for ax, p in zip(np.ravel(axes), panels):
        _draw(ax, p)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


@dataclass
class Ratios:
    """The side-by-side ratio chart: one horizontal bar per figure, second client / first, 1 and +-5% marked."""

    labels: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def panel(self, value_label: str, title: str = "", annotate: bool = True) -> Panel:
        return Panel(self.labels, [Series(self.values)], horizontal=True, value_label=value_label, title=title,
                     annotate=".3f" if annotate else None, limits=finite_limits(self.values), label_size=7,
                     lines=[Line(1.0), Line(0.95, style="--", color="grey", width=0.6),
                            Line(1.05, style="--", color="grey", width=0.6)])
