"""The expected error of a simulated figure: benchcamp/data/sim_error.json is what bench/fidelity/replay.py's
validation set gives on this tree, and the nearest validated configurations are found as the module says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchcamp.sim import fidelity

# Quick validation points (about 1-3 s each here): DeepSeek on B300 (what the default campaign's GB300 leans on) and
# a Qwen3 MoE on H100, two sources, both replay regimes (closed loop, all at once).
SUBSET = ("ix-dsr1-b300-sglang-tp8-1k-1k-c1", "ix-dsr1-b300-sglang-tp8-8k-1k-c1", "q235-h100-vllm-bf16-tp8-random-128")
REGENERATE = "uv run python bench/fidelity/error_table.py"


def test_the_table_is_what_the_replay_computes_on_a_subset():
    from bench.fidelity.error_table import compact, replayed_rows

    fresh = compact(replayed_rows(jobs=1, only=set(SUBSET)))
    stored = [r for r in fidelity.table()["rows"] if r[0] in SUBSET]
    assert len(fresh) == len(stored) > 0, f"the validation set changed: rerun `{REGENERATE}`"
    for new, old in zip(fresh, stored):
        assert new[:5] == old[:5]
        assert new[5] == pytest.approx(old[5], rel=1e-5), (
            f"{new[0]} {new[4]}: the simulator now gives {new[5]:.4f} x published, the table {old[5]:.4f}: "
            f"rerun `{REGENERATE}`"
        )


def test_the_table_says_where_it_came_from_and_holds_the_whole_validation_set():
    from bench.common.fidelity import CORPUS, load_corpus

    doc = fidelity.table()
    assert doc["command"].startswith("uv run python bench/fidelity/error_table.py") and doc["date"] and doc["commit"]
    _, points = load_corpus(CORPUS)
    validation = {p["id"]: p for p in points if p["set"] == "validation"}
    assert {r[0] for r in doc["rows"]} == set(validation)
    assert len(doc["rows"]) == sum(len(p["published"]) for p in validation.values())
    assert all(math.isfinite(r[5]) and r[5] > 0 for r in doc["rows"])
    assert doc["architectures"] == {m: fidelity.architecture(m) for m in {r[3] for r in doc["rows"]}}


def _errors(rows: list[list]) -> tuple[int, float]:
    return len(rows), float(np.median([abs(r[5] - 1) for r in rows]))


def test_the_default_campaigns_gb300_reads_b300s_deepseek_values():
    rows = fidelity.table()["rows"]
    for phase, metrics in (("throughput", ("total_tok_s", "output_tok_s")), ("ttft", ("ttft_mean_ms",
                           "ttft_median_ms", "ttft_p99_ms")), ("tpot", ("tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms"))):
        e = fidelity.expected_error("gb300", "deepseek-v4.1-flash", phase)
        mine = [r for r in rows if r[2] == "b300" and r[3] == "deepseek-v3" and r[4] in metrics]
        assert (e.n, e.median_abs) == pytest.approx(_errors(mine))
        assert (e.match, e.gpus, e.models) == ("same silicon and architecture", ("b300",), ("deepseek-v3",))
        assert e.words().startswith(f"validation median error {e.median_abs:.0%} on {e.n} comparable values")


def test_an_exact_configuration_is_preferred_and_a_far_one_is_unvalidated():
    rows = fidelity.table()["rows"]
    e = fidelity.expected_error("h200", "deepseek-v3", "tpot")
    assert e.match == "same GPU and model"
    assert (e.n, e.median_abs) == pytest.approx(_errors([r for r in rows if r[2] == "h200" and r[3] == "deepseek-v3"
                                                         and r[4].startswith("tpot")]))
    cpu = fidelity.expected_error("cpu", "tiny-llama", "throughput")
    assert not cpu.validated and cpu.words().startswith("unvalidated") and cpu.to_dict()["median_abs_error"] is None
    # no dense model was validated on a B200: a dense model there is unvalidated, not borrowed from the MoE rows
    assert not fidelity.expected_error("b200", "llama-3.1-70b", "throughput").validated
    with pytest.raises(ValueError, match="phase="):
        fidelity.expected_error("b200", "deepseek-v3", "e2e")


def test_figures_are_printed_to_the_precision_their_error_allows():
    def err(e: float) -> fidelity.ExpectedError:
        return fidelity.ExpectedError("throughput", 10, e, e, 1.0, "same GPU and model")

    assert fidelity.rounded(41714.0, err(0.28)) == "42K"  # +-11.7K: the thousands digit is the last worth printing
    assert fidelity.rounded(41714.0, err(0.07)) == "41.7K"
    assert fidelity.rounded(339.6, err(0.14)) == "340"
    assert fidelity.rounded(3.12, err(0.5)) == "3.1"
    assert fidelity.rounded(1_234_567.0, err(0.02)) == "1.235M"
    assert fidelity.rounded(41714.0, fidelity.expected_error("cpu", "tiny-llama", "throughput")) == "42K"
    assert fidelity.rounded(float("nan"), err(0.1)) == "-"
    line = fidelity.figure(41714.0, err(0.28), "tokens/s/GPU")
    assert line.startswith("42K tokens/s/GPU, simulated; validation median error 28% on 10 comparable values")
