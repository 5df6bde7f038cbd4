"""Two logged campaigns side by side: what each measured (headline metrics, validity), B over A, and each
run's verdicts as they were logged with it (``benchcamp.verdict.*`` tags). Read only: nothing is judged
again and nothing is written to MLflow; `benchcamp compare RUN_A RUN_B` prints it, ``--html`` saves it.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path

from benchcamp.errors import ConfigError, StoreError
from benchcamp.metrics import HEADLINE, Metric
from benchcamp.results.atomic import write_text
from benchcamp.results.table import columns, fmt
from benchcamp.tracking import TrackedRun
from benchcamp.tracking.store import TAG, client

# (summary key, row title, format): the sweep table's headline columns, in its order
METRIC_ROWS = columns(
    Metric.THROUGHPUT_PER_GPU,
    Metric.P90_USER_RATE,
    Metric.E2E_INTERACTIVITY_P90,
    Metric.TTFT_P90,
    Metric.CACHE_HIT_RATE_CLIENT,
    Metric.REVENUE_PER_GPU_HOUR,
    Metric.COST_PER_GPU_HOUR,
    Metric.ERROR_RATE,
)
# (row title, tag name under benchcamp.): what each run is
IDENTITY_ROWS: list[tuple[str, str]] = [
    ("campaign", "campaign"),
    ("execution", "execution_id"),
    ("model", "model"),
    ("GPU", "gpu"),
    ("GPUs", "gpu_count"),
    ("engine", "engine_kind"),
    ("engine version", "engine_version"),
    ("topology", "topology"),
    ("fingerprint", "fingerprint"),
    ("headline point", "headline_point"),
    # a run `benchcamp import` logged: the tool whose file it is (benchcamp.interop.track)
    ("imported from", "imported_tool"),
]
VERDICT_PREFIX = f"{TAG}verdict."
NO_VERDICT = "-"


@dataclass
class Side:
    """One campaign as the side-by-side shows it."""

    run_id: str
    name: str
    identity: dict[str, str]
    clock: str
    valid: bool
    metrics: dict[str, float]
    # (metric, baseline kind) -> "status (baseline names)"
    verdicts: dict[tuple[str, str], str] = field(default_factory=dict)
    regression: str = ""


@dataclass
class SideBySide:
    a: Side
    b: Side

    def metric_rows(self) -> list[list[str]]:
        """[title, A, B, B / A] per headline metric; the ratio says which way is better where it is known."""
        return [
            [title, fmt(self.a.metrics.get(key), pattern), fmt(self.b.metrics.get(key), pattern), ratio(self, key)]
            for key, title, pattern in METRIC_ROWS
        ]

    def identity_rows(self) -> list[list[str]]:
        rows = [["run", self.a.name, self.b.name, ""], ["run id", self.a.run_id, self.b.run_id, ""]]
        rows += [
            [title, self.a.identity[title], self.b.identity[title], _same(self, title)] for title, _ in IDENTITY_ROWS
        ]
        rows.append(["clock", self.a.clock, self.b.clock, "same" if self.a.clock == self.b.clock else "differs"])
        rows.append(["valid", _yes(self.a.valid), _yes(self.b.valid), ""])
        return rows

    def verdict_rows(self) -> list[list[str]]:
        """[metric, baseline kind, A's verdict, B's verdict] for every verdict either run has."""
        order = {m: i for i, m in enumerate(HEADLINE)}  # the headline's order, then any other metric (capacity)
        keys = sorted(set(self.a.verdicts) | set(self.b.verdicts), key=lambda k: (order.get(k[0], len(order)), k))
        rows = [
            [m, kind, self.a.verdicts.get((m, kind), NO_VERDICT), self.b.verdicts.get((m, kind), NO_VERDICT)]
            for m, kind in keys
        ]
        if keys:
            rows.append(["any regression", "", self.a.regression or NO_VERDICT, self.b.regression or NO_VERDICT])
        return rows


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def _same(sbs: SideBySide, title: str) -> str:
    if title in ("execution", "headline point"):
        return ""
    return "same" if sbs.a.identity[title] == sbs.b.identity[title] else "differs"


def ratio(sbs: SideBySide, key: str) -> str:
    """``1.23x (better)``: B over A, and whether that is better by the metric's direction (benchcamp.metrics.HEADLINE)."""
    a, b = sbs.a.metrics.get(key), sbs.b.metrics.get(key)
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return "-"
    if a == 0:
        return "same" if b == 0 else "-"
    text = f"{b / a:.2f}x"
    head = HEADLINE.get(key)
    if head is not None and a != b:
        text += " (better)" if head.better(b, a) else " (worse)"
    return text


