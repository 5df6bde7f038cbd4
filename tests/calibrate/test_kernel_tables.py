"""benchcamp calibrate --kernel-tables: the per-operation fit recovers factors it was given, lists outliers with
their rule instead of fitting them, and grounds a GPU profile on aiconfigurator-core's measured tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from benchcamp.calibrate.kernel_fit import (
    fit_class,
    ground,
    grounded_figures,
    predict_comm,
    predict_compute,
    reference_outliers,
)
from benchcamp.calibrate.write import GROUNDED_BEGIN, ground_yaml

PEAK, HBM = 1000.0, 4000.0  # TFLOP/s, GB/s of a made-up GPU
TRUE = {"compute_eff": 0.7, "memory_eff": 0.8, "fixed_us": 3.0}


def _gemm_rows(seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for n in (1024, 2048, 4096, 8192, 16384):
        for k in (1024, 4096, 8192):
            for m in (1, 8, 64, 256, 1024, 4096, 16384):
                rows.append({"m": m, "n": n, "k": k})
    df = pd.DataFrame(rows)
    df["op_class"], df["peak"], df["link_bytes"] = "gemm_bf16", "bf16", 0.0
    df["flops"] = 2.0 * df.m * df.n * df.k
    df["bytes"] = (df.m * df.k + df.n * df.k) * 2.0 + df.m * df.n * 2.0
    df["group"] = df.n.astype(str) + "x" + df.k.astype(str)
    df["shape"] = "m=" + df.m.astype(str)
    noise = np.exp(rng.normal(0, 0.02, len(df)))
    df["measured_s"] = predict_compute(df, PEAK, HBM, TRUE) * noise
    df["table"] = "synthetic"
    return df


def test_compute_fit_recovers_the_factors_and_scores_held_back_shapes():
    fit, out = fit_class(_gemm_rows(), "gemm_bf16", seed=0, peak_tflops=PEAK, hbm_gbps=HBM)
    assert fit.factors["compute_eff"] == pytest.approx(0.7, rel=0.03)
    assert fit.factors["memory_eff"] == pytest.approx(0.8, rel=0.03)
    assert fit.held_rows > 0 and fit.fit_rows > fit.held_rows
    assert fit.held_error < 0.03 and fit.held_within_15 == 1.0
    assert out.empty


def test_an_off_roofline_row_is_listed_with_its_reason_and_not_fitted():
    rows = _gemm_rows()
    bad = rows.index[(rows.m == 4096) & (rows.n == 8192) & (rows.k == 4096)][0]
    rows.loc[bad, "measured_s"] *= 12  # a kernel 12x off its shape's roofline
    fit, out = fit_class(rows, "gemm_bf16", seed=0, peak_tflops=PEAK, hbm_gbps=HBM)
    assert list(out.index) == [bad]
    assert "off the gemm_bf16 roofline" in out.loc[bad, "reason"]
    assert fit.factors["compute_eff"] == pytest.approx(0.7, rel=0.03)  # the row did not pull the fit


def test_rule_one_flags_rows_slower_than_the_reference_gpu():
    ref = _gemm_rows()
    mine = ref.copy()
    mine.loc[mine.m == 8, "measured_s"] *= 3.5  # the B200 DeepGEMM FP8-block pattern: small m, 3-4x slower
    reason = reference_outliers(mine, ref, "h200")
    flagged = reason[reason != ""]
    assert set(mine.loc[flagged.index, "m"]) == {8}
    assert flagged.str.startswith("slower than h200").all()


def test_comm_fit_recovers_latency_and_link():
    sizes = np.array([2**i for i in range(10, 30)], dtype=float)
    df = pd.DataFrame({"link_bytes": sizes, "group": sizes.astype(int).astype(str), "shape": ""})
    df["op_class"], df["peak"], df["flops"], df["bytes"] = "all_reduce", "", 0.0, 0.0
    df["measured_s"] = predict_comm(df, {"latency_us": 6.0, "link_gbps": 300.0})
    fit, _ = fit_class(df, "all_reduce", seed=3)
    assert fit.factors["latency_us"] == pytest.approx(6.0, rel=0.03)
    assert fit.factors["link_gbps"] == pytest.approx(300.0, rel=0.03)


def test_ground_maps_classes_to_profile_fields():
    res = ground("made_up", "vllm", _gemm_rows(), {"bf16": PEAK}, HBM, seed=0)
    figures = grounded_figures(res.fits)
    assert figures["compute_efficiency"][0] == pytest.approx(0.7, rel=0.03)
    assert figures["memory_efficiency"][0] == pytest.approx(0.8, rel=0.03)
    assert "held back" in figures["compute_efficiency"][1]


def test_ground_yaml_sets_fields_keeps_the_old_value_and_replaces_its_block():
    text = "# datasheet\nname: x\ncompute_efficiency: 0.5\nmemory_efficiency: 0.75   # assumed\n"
    once = ground_yaml(text, "y", {"compute_efficiency": (0.78, "gemm"), "fp8_compute_efficiency": (0.6, "g")}, ["h1"])
    assert "compute_efficiency: 0.78  # grounded (header; was 0.5)" in once
    assert "fp8_compute_efficiency: 0.6" in once and "name: y" in once
    assert "memory_efficiency: 0.75   # assumed" in once
    twice = ground_yaml(once, "y", {"compute_efficiency": (0.8, "gemm")}, ["h2"])
    assert twice.count(GROUNDED_BEGIN) == 1 and "# h2" in twice and "# h1" not in twice
    assert "compute_efficiency: 0.8  # grounded (header; was 0.5)" in twice


def test_a_real_table_slice_fits_within_its_held_back_error():
    """H200's measured vLLM BF16 GEMMs (aiconfigurator-core, a slice of n, k): a fit near the datasheet peak."""
    from benchcamp.calibrate.kernels import _gemm, data_root

    path = data_root() / "h200_sxm" / "gemm" / "vllm" / "0.24.0" / "gemm_perf.parquet"
    raw = pd.read_parquet(path, filters=[("gemm_dtype", "=", "bfloat16"), ("k", "in", [4096, 8192])])
    raw["table"] = "h200_sxm/gemm/vllm/0.24.0/gemm_perf"
    rows = _gemm(raw)
    fit, _ = fit_class(rows, "gemm_bf16", seed=0, peak_tflops=989, hbm_gbps=4800)
    assert 0.6 < fit.factors["compute_eff"] < 1.0 and 0.6 < fit.factors["memory_eff"] <= 1.0
    assert fit.held_rows > 100 and fit.held_error < 0.2


