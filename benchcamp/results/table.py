"""Plain-text tables for the terminal: the sweep summary and the headline."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from benchcamp.metrics import COLUMNS, PER_ENGINE_HIT_RATE, PRICE_BASIS_SPLIT, Metric


def columns(*metrics: str) -> list[tuple[str, str, str]]:
    """(summary key, column title, format) of each metric, from the one registry (``benchcamp.metrics.COLUMNS``)."""
    return [(m, COLUMNS[m].label, COLUMNS[m].fmt) for m in metrics]


SWEEP_COLUMNS = columns(
    Metric.REQUESTS,
    Metric.THROUGHPUT_PER_GPU,
    Metric.THROUGHPUT_PER_GPU_SPAN,
    Metric.OUTPUT_THROUGHPUT_PER_GPU,
    Metric.P90_USER_RATE,
    Metric.E2E_INTERACTIVITY_P90,
    Metric.TTFT_P50,
    Metric.TTFT_P90,
    Metric.CACHE_HIT_RATE_CLIENT,
    Metric.REVENUE_PER_GPU_HOUR,
    Metric.ERROR_RATE,
)


UNKNOWN = "unknown"  # a figure the server did not report (e.g. cached tokens): not 0, not "-"


def cell(summary: dict[str, Any], key: str, pattern: str) -> str:
    """One table cell; the client cache hit rate says "unknown" when the server reported no cached tokens."""
    if key == Metric.CACHE_HIT_RATE_CLIENT and summary.get(Metric.CACHED_TOKENS_REPORTED) == 0:
        return UNKNOWN
    return fmt(summary.get(key), pattern)


def fmt(value: Any, pattern: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    try:
        return pattern.format(value)
    except (ValueError, TypeError):
        return str(value)


def render_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    rows = [list(r) for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]

    def line(cells: Sequence[Any]) -> str:
        return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


# the simulated figures of the sweep table and the phase whose validation error each carries
PHASE_OF_COLUMN: dict[str, str] = {
    Metric.THROUGHPUT_PER_GPU: "throughput",
    Metric.THROUGHPUT_PER_GPU_SPAN: "throughput",
    Metric.OUTPUT_THROUGHPUT_PER_GPU: "throughput",
    Metric.REVENUE_PER_GPU_HOUR: "throughput",
    Metric.P90_USER_RATE: "tpot",
    Metric.TTFT_P50: "ttft",
    Metric.TTFT_P90: "ttft",
}


def sweep_table(points: Iterable[Any], errors: dict[str, Any] | None = None) -> str:
    """points: PointOutcome-like objects with label, valid, reasons, summary. ``errors`` (a simulated engine's
    expected error per phase, ``benchcamp.sim.fidelity.for_config``): its figures to the precision it allows."""
    header = ["point", "valid", "steady"] + [title for _, title, _ in SWEEP_COLUMNS]
    rows = []
    for p in points:
        rows.append(
            [p.label, "yes" if p.valid else "NO", steady_cell(p.summary)]
            + [_cell(p.summary, key, pattern, errors) for key, _, pattern in SWEEP_COLUMNS]
        )
    return render_table(header, rows)


# The figures the trials table shows with their interval.
TRIAL_COLUMNS = columns(
    Metric.THROUGHPUT_PER_GPU, Metric.P90_USER_RATE, Metric.TTFT_P90, Metric.REVENUE_PER_GPU_HOUR, Metric.ERROR_RATE
)


def trials_table(points: Iterable[Any]) -> str:
    """The points measured in trials (load.trials > 1): trials measured of asked, and each headline figure as
    ``mean [low, high]`` over the trials (benchcamp.results.trials); "" when no point has trials."""
    from benchcamp.results.trials import ci_text

    pts = [p for p in points if getattr(p, "trials", None) is not None]
    if not pts:
        return ""
    t = pts[0].trials
    header = ["point", "trials", "valid"] + [title for _, title, _ in TRIAL_COLUMNS]
    rows = [
        [p.label, f"{p.trials.measured}/{p.trials.asked}", "yes" if p.valid else "NO"]
        + [ci_text(p.trials, key, pattern) for key, _, pattern in TRIAL_COLUMNS]
        for p in pts
    ]
    return (
        f"trials: {t.statistic} [{t.confidence:.0%} interval, {t.interval}] per point:\n"
        + render_table(header, rows)
    )


def _cell(summary: dict[str, Any], key: str, pattern: str, errors: dict[str, Any] | None) -> str:
    if errors is None or key not in PHASE_OF_COLUMN or not isinstance(summary.get(key), (int, float)):
        return cell(summary, key, pattern)
    from benchcamp.sim.fidelity import rounded

    return rounded(float(summary[key]), errors.get(PHASE_OF_COLUMN[key]))


def steady_cell(summary: dict[str, Any]) -> str:
    """yes / NO (the window's halves disagree: ``benchcamp.metrics.steadiness``) / - (not checked)."""
    st = summary.get("steady")
    return "-" if st is None else "yes" if st else "NO"


def steadiness_notes(points: Iterable[Any]) -> str:
    """The points whose window is not steady, and those whose level replays sessions (one line each)."""
    lines = []
    for p in points:
        if p.summary.get("steady") == 0 and p.summary.get("steady_reasons"):
            lines.append(f"  {p.label}: not steady: {p.summary['steady_reasons']}")
        if p.summary.get("replay_note"):
            lines.append(f"  {p.label}: {p.summary['replay_note']}")
    return ("steady state (load.steady):\n" + "\n".join(lines)) if lines else ""


def agentx_notes(points: Iterable[Any]) -> str:
    """Each point's AgentX submission verdict (load.agentx), one line each: why it is not valid."""
    lines = []
    for p in points:
        if "agentx_submission_valid" not in p.summary:
            continue
        scen = p.summary.get("agentx_scenario") or "agentx"
        if p.summary.get("agentx_prompt"):  # chat_recorded (the harness's), chat_live or token_ids
            scen += f", {p.summary['agentx_prompt']}"
        ok = bool(p.summary["agentx_submission_valid"])
        why = "" if ok else f": {p.summary.get('agentx_submission_reasons') or ''}"
        lines.append(f"  {p.label}: {'valid' if ok else 'not a valid submission'} ({scen}){why}")
    return ("AgentX submission (load.agentx):\n" + "\n".join(lines)) if lines else ""


# A point's line in the sweep's log, written as the point finishes: fixed widths so the lines of one sweep
# make a table whatever they hold (title, summary key, format, width).
POINT_LINE_COLUMNS: list[tuple[str, str, str, int]] = [
    ("point", "", "", 8),
    ("valid", "", "", 5),
    *(
        (title, key, pattern, max(width, len(title)))
        for (key, title, pattern), width in zip(
            columns(Metric.REQUESTS, Metric.THROUGHPUT_PER_GPU, Metric.P90_USER_RATE, Metric.TTFT_P90,
                    Metric.CACHE_HIT_RATE_CLIENT),
            (6, 11, 14, 10, 9),
        )
    ),
]


# Under the header: which definition each figure is (DESIGN.md's metric definitions), so a log's figure is never
# read as another's (the verdict's span figure, labelled "(span)", differs from the window one).
POINT_LINE_LEGEND = (
    "tok/s/GPU = window rule, benchcamp's headline: (cached + uncached input + output tokens) of the requests sent "
    "in the window / window s / GPUs; a verdict labelled (span) uses AgentX's span rule: (ISL + OSL) / (last end "
    "- first start) / GPUs. P90 user tok/s = 1 / P90(TPOT); cache hit = cached / input tokens (server usage)"
)


def point_line_header() -> str:
    return "  ".join(title.rjust(w) for title, _, _, w in POINT_LINE_COLUMNS)


def point_line(p: Any, name: str = "") -> str:
    """One sweep point (PointOutcome-like) as a row under :func:`point_line_header`, named ``name`` (default:
    its label; a trial: ``c8/trial-2``); an invalid point's reasons follow it."""
    cells = [name or p.label, "yes" if p.valid else "NO"] + [cell(p.summary, k, f) for _, k, f, _ in POINT_LINE_COLUMNS[2:]]
    row = "  ".join(c.rjust(w) for c, (_, _, _, w) in zip(cells, POINT_LINE_COLUMNS))
    return row + (f"  ({'; '.join(map(str, p.reasons))})" if not p.valid and p.reasons else "")


def replica_hit_table(points: Iterable[Any]) -> str:
    """Per point, the server's prefix-cache hit rate on each DP engine (replica), from its
    /metrics (``cache_hit_rate_server.engine<N>``); "" when no point served more than one engine."""
    pts = list(points)
    per = [(p, replica_hit_rates(p.summary)) for p in pts]
    engines = sorted({e for _, r in per for e in r}, key=lambda e: (0, int(e)) if e.isdigit() else (1, 0))
    if not engines:
        return ""
    server = COLUMNS[Metric.CACHE_HIT_RATE_SERVER]
    header = ["point", f"{server.label} (all)"] + [f"engine {e}" for e in engines]
    rows = [
        [p.label, fmt(p.summary.get(Metric.CACHE_HIT_RATE_SERVER), server.fmt)]
        + [fmt(r.get(e), server.fmt) for e in engines]
        for p, r in per
        if r
    ]
    return "prefix-cache hit rate per replica (DP engine, server /metrics):\n" + render_table(header, rows)


def replica_hit_rates(summary: dict[str, Any]) -> dict[str, float]:
    """engine -> hit rate, from a point summary's ``cache_hit_rate_server.engine<N>`` keys."""
    return {k[len(PER_ENGINE_HIT_RATE) :]: v for k, v in summary.items() if k.startswith(PER_ENGINE_HIT_RATE)}


def invalid_reasons(points: Iterable[Any]) -> str:
    lines = [f"  {p.label}: {'; '.join(p.reasons)}" for p in points if not p.valid and p.reasons]
    return ("invalid points (excluded from the headline):\n" + "\n".join(lines)) if lines else ""


def engine_label(engine_kind: str, provider_kind: str = "local") -> str:
    """What served the requests, as the user said it. An endpoint is someone else's server: it
    is named as one with the engine.kind the user set (which decides comparability), never
    shown as if benchcamp's simulated engine had served it."""
    return f"endpoint, engine.kind={engine_kind}" if provider_kind == "endpoint" else engine_kind


def headline_text(
    headline: dict[str, Any],
    engine_kind: str,
    pricing_profile: str,
    provider_kind: str = "local",
    errors: dict[str, Any] | None = None,
) -> str:
    """The headline in one line; ``errors`` (``benchcamp.sim.fidelity.for_config``: a simulated engine's expected
    error per phase) rounds each figure to the precision its error allows and adds a line per figure with it."""
    if not headline:
        return "headline: no valid point"
    if errors is not None:
        return _simulated_headline(headline, pricing_profile, errors)
    if provider_kind == "endpoint":
        sim = f" [{engine_label(engine_kind, provider_kind)}]"
    else:
        sim = " [simulated engine]" if engine_kind == "simulated" else ""
    shown = lambda m: fmt(headline.get(m), COLUMNS[m].fmt)  # noqa: E731
    return (
        f"headline{sim} (point {headline.get('point', '?')}): "
        f"{shown(Metric.THROUGHPUT_PER_GPU)} tokens/s/GPU (window; AgentX span "
        f"{shown(Metric.THROUGHPUT_PER_GPU_SPAN)}), "
        f"P90 per-user rate {shown(Metric.P90_USER_RATE)} tokens/s (E2E-normalized "
        f"{shown(Metric.E2E_INTERACTIVITY_P90)}), "
        f"revenue {shown(Metric.REVENUE_PER_GPU_HOUR)} per GPU-hour ({pricing_profile}"
        + (f"; {basis}" if (basis := headline.get(Metric.REVENUE_PRICE_BASIS)) and basis != PRICE_BASIS_SPLIT else "")
        + ")"
    )


def _simulated_headline(headline: dict[str, Any], pricing_profile: str, errors: dict[str, Any]) -> str:
    from benchcamp.sim.fidelity import headline_lines, rounded

    tput, rate = errors.get("throughput"), errors.get("tpot")
    head = (
        f"headline [simulated engine] (point {headline.get('point', '?')}): "
        f"{rounded(headline.get(Metric.THROUGHPUT_PER_GPU), tput)} tokens/s/GPU (window; AgentX span "
        f"{rounded(headline.get(Metric.THROUGHPUT_PER_GPU_SPAN), tput)}), "
        f"P90 per-user rate {rounded(headline.get(Metric.P90_USER_RATE), rate)} tokens/s, "
        f"revenue ${rounded(headline.get(Metric.REVENUE_PER_GPU_HOUR), tput)} per GPU-hour ({pricing_profile}"
        + (f"; {basis}" if (basis := headline.get(Metric.REVENUE_PRICE_BASIS)) and basis != PRICE_BASIS_SPLIT else "")
        + ")"
    )
    return "\n".join([head, *("  " + line for line in headline_lines(headline, errors))])
