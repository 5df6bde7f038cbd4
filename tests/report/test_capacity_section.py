"""The report's capacity section: tiers table, probes table (invalid probes marked unused),
the agents-vs-per-agent-speed curve with the tier lines, the probes CSV, the clock."""

from __future__ import annotations

import csv

from benchcamp_test_factory import make_campaign

from benchcamp.config import load_config
from benchcamp.planning.capacity import SearchSettings, Tier, search_capacity
from benchcamp.report import render


class _Out:
    def __init__(self, level, valid):
        self.label, self.valid, self.reasons = f"c{level}", valid, [] if valid else ["too few <requests>"]
        self.summary = {"p90_user_tokens_per_s": 2000.0 / level, "ttft_p90_s": 0.02 * level,
                        "total_tokens_per_s_per_gpu": 50.0 * level, "revenue_per_gpu_hour": 0.1 * level,
                        "cost_per_gpu_hour": 3.5, "margin_per_gpu_hour": 0.1 * level - 3.5, "cost_per_mtok": 2.0}


def _capacity():
    seen = set()

    def measure(level, attempt=0):
        first = level not in seen
        seen.add(level)
        return _Out(level, not (level == 16 and first))      # c16 invalid once, then valid
    res = search_capacity(measure, [Tier("agentperf-20", 20, 10), Tier("interactive-50", 50, 5)],
                          SearchSettings(start=8, max=512), gpus=8, board_power_w=700, node_overhead_factor=1.82,
                          clock="virtual")
    return res.to_dict()


def test_capacity_section(tmp_path):
    cfg = load_config(None, {"load.min_requests": 5, "load.mode": "capacity", "load.clock": "virtual"})
    camp = make_campaign(tmp_path, cfg)
    plain = render(camp, [], [], tmp_path / "plain").read_text()
    assert "Capacity at service tiers" not in plain          # no capacity result, no section
    camp.capacity = _capacity()                               # the field the integrator adds on CampaignResult
    index = render(camp, [], [], tmp_path / "r")
    page = index.read_text()
    assert "Capacity at service tiers" in page and "Capacity search probes" in page
    assert "<b>100</b>" in page and "<b>40</b>" in page      # max agents per tier
    assert "invalid (not used)" in page and "too few &lt;requests&gt;" in page
    assert "Virtual clock." in page and "virtual clock" in page
    assert "$-" not in page                                   # money as -$3.50, not $-3.50
    assert page.count('src="data:image/png;base64,') == 6  # the two Pareto axes, CDFs, revenue, cache, capacity
    assert (index.parent / "figures" / "capacity.png").stat().st_size > 5_000
    rows = list(csv.DictReader((tmp_path / "r" / "plots" / "capacity_probes.csv").read_text().splitlines()))
    assert len(rows) == len(camp.capacity["probes"]) and {r["valid"] for r in rows} == {"0", "1"}


def test_curve_legend_hides_no_tier_line():
    """The legend sits outside the plot area: inside it covered the top tier line (seen on the
    default campaign's report, interactive-100 under the legend)."""
    from benchcamp.report import capacity as section

    fig = section.curve(_capacity(), "t")
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, area = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert not legend.overlaps(area), (legend, area)