def test_the_calibrate_command_grounds_a_profile_on_the_tables(tmp_path, monkeypatch, capsys):
    from benchcamp.cli import main
    from benchcamp.profiles import load_gpu

    out = tmp_path / "profiles"
    rc = main(
        [
            "calibrate",
            "--gpu",
            "h100-sxm",
            "--kernel-tables",
            "--max-rows",
            "400",
            "--out",
            str(out),
            "--json",
            str(tmp_path / "fit.json"),
            "--outliers",
            str(tmp_path / "outliers.csv"),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "gemm_bf16" in text and "all_reduce" in text and "grounded figures" in text
    doc = json.loads((tmp_path / "fit.json").read_text())
    assert doc["system"] == "h100_sxm" and any("/gemm/vllm/0.24.0/" in t for t in doc["tables"])
    written = (out / "gpus" / "h100-sxm-grounded.yaml").read_text()
    assert GROUNDED_BEGIN in written and "aiconfigurator-core 0.12.0" in written
    monkeypatch.setenv("BENCHCAMP_PROFILE_PATH", str(out))
    load_gpu.cache_clear() if hasattr(load_gpu, "cache_clear") else None
    prof = load_gpu("h100-sxm-grounded")
    assert prof.compute_efficiency == pytest.approx(doc["figures"]["compute_efficiency"]["value"], rel=1e-3)
    assert prof.interconnect_gbps == pytest.approx(doc["figures"]["interconnect_gbps"]["value"], rel=1e-3)


def test_a_gpu_without_tables_is_one_line_naming_the_flag(capsys):
    from benchcamp.cli import main

    rc = main(["calibrate", "--gpu", "mi300x", "--kernel-tables", "--dry-run"])
    err = capsys.readouterr().err
    assert rc != 0 and "--kernel-system" in err and "Traceback" not in err
