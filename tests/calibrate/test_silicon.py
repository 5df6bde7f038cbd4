"""Silicon validation (benchcamp.calibrate.silicon): rows are checked with stated reasons, predicted from the perf
model, and scored; never fitted (nothing in benchcamp.calibrate's fit imports it: checked below)."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

from benchcamp.calibrate import silicon

BASE = {
    "id": "x",
    "silicon_data_source": "db-dump/2026-04-27; config_id=1",
    "backend": "vllm",
    "backend_version": "0.19.0",
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "system": "h200_sxm",
    "precision": "bf16",
    "mode": "agg",
    "isl": 1024,
    "osl": 1024,
    "batch_size": 8.0,
    "tp_size": 1.0,
    "pp_size": 1.0,
    "attention_dp_size": 1.0,
    "moe_tp_size": 1.0,
    "moe_ep_size": 1.0,
    "silicon_ttft_ms": 60.0,
    "silicon_tpot_ms": 6.0,
}


def _rows(**changes: dict) -> pd.DataFrame:
    return pd.DataFrame([{**BASE, "id": k, **v} for k, v in changes.items()])


def test_check_keeps_a_sound_row_and_drops_the_others_with_reasons():
    kept, dropped = silicon.check(
        _rows(
            ok={},
            disagg={"mode": "disagg"},
            unknown={"model_path": "someone/Model-X"},
            fp8={"precision": "fp8"},
            missing={"silicon_tpot_ms": float("nan")},
            tp72={"tp_size": 72.0},
            floor={"silicon_tpot_ms": 1.0},  # 16 GB of BF16 weights cannot be read in 1 ms on 4.8 TB/s
            local={"silicon_data_source": "source_file=/Users/someone/x.csv"},
        )
    )
    assert sorted(kept["id"]) == ["local", "ok"]
    assert kept.set_index("id").loc["local", "source"] == "local file"
    why = dropped.set_index("id")["reason"]
    assert why["disagg"].startswith("disaggregated")
    assert why["unknown"].startswith("no model profile")
    assert why["fp8"].startswith("precision fp8")
    assert why["missing"].startswith("no measurement")
    assert why["tp72"].startswith("layout: TP 72")
    assert why["floor"].startswith("below the HBM floor")


def test_predict_and_score_a_row():
    kept, _ = silicon.check(_rows(a={}, b={"tp_size": 2.0, "silicon_tpot_ms": 4.0}))
    pred = silicon.predict(kept)
    assert (pred["sim_tpot_ms"] > 0).all() and (pred["sim_ttft_ms"] > 0).all()
    # TP2 halves the weights each GPU reads: faster steps
    assert pred.set_index("id").loc["b", "sim_tpot_ms"] < pred.set_index("id").loc["a", "sim_tpot_ms"]
    table = silicon.score(pred)
    overall = table.iloc[-1]
    assert overall["rows"] == 2 and 0 <= overall["within_15"] <= overall["within_30"] <= 1
    assert overall["ranking"] in (0.0, 1.0)  # one pair of configurations


def test_ranking_counts_pairs_ordered_as_measured():
    df = pd.DataFrame(
        {
            "model": "m",
            "system": "s",
            "backend": "b",
            "backend_version": "v",
            "isl": 1,
            "osl": 1,
            "batch_size": 1,
            "thr": [1.0, 2.0, 3.0],
            "sim_thr": [1.0, 3.0, 2.0],
        }
    )
    assert silicon.ranking(df) == pytest.approx(2 / 3)


def test_the_fit_never_reads_the_validation_rows():
    for mod in ("fit", "kernel_fit", "kernels", "ground", "sources"):
        tree = ast.parse((Path(silicon.__file__).parent / f"{mod}.py").read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any("silicon" in x for x in names), mod
