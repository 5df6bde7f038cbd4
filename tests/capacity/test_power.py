"""Power and cost: per-MW figures from the GPU profiles' board power and node overhead."""

from __future__ import annotations

import math
import re

import pytest

from benchcamp.metrics import agents_per_mw, per_mw, power_metrics, watts_per_gpu
from benchcamp.profiles import HERE, available, load_gpu


def test_every_gpu_profile_has_sourced_power():
    for name in available("gpus"):
        g = load_gpu(name)
        # cpu: the real CPU engine's 2-core slice of an EPYC (watts, not hundreds of them)
        low, high = (5, 50) if name == "cpu" else (300, 1500)
        assert low <= g.board_power_w <= high and 1.0 <= g.node_overhead_factor <= 2.5, name
        text = (HERE / "gpus" / f"{name}.yaml").read_text()
        power_note = text[text.index("# Power."):]
        assert re.search(r"\d{4}-\d{2}-\d{2}", power_note) and ("nvidia.com" in power_note or "amd.com" in power_note)


def test_per_mw_formulas():
    assert watts_per_gpu(700, 1.82) == pytest.approx(1274.0)
    assert per_mw(1000.0, 700, 1.0) == pytest.approx(1000.0 / 700 * 1e6)       # tokens/s/GPU -> tokens/s/MW
    # AA-AgentPerf's HGX H200: 1.4 agents/GPU at 2,600 agents/MW <=> ~538 W per GPU
    assert agents_per_mw(1.4 * 8, 8, 538.5, 1.0) == pytest.approx(2600, rel=1e-3)
    assert math.isnan(watts_per_gpu(None)) and math.isnan(agents_per_mw(10, 8, None))
    with pytest.raises(ValueError, match="node_overhead_factor"):
        watts_per_gpu(700, 0.5)
    m = power_metrics({"total_tokens_per_s_per_gpu": 954_000.0, "output_tokens_per_s_per_gpu": 7_000.0,
                       "cost_per_mtok": 0.001, "margin_per_gpu_hour": 35.46}, 700, 1.82)
    assert m["total_tokens_per_s_per_mw"] == pytest.approx(954_000 / 1274 * 1e6)
    assert m["margin_per_gpu_hour"] == 35.46 and m["watts_per_gpu"] == pytest.approx(1274.0)
