"""workloads/agentperf-like.yaml against AA-AgentPerf's published dataset description
(https://artificialanalysis.ai/methodology/agentperf): contexts ~5K to ~131K tokens with a
mean of ~27K, output median ~150 and P95 ~2K tokens, trajectories of tens to 200 turns,
tool latency between turns."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchcamp.cli import main
from benchcamp.workload.model import read_workload

SPEC = Path(__file__).resolve().parents[2] / "workloads" / "agentperf-like.yaml"


def test_agentperf_like_stats_match_the_published_figures(tmp_path, capsys):
    out = tmp_path / "agentperf-like.parquet"
    assert main(["workload", "build", "--spec", str(SPEC), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["workload", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)

    assert 0.9 * 27_000 <= stats["context_mean"] <= 1.1 * 27_000          # mean ~27K
    assert 100_000 <= stats["context_max"] <= 131_072                        # up to ~131K, truncated at the context
    assert stats["think_s_mean"] > 0                                         # tool latency between turns
    assert stats["subagent_sessions"] == 0                                   # one sequential agent per trajectory

    w = read_workload(out)
    prompts = [r.prompt_len for _, r in w.requests()]
    outputs = [r.output_len for _, r in w.requests()]
    turns = [len(s.requests) for s in w.top_level()]
    assert 4_000 <= min(prompts) <= 6_000                                    # from ~5K
    assert 120 <= np.percentile(outputs, 50) <= 180                         # median ~150
    assert 1_500 <= np.percentile(outputs, 95) <= 2_500                      # P95 ~2K
    assert min(turns) >= 10 and max(turns) == 200 and 20 <= np.mean(turns) <= 80   # tens to 200 turns
