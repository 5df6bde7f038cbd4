"""The trend page: each headline metric of a lineage over nights, the noise band of each level, the guard's
change points marked with their size and the configuration diff across them. Plain HTML and inline SVG:
no script, no network, readable from an artifact store."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, replace
from pathlib import Path

from benchcamp.errors import ConfigError, StoreError
from benchcamp.metrics import HEADLINE
from benchcamp.results.atomic import write_text
from benchcamp.verdicts.guard import GuardRule, Night, SeriesVerdict, judge_series, noise_band

W, H, PAD = 760, 220, 48


@dataclass
class TrendChart:
    title: str
    metric: str
    nights: list[Night]
    verdict: SeriesVerdict
    rule: GuardRule


def chart(title: str, metric: str, nights: list[Night], rule: GuardRule | None = None) -> TrendChart:
    # the whole series on the page (the guard judges a night on its last history_nights only)
    rule = replace(rule or GuardRule(), history_nights=max(len(nights), 1))
    return TrendChart(title, metric, nights, judge_series(metric, nights, rule), rule)


def _svg(c: TrendChart) -> str:
    m = HEADLINE[c.metric]
    y = [n.figure for n in c.nights]
    finite = [v for v in y if math.isfinite(v)]
    if not finite:
        return "<p>no value on any night</p>"
    cuts = [0] + [cp.index for cp in c.verdict.change_points] + [len(y)]
    bands = [(a, b, noise_band(y[a:b], c.rule)) for a, b in zip(cuts, cuts[1:]) if b > a]
    lows = [lo for _, _, (lo, _) in bands if math.isfinite(lo)] + finite
    highs = [hi for _, _, (_, hi) in bands if math.isfinite(hi)] + finite
    lo_v, hi_v = min(lows), max(highs)
    span = (hi_v - lo_v) or abs(hi_v) or 1.0
    lo_v, hi_v = lo_v - 0.05 * span, hi_v + 0.05 * span

    def px(i: float) -> float:
        return PAD + (W - 2 * PAD) * (i / max(len(y) - 1, 1))

    def py(v: float) -> float:
        return H - PAD / 2 - (H - PAD) * (v - lo_v) / (hi_v - lo_v)

    parts = [f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{html.escape(m.label)}">']
    for a, b, (blo, bhi) in bands:
        if math.isfinite(blo):
            x0, x1 = px(a - 0.4 if a else 0), px(b - 1 + 0.4 if b < len(y) else len(y) - 1)
            parts.append(
                f'<rect class="band" x="{x0:.1f}" y="{py(bhi):.1f}" width="{max(x1 - x0, 1):.1f}" '
                f'height="{max(py(blo) - py(bhi), 1):.1f}"><title>noise band {m.fmt.format(blo)} - '
                f"{m.fmt.format(bhi)}</title></rect>"
            )
    pts = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(y) if math.isfinite(v))
    parts.append(f'<polyline class="line" points="{pts}"/>')
    for i, (n, v) in enumerate(zip(c.nights, y)):
        if math.isfinite(v):
            parts.append(
                f'<circle cx="{px(i):.1f}" cy="{py(v):.1f}" r="3"><title>{html.escape(n.night)}: '
                f"{html.escape(m.fmt.format(v))}</title></circle>"
            )
    for cp in c.verdict.change_points:
        x = px(cp.index - 0.5)
        diff = "; ".join(f"{k} {a or '-'} → {b or '-'}" for k, (a, b) in cp.diff.items()) or "no config change"
        when = c.nights[cp.index].started_at[:16].replace("T", " ") or cp.night
        # the label reads away from the plot's edge: leftwards from a change in the right half
        right = x > W / 2
        anchor, dx = ("end", -6) if right else ("start", 6)
        parts.append(f'<line class="cp" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD / 4}" y2="{H - PAD / 2}"/>')
        parts.append(
            f'<text class="cplabel" text-anchor="{anchor}" x="{x + dx:.1f}" y="{PAD / 2:.1f}">'
            f"{html.escape(f'{cp.delta_rel:+.1%} from the night of {when}')}<title>{html.escape(cp.night)}</title></text>"
            f'<text class="diff" text-anchor="{anchor}" x="{x + dx:.1f}" y="{PAD / 2 + 14:.1f}">'
            f"{html.escape(diff[:80])}</text>"
        )
    for v in (lo_v + 0.05 * span, hi_v - 0.05 * span):
        parts.append(f'<text class="axis" x="2" y="{py(v) + 4:.1f}">{html.escape(m.fmt.format(v))}</text>')
    first, last = c.nights[0].started_at[:10], c.nights[-1].started_at[:10]
    parts.append(f'<text class="axis" x="{PAD}" y="{H - 4}">{html.escape(first)}</text>')
    parts.append(f'<text class="axis" x="{W - PAD - 70}" y="{H - 4}">{html.escape(last)}</text>')
    parts.append("</svg>")
    return "".join(parts)


STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h2{margin-top:32px}
.band{fill:#cfe3f7;opacity:.7}.line{fill:none;stroke:#1f5fa8;stroke-width:2}
circle{fill:#1f5fa8}.cp{stroke:#c0392b;stroke-width:2;stroke-dasharray:4 3}.cplabel{fill:#c0392b;font-size:12px;font-weight:bold}
.diff{fill:#7b241c;font-size:11px}.axis{fill:#666;font-size:11px}
.status{font-weight:bold}.regressed{color:#c0392b}.improved{color:#1e8449}.suspected{color:#b9770e}
"""


def render_html(title: str, charts: list[TrendChart]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    if not charts:
        body.append("<p>No valid campaign run with a named point in this store yet.</p>")
    group = None
    for c in charts:
        if c.title != group:
            group = c.title
            body.append(f"<h2>{html.escape(c.title)}</h2>")
        v = c.verdict
        body.append(
            f"<h3>{html.escape(HEADLINE[c.metric].label)} ({html.escape(HEADLINE[c.metric].unit)}), "
            f"{len(c.nights)} nights: <span class='status {html.escape(v.status)}'>{html.escape(v.status)}</span></h3>"
            f"<p>{html.escape(v.reason)}</p>{_svg(c)}"
        )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    )


def write_html(title: str, charts: list[TrendChart], path: str | Path) -> Path:
    """``render_html`` written atomically."""
    try:
        return write_text(path, render_html(title, charts))
    except StoreError as exc:
        cause = getattr(exc.__context__, "strerror", None) or str(exc)
        raise ConfigError(f"--html {path}: cannot write it ({cause}); give a path in a writable folder") from None
