"""Every table titles and formats a summary figure as the one registry says (``benchcamp.metrics.COLUMNS``)."""

from __future__ import annotations

from benchcamp.metrics import COLUMNS, HEADLINE, Metric
from benchcamp.report.side_by_side import METRIC_ROWS
from benchcamp.results.table import POINT_LINE_COLUMNS, SWEEP_COLUMNS, TRIAL_COLUMNS, point_line, sweep_table


def test_every_table_reads_the_registry():
    for key, title, pattern in [*SWEEP_COLUMNS, *TRIAL_COLUMNS, *METRIC_ROWS]:
        assert (title, pattern) == (COLUMNS[key].label, COLUMNS[key].fmt), key
    for title, key, pattern, width in POINT_LINE_COLUMNS[2:]:
        assert (title, pattern) == (COLUMNS[key].label, COLUMNS[key].fmt) and width >= len(title), key
    for name, m in HEADLINE.items():
        c = COLUMNS[name]
        assert (m.fmt, m.unit, m.direction) == (c.fmt, c.unit, c.direction), name


class _Point:
    label, valid, reasons = "c8", True, []
    summary = {Metric.ERROR_RATE: 0.0123, Metric.REVENUE_PER_GPU_HOUR: 7.154, Metric.REQUESTS: 12}


def test_one_label_and_precision_per_metric():
    table = sweep_table([_Point()])
    assert "error rate" in table and "1.23%" in table and "revenue $/GPU-h" in table and "$7.15" in table
    assert point_line(_Point()).split()[:3] == ["c8", "yes", "12"]