def logged_verdicts(tags: dict[str, str]) -> dict[tuple[str, str], str]:
    """(metric, kind) -> "status (baseline)" from a run's fixed-key verdict tags
    (``benchcamp.verdict.<metric>.<history|published|marked>`` and their ``.baseline`` twins)."""
    found: dict[tuple[str, str], str] = {}
    names: dict[tuple[str, str], str] = {}
    for key, value in tags.items():
        if not key.startswith(VERDICT_PREFIX):
            continue
        rest = key[len(VERDICT_PREFIX) :]
        if rest.endswith(".baseline"):
            metric, _, kind = rest[: -len(".baseline")].rpartition(".")
            names[(metric, kind)] = value
        else:
            metric, _, kind = rest.rpartition(".")
            found[(metric, kind)] = value
    return {k: f"{status} ({names[k]})" if names.get(k) else status for k, status in found.items()}


def side(run: TrackedRun) -> Side:
    """A campaign's side from its parent run (tags, metrics, its logged ``load.clock`` param)."""
    params = client(run.uri).get_run(run.run_id).data.params
    return Side(
        run_id=run.run_id,
        name=run.tags.get("mlflow.runName", run.run_id),
        identity={title: run.tag(tag, "-") for title, tag in IDENTITY_ROWS},
        clock=params.get("load.clock", "-"),
        valid=run.valid,
        metrics=dict(run.headline),
        verdicts=logged_verdicts(run.tags),
        regression=run.tag("regression"),
    )


def side_by_side(a: TrackedRun, b: TrackedRun) -> SideBySide:
    return SideBySide(side(a), side(b))


def format_text(sbs: SideBySide) -> str:
    """The terminal view: what each run is, its headline metrics with B / A, then each run's logged verdicts."""
    header = ["", "A", "B", "B / A"]
    parts = [text_table(header, sbs.identity_rows() + sbs.metric_rows())]
    verdicts = sbs.verdict_rows()
    if verdicts:
        parts.append("verdicts logged with each run (benchcamp.verdict.*):")
        parts.append(text_table(["metric", "baseline", "A", "B"], verdicts))
    else:
        parts.append("verdicts: neither run has verdict tags (`benchcamp compare RUN --write-tags` adds them)")
    return "\n".join(parts)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns left-aligned (names and figures read across), two spaces apart."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(sbs: SideBySide) -> str:
    """The same view as one self-contained HTML page."""
    title = f"benchcamp: {sbs.a.name} vs {sbs.b.name}"
    verdicts = sbs.verdict_rows()
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}td:first-child{text-align:left}"
        "th{background:#f3f3f3}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        "<h2>Headline</h2>"
        + _html_table(["", "A", "B", "B / A"], sbs.identity_rows() + sbs.metric_rows())
        + "<h2>Verdicts logged with each run</h2>"
        + (
            _html_table(["metric", "baseline", "A", "B"], verdicts)
            if verdicts
            else "<p>neither run has verdict tags</p>"
        )
        + "</body></html>\n"
    )


def write_html(sbs: SideBySide, path: str | Path) -> Path:
    """``render_html`` written atomically (a reader sees the old page or the new one)."""
    try:
        return write_text(path, render_html(sbs))
    except StoreError as exc:
        cause = getattr(exc.__context__, "strerror", None) or str(exc)
        raise ConfigError(f"--html {path}: cannot write it ({cause}); give a path in a writable folder") from None
