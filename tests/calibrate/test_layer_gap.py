"""The per-layer gap a model profile carries per engine and GPU is the one aiconfigurator-core's measured tables
give (benchcamp/calibrate/layer_gap.py, run on the real tables shipped in the pinned wheel: ~10-20 s a case)."""

from __future__ import annotations

import pytest

from benchcamp.calibrate.layer_gap import layer_gap
from benchcamp.calibrate.sources import CalibrateError
from benchcamp.profiles import load_gpu, load_model


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_deepseeks_sglang_gap_in_the_profile_is_the_measured_one(gpu):
    g = layer_gap(gpu, "sglang", "deepseek-v3", "deepseek-ai/DeepSeek-R1", 8, "fp8")
    have = load_model("deepseek-v3").layer_overhead_scale("sglang", gpu, -1.0)
    assert have == pytest.approx(g.scale, abs=0.001)
    # the per-batch scales agree with each other: one per-layer term describes batches 1-8
    assert max(r.scale for r in g.rows) - min(r.scale for r in g.rows) < 0.1
    # and the measured SGLang gap is well under the one the GPU profile charges vLLM (the miss it fixes on H200)
    if gpu == "h200":
        assert g.scale < 0.6 * load_gpu(gpu).layer_overhead_scale


def test_vllm_on_hopper_measures_the_gap_the_end_to_end_fit_found():
    # deepseek-v3's 190 us per layer was fitted on vLLM 0.11 on 8 x H200; vLLM 0.24's measured tables agree within 10%
    g = layer_gap("h200", "vllm", "deepseek-v3", "deepseek-ai/DeepSeek-R1", 8, "fp8")
    assert g.scale == pytest.approx(load_gpu("h200").layer_overhead_scale, rel=0.1)


def test_a_gpu_without_tables_is_refused_with_the_ones_there_are():
    with pytest.raises(CalibrateError, match=r"--gpu mi355x: aiconfigurator-core has no tables for it; choose one of"):
        layer_gap("mi355x", "sglang", "deepseek-v3", "deepseek-ai/DeepSeek-R1", 8)
