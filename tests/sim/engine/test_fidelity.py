"""Fidelity of the simulated engine: the published-results corpus, the model fixes it called for, determinism."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from bench.common import fidelity  # the corpus and the replay of one point
from bench.fidelity import replay  # the report: bench/fidelity/replay.py
from benchcamp.profiles import available, load_engine, load_gpu, load_model
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.core import Router
from benchcamp.sim.engine.frontend import FrontEnd
from benchcamp.sim.engine.perfmodel import BatchSummary, PerfModel
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload


@pytest.fixture(scope="module")
def corpus():
    return fidelity.load_corpus()


def test_corpus_is_sourced_and_split_by_source(corpus):
    sources, points = corpus
    assert len(points) >= 40
    for name, src in sources.items():
        assert src["url"].startswith("https://") and src.get("date") and src.get("title"), name
    by_source: dict[str, set[str]] = {}
    for p in points:
        by_source.setdefault(p["source"], set()).add(p["set"])
        assert p["published"], p["id"]
        assert all(float(v) > 0 for v in p["published"].values()), p["id"]
    assert all(len(sets) == 1 for sets in by_source.values())          # a whole source goes to one set
    assert {p["set"] for p in points} == {"fit", "validation"}
    assert {p["engine"] for p in points} >= {"vllm", "sglang"}
    assert len({p["model"] for p in points}) >= 3
    assert len({p["gpu"] for p in points}) >= 3
    # SGLang's own benchmark READMEs are reserved for validation
    assert all(p["set"] == "validation" for p in points if p["source"].startswith("sglang-readme"))


def test_every_corpus_point_names_profiles_that_exist(corpus):
    _, points = corpus
    for p in points:
        s = fidelity.settings_for(p)
        assert s.gpu in available("gpus"), p["id"]
        s.validate()


def test_corpus_error_names_the_point_and_field(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "sources: {s: {url: 'https://x', title: t, date: '2025', set: fit}}\n"
        "points: [{id: p1, set: fit, source: s, engine: vllm, model: m, gpu: h200, tp: 1, dataset: random}]\n")
    with pytest.raises(fidelity.CorpusError, match=r"bad.yaml: point p1: missing num_prompts, published"):
        fidelity.load_corpus(tmp_path)


def test_a_point_naming_an_unknown_gpu_is_one_line_before_any_replay(tmp_path, capsys, monkeypatch):
    (tmp_path / "x.yaml").write_text(
        "sources: {s: {url: 'https://x', title: t, date: '2025', set: fit}}\n"
        "points: [{id: p1, set: fit, source: s, engine: vllm, model: m, model_profile: llama-3.1-8b, gpu: h300,"
        " tp: 1, dataset: random, num_prompts: 2, input_len: 10, output_len: 2, published: {total_tok_s: 1}}]\n")
    monkeypatch.setattr(sys, "argv", ["replay.py", "--corpus", str(tmp_path), "--out", str(tmp_path / "out")])
    assert replay.main() == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "x.yaml: point p1" in err and "h300" in err and "h100-sxm" in err


def test_random_dataset_lengths_follow_range_ratio_and_published_totals():
    p = {"id": "x", "dataset": "random", "num_prompts": 500, "input_len": 2000, "output_len": 100,
         "range_ratio": 0.0, "total_output_tokens": 45_000}
    ins, outs = fidelity.lengths(p, np.random.default_rng(0))
    assert (ins == 2000).all()
    assert outs.mean() == pytest.approx(90, rel=0.05) and outs.max() <= 100     # early EOS, as published
    ins2, _ = fidelity.lengths({**p, "range_ratio": 0.5}, np.random.default_rng(0))
    assert ins2.min() >= 1000 and ins2.max() <= 3000 and ins2.std() > 100


def test_sglang_random_lengths_are_uniform_up_to_the_length_with_the_published_means():
    # sglang.bench_serving --random-range-ratio 0 draws 1..L, not vLLM's fixed L
    p = {"id": "x", "dataset": "random", "length_sampling": "sglang", "num_prompts": 80, "input_len": 8000,
         "output_len": 1000, "range_ratio": 0.0, "total_input_tokens": 300_020, "total_output_tokens": 41_589}
    ins, outs = fidelity.lengths(p, np.random.default_rng(0))
    assert ins.min() >= 1 and ins.max() <= 8000 and ins.std() > 1000
    assert ins.sum() == pytest.approx(300_020, rel=0.01) and outs.sum() == pytest.approx(41_589, rel=0.01)
    fixed, _ = fidelity.lengths({**p, "range_ratio": 1.0}, np.random.default_rng(0))
    assert (fixed == 8000).all()


def test_sharegpt_lengths_are_kept_as_the_benchmark_clients_keep_them():
    ins, outs = fidelity.sharegpt_like(1000, 219.2, 200.8, np.random.default_rng(0))
    assert len(ins) == 1000 and ins.min() >= 4 and outs.min() >= 4
    assert ins.max() <= 1024 and (ins + outs).max() <= 2048          # vLLM's is_valid_sequence defaults
    assert ins.mean() == pytest.approx(219.2, rel=0.05) and outs.mean() == pytest.approx(200.8, rel=0.05)
    assert np.percentile(outs, 99) > 4 * np.median(outs)             # a long tail, as ShareGPT answers have


def test_replaying_a_corpus_point_measures_every_published_metric(corpus):
    _, points = corpus
    p = next(q for q in points if q["id"] == "r1-h200-vllm-tp8-sharegpt-c4")
    r = fidelity.run_point(p)
    assert r["requests"] == p["num_prompts"] and r["failed"] == 0
    assert set(p["published"]) <= set(r["sim"])
    assert all(math.isfinite(v) and v > 0 for v in r["sim"].values())


def test_replays_use_the_batch_limits_each_engine_picks_for_the_gpu(corpus):
    """A published run that set no batch flags ran with the engine's per-GPU defaults (vLLM: 256 / 2048 on A100,
    1024 / 8192 on larger GPUs; SGLang: 16384-token chunks from 160 GiB), and the replay must use the same."""
    _, points = corpus
    limits = {}
    for p in points:
        if "max_num_seqs" not in p and "max_num_batched_tokens" not in p and p.get("engine_version", "").startswith(
            ("0.10", "0.11", "0.5")
        ):
            s = fidelity.settings_for(p)
            limits[(p["engine"], p["gpu"])] = (s.max_num_seqs, s.max_num_batched_tokens)
    assert limits[("vllm", "a100-sxm")] == (256, 2048)
    assert limits[("vllm", "h100-sxm")] == (1024, 8192)
    assert limits[("sglang", "b200")][1] == 16384
    assert limits[("sglang", "h100-sxm")][1] == 8192


def test_chat_requests_are_replayed_with_their_template_and_counted_as_the_client_counts(corpus):
    """gpustack's client sent chat requests: the engine prefilled the rendered prompt (gpt-oss: a ~59-token system
    message every request shares, then 6 tokens of its own), while the published totals count the dataset's prompts
    only. Raw-text clients (SGLang's bench_serving) add nothing."""
    _, points = corpus
    chat = next(q for q in points if q["id"] == "oss120-h100-vllm-tp1-random-128")
    raw = next(q for q in points if q["id"].startswith("r1-b200-sglang"))
    assert chat["api"] == "chat" and raw["api"] == "completions"
    assert fidelity.template_tokens(raw) == (0, 0) and sum(fidelity.template_tokens(chat)) == 65
    wl = fidelity.workload(chat)
    reqs = [s.requests[0] for s in wl.sessions]
    assert {r.prompt_len for r in reqs} == {128 + 65}
    shared = {r.blocks[:3] for r in reqs}
    assert len(shared) == 1                                          # the system message's 3 full blocks: one prefix
    assert len({r.blocks[3] for r in reqs}) == len(reqs)          # then every prompt its own
    plain = fidelity.workload(dict(chat, api="completions"))
    assert {s.requests[0].prompt_len for s in plain.sessions} == {128}
    # throughput counts the client's tokens: the template's are prefilled but not in the published total
    one = dict(chat, num_prompts=20, total_input_tokens=20 * 128, total_output_tokens=20 * 4)
    sim = fidelity.run_point(one)["sim"]
    assert sim["total_tok_s"] / sim["output_tok_s"] == pytest.approx((128 + 4) / 4, rel=1e-6)


# -- the model fixes -----------------------------------------------------------------------------
def test_gpu_memory_is_what_the_device_reports():
    assert load_gpu("h200").memory_gib == pytest.approx(143771 / 1024, abs=0.1)     # nvidia-smi MiB
    assert load_gpu("b200").memory_gib == pytest.approx(183359 / 1024, abs=0.1)


def test_deepseek_r1_fp8_starts_on_four_b200_with_default_flags():
    s = EngineSettings(model="deepseek-ai/DeepSeek-R1-0528", gpu="b200", tensor_parallel_size=4)
    engine = Router(s)
    assert engine.num_blocks * s.block_size > 20_000      # room for real requests, not a token or two


def test_new_profiles_load_with_their_shapes():
    for name in ("b300", "mi355x", "a100-sxm"):
        assert load_gpu(name).hbm_gbps > 0
    q = load_model("qwen3-235b-a22b")
    assert q.weight_params / 1e9 == pytest.approx(235, rel=0.01)
    oss = load_model("gpt-oss-120b")
    assert oss.weight_params / 1e9 == pytest.approx(116.8, rel=0.01)
    # MXFP4 experts: ~62 GiB of weights, so it fits on one 80 GB GPU as published
    pm = PerfModel(load_gpu("h100-sxm"), oss)
    assert pm.weight_bytes_gpu / 2 ** 30 < 65
    assert pm.kv_capacity_tokens(0.9) > 10_000


def test_the_added_models_match_their_published_sizes_and_fit_where_the_pages_ran_them():
    for name, total in (("qwen3-14b", 14.8), ("qwen3-32b", 32.8), ("gpt-oss-20b", 20.9)):
        assert load_model(name).weight_params / 1e9 == pytest.approx(total, rel=0.01), name
    # gpustack ran Qwen3-32B BF16 on one A100 with --max-model-len 32768 and 32K-token prompts on one H100
    for gpu, tokens in (("a100-sxm", 32768), ("h100-sxm", 32108)):
        assert PerfModel(load_gpu(gpu), load_model("qwen3-32b")).kv_capacity_tokens(0.9) >= tokens, gpu


def _bench_script(name: str):
    """A script of bench/fidelity/ (the package bench.fidelity) as a module."""
    import importlib

    return importlib.import_module(f"bench.fidelity.{name}")


GPUSTACK_PAGE = """# Optimizing Qwen3-14B Throughput on NVIDIA H100 GPUs
### Hardware

A single NVIDIA H100 SXM GPU.

### Engine Version

- vLLM: v0.11.0
- SGLang: v0.5.5.post1

vLLM
??? info "Serving script"
    ```bash
    vllm serve Qwen/Qwen3-14B --async-scheduling
    ```
??? info "Benchmark result"
    ```
    ============ Serving Benchmark Result ============
    Successful requests:                     1000
    Total input tokens:                      217393
    Total generated tokens:                  201648
    Output token throughput (tok/s):         3173.92
    Total Token throughput (tok/s):          6595.66
    Mean TTFT (ms):                          22141.21
    Mean TPOT (ms):                          226.03
    ==================================================
    # --max-num-batched-tokens 4096
    ============ Serving Benchmark Result ============
    Successful requests:                     1000
    Total input tokens:                      217393
    Total generated tokens:                  201000
    Total Token throughput (tok/s):          6600.00
    ==================================================
    ```
??? info "Serving script"
    ```bash
    trtllm-serve Qwen/Qwen3-14B
    ```
??? info "Benchmark result"
    ```
    ============ Serving Benchmark Result ============
    Successful requests:                     1000
    Total input tokens:                      217393
    Total generated tokens:                  201612
    Total Token throughput (tok/s):          8315.15
    ==================================================
    ```
??? info "Serving script"
    ```bash
    python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B-FP8 --attention-backend=triton
    ```
??? info "Benchmark result"
    ```
    ============ Serving Benchmark Result ============
    Successful requests:                     1000
    Total input tokens:                      217393
    Total generated tokens:                  201602
    Total Token throughput (tok/s):          10055.13
    ==================================================
    ```
??? info "Baseline serving script"
    ```bash
    python3 -m sglang.launch_server --model-path Qwen/Qwen3-14B-FP8
    ```
??? info "Baseline benchmark results"
    ```bash
    # random 32K input
    ============ Serving Benchmark Result ============
    Successful requests:                     100
    Total input tokens:                      3200000
    Total generated tokens:                  9855
    Total Token throughput (tok/s):          8298.56
    Mean TTFT (ms):                          191024.43
    ==================================================
    ```
"""


def test_gpustack_pages_are_read_into_points_with_their_flags_workloads_and_figures(tmp_path, capsys):
    mod = _bench_script("import_gpustack")
    page = tmp_path / "h100.md"
    page.write_text(GPUSTACK_PAGE)
    pts = mod.points(page, "src", "fit", "q14", "Qwen/Qwen3-14B")
    assert [p["id"] for p in pts] == ["q14-h100-vllm-async-sharegpt", "q14-h100-vllm-async-mbt4k-sharegpt",
                                      "q14-h100-sglang-fp8-random-32k"]
    first, second, third = pts
    assert first["async_scheduling"] and first["gpu"] == "h100-sxm" and first["gpus"] == 1
    assert first["engine_version"] == "0.11.0" and first["model_profile"] == "qwen3-14b"
    assert first["published"] == {"output_tok_s": 3173.92, "total_tok_s": 6595.66, "ttft_mean_ms": 22141.21,
                                  "tpot_mean_ms": 226.03}
    assert (first["num_prompts"], first["total_input_tokens"], first["total_output_tokens"]) == (1000, 217393, 201648)
    assert GPUSTACK_PAGE.splitlines()[first["quote_line"] - 1].strip().startswith("=====")
    assert second["max_num_batched_tokens"] == 4096          # the block's "# --flag" label
    assert (third["engine"], third["engine_version"], third["precision"]) == ("sglang", "0.5.5.post1", "fp8")
    assert (third["dataset"], third["input_len"], third["output_len"]) == ("random", 32000, 100)
    err = capsys.readouterr().err
    assert "TensorRT-LLM, not modelled" in err and "--attention-backend triton, not modelled" in err
    assert "command names Qwen/Qwen3-32B-FP8 on the Qwen/Qwen3-14B page" in err


def _ix_row(**over):
    """One InferenceX /benchmarks row, shaped as the dashboard's API answers (figures in seconds, per GPU)."""
    row = {"hardware": "h200", "framework": "sglang", "model": "dsr1", "precision": "fp8", "spec_method": "none",
           "disagg": False, "is_multinode": False, "prefill_tp": 8, "decode_tp": 8, "decode_ep": 1,
           "num_decode_gpu": 8, "isl": 1024, "osl": 8192, "conc": 16, "image": "lmsysorg/sglang:v0.5.9-cu130",
           "date": "2026-03-25", "run_url": "https://github.com/SemiAnalysisAI/InferenceX/actions/runs/1/attempts/1",
           "metrics": {"tput_per_gpu": 138.5, "output_tput_per_gpu": 123.0, "mean_ttft": 0.25, "median_ttft": 0.2,
                       "p99_ttft": 1.5, "mean_tpot": 0.0125, "median_tpot": 0.0124, "p99_tpot": 0.013,
                       "median_e2el": 100.0}}
    row.update(over)
    return row


def test_inferencex_rows_become_validation_points_with_their_scripts_flags_and_whole_node_figures(capsys):
    mod = _bench_script("import_inferencex")
    rows = [_ix_row(), _ix_row(hardware="b200", decode_tp=4, prefill_tp=4, num_decode_gpu=4, isl=8192, osl=1024,
                               conc=32, image="lmsysorg/sglang:v0.5.12-cu130"),
            _ix_row(framework="trt"), _ix_row(spec_method="mtp"), _ix_row(precision="fp4"),
            _ix_row(hardware="mi325x"), _ix_row(decode_ep=8, num_decode_gpu=64), _ix_row(disagg=True), _ix_row()]
    h200, b200 = mod.points(rows)
    assert h200["id"] == "ix-dsr1-h200-sglang-tp8-1k-8k-c16" and h200["set"] == "validation"
    assert (h200["engine_version"], h200["model_profile"], h200["gpus"]) == ("0.5.9", "deepseek-v3", 8)
    assert (h200["num_prompts"], h200["concurrency"], h200["range_ratio"]) == (160, 16, 0.8)
    assert h200["length_sampling"] == "sglang" and h200["prefix_caching"] is False
    assert (h200["max_num_seqs"], h200["max_num_batched_tokens"], h200["gpu_memory_utilization"]) == (256, 32768, 0.82)
    assert h200["published"] == {"total_tok_s": 1108.0, "output_tok_s": 984.0, "ttft_mean_ms": 250.0,
                                 "ttft_median_ms": 200.0, "ttft_p99_ms": 1500.0, "tpot_mean_ms": 12.5,
                                 "tpot_median_ms": 12.4, "tpot_p99_ms": 13.0, "e2e_median_ms": 100000.0}
    assert (b200["tp"], b200["max_num_seqs"], b200["max_num_batched_tokens"]) == (4, 32, 8192)
    assert b200["gpu_memory_utilization"] == 0.95 and b200["kv_cache_dtype"] == "fp8_e4m3"
    assert b200["published"]["total_tok_s"] == pytest.approx(138.5 * 4)
    err = capsys.readouterr().err
    for reason in ("engine trt is not modelled", "speculative decoding (mtp)", "no FP4 profile",
                   "GPU mi325x has no profile", "64 decode GPUs at TP 8", "disaggregated",
                   "repeats an earlier row"):
        assert reason in err, reason
    fidelity.settings_for(h200).validate()  # the flags are ones the replay accepts
    assert fidelity.settings_for(b200).gpu_memory_utilization == 0.95
    # --spread: the same configuration on two nights, 12.4 ms then 18.6 ms median TPOT; TRT-LLM rows ignored
    later = _ix_row(metrics={**_ix_row()["metrics"], "median_tpot": 0.0186, "tput_per_gpu": 97.0})
    (line,) = mod.spread([_ix_row(), later, _ix_row(framework="trt")])
    assert line.split()[:2] == ["h200", "1"] and "TPOT max/min 1.50" in line and "throughput 1.43" in line


def test_a_point_whose_requests_all_fail_in_the_replay_says_so():
    p = {"id": "too-long", "set": "fit", "source": "s", "engine": "vllm", "model": "m", "model_profile": "llama-3.1-8b",
         "gpu": "h100-sxm", "tp": 1, "dataset": "random", "num_prompts": 2, "input_len": 9000, "output_len": 2,
         "max_model_len": 4096, "published": {"total_tok_s": 1.0}}
    with pytest.raises(fidelity.CorpusError, match="point too-long: no simulated request succeeded"):
        fidelity.run_point(p)


def test_decode_batches_within_the_cuda_graph_pay_less_overhead_than_mixed_ones():
    eng = replace(load_engine("vllm"), eager_layer_overhead_scale=2.0, cuda_graph_max_batch=512, seq_overhead_us=0)
    pm = PerfModel(load_gpu("h200"), load_model("deepseek-v3"), tp=8, engine=eng)
    graphed = pm.cost([BatchSummary(decode_seqs=64, decode_ctx=64 * 1000)])
    mixed = pm.cost([BatchSummary(decode_seqs=64, decode_ctx=64 * 1000, prefill_seqs=1, prefill_tokens=1,
                                  prefill_pairs=1, prefill_ctx=1)])
    wide = pm.cost([BatchSummary(decode_seqs=600, decode_ctx=600 * 1000)])
    assert mixed.overhead_s > graphed.overhead_s and wide.overhead_s == mixed.overhead_s
    assert mixed.overhead_s - graphed.overhead_s == pytest.approx(
        load_model("deepseek-v3").layer_overhead_us * 61 * 1e-6, rel=1e-9)


def test_graph_less_batches_pay_cpu_launches_that_a_newer_gpu_does_not_shrink():
    """Under CUDA graphs the per-layer gaps shrink (B200's, and SGLang's measured ones), but SGLang's prefill batches launch every
    kernel from the CPU: that cost is the same on B200 as on H200, and larger under ROCm (MI300X)."""
    eng = replace(load_engine("sglang"), seq_overhead_us=0)
    model = load_model("deepseek-v3")
    mixed = [BatchSummary(decode_seqs=8, decode_ctx=8000, prefill_seqs=1, prefill_tokens=1, prefill_pairs=1,
                          prefill_ctx=1)]
    decode = [BatchSummary(decode_seqs=8, decode_ctx=8000)]
    per_layer = model.layer_overhead_us * 1e-6 * model.layers
    launches = {}
    for gpu in ("h200", "b200", "mi300x"):
        pm = PerfModel(load_gpu(gpu), model, tp=8, engine=eng)
        # the graphed gap: SGLang's measured one for DeepSeek where the profile has it (layer_overhead_scales)
        graphed = model.layer_overhead_scale("sglang", gpu, load_gpu(gpu).layer_overhead_scale)
        launches[gpu] = pm.cost(mixed).overhead_s - pm.cost(decode).overhead_s + per_layer * graphed
    assert launches["b200"] == pytest.approx(launches["h200"], rel=1e-9)
    assert launches["h200"] == pytest.approx(per_layer * eng.eager_layer_overhead_scale, rel=1e-9)
    assert launches["mi300x"] == pytest.approx(launches["h200"] * load_gpu("mi300x").launch_overhead_scale, rel=1e-9)
    assert load_gpu("mi300x").launch_overhead_scale > 1
    # vLLM's piecewise graphs: a mixed batch on B200 pays at least Hopper's per-layer cost, no more
    vllm = PerfModel(load_gpu("b200"), model, tp=8, engine=replace(load_engine("vllm"), seq_overhead_us=0))
    assert vllm.cost(mixed).overhead_s - vllm.cost(decode).overhead_s == pytest.approx(
        per_layer * (1 - load_gpu("b200").layer_overhead_scale), rel=1e-9)


def test_cpu_per_sequence_adds_to_the_step_unless_async_scheduling_overlaps_it():
    eng = replace(load_engine("vllm"), seq_overhead_us=50)
    batch = [BatchSummary(decode_seqs=1000, decode_ctx=1000 * 500)]
    sync = PerfModel(load_gpu("h100-sxm"), load_model("llama-3.1-8b"), engine=eng)
    overlap = PerfModel(load_gpu("h100-sxm"), load_model("llama-3.1-8b"), engine=eng, async_scheduling=True)
    none = PerfModel(load_gpu("h100-sxm"), load_model("llama-3.1-8b"), engine=replace(eng, seq_overhead_us=0))
    gpu = none.step_time(batch)
    assert sync.step_time(batch) == pytest.approx(gpu + 1000 * 50e-6)
    assert overlap.step_time(batch) == pytest.approx(max(gpu, 1000 * 50e-6))
    assert overlap.step_time(batch) < sync.step_time(batch)


def single_turn(n: int, isl: int = 1000, osl: int = 64) -> Workload:
    blocks = math.ceil(isl / 16)
    return Workload("w", 16, 32000, [Session(f"q{i}", [Request(0, tuple(range(i * blocks + 1, (i + 1) * blocks + 1)),
                                                               isl, osl, 0.0)]) for i in range(n)])


def test_ttft_has_a_tail_at_low_load_and_virtual_time_repeats_exactly():
    s = EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm")
    wl = single_turn(200)
    a = simulate(wl, s, SimLoad(mode="closed", level=2, warmup_s=0, duration_s=1e6, drain_s=1e6, max_requests=200, seed=7))
    b = simulate(wl, s, SimLoad(mode="closed", level=2, warmup_s=0, duration_s=1e6, drain_s=1e6, max_requests=200, seed=7))
    pd.testing.assert_frame_equal(a, b)                    # same records twice
    ttft = a.first_token_s - a.sent_s
    # each request has its own front-end delay: TTFT spreads into a tail (it took a handful of values before)
    assert ttft.round(9).nunique() > 150 and ttft.quantile(0.99) > 1.25 * ttft.median()
    c = simulate(wl, s, SimLoad(mode="closed", level=2, warmup_s=0, duration_s=1e6, drain_s=1e6, max_requests=200, seed=8))
    assert not np.allclose(c.first_token_s - c.sent_s, ttft)   # the seed moves it


def test_front_end_jitter_is_independent_across_neighbouring_request_ids():
    """The first ten requests of a low-load run (q0:0 ... q9:0) must each draw their own delay: a linear hash
    (CRC32) gave them factors of 1.07-1.12, so a short run had no TTFT tail at all."""
    front = FrontEnd(load_engine("vllm"))
    first_ten = np.log([front.jitter(f"q{i}:0") for i in range(10)])
    many = np.log([front.jitter(f"q{i}:0") for i in range(2000)])
    sigma = load_engine("vllm").frontend_jitter_sigma
    assert first_ten.std() > sigma / 2
    assert many.std() == pytest.approx(sigma, rel=0.1)


def test_pairwise_ordering_and_per_source_lines():
    rows = [{"set": "validation", "id": f"p{i}", "source": "s", "gpu": "h200", "metric": "tpot_median_ms",
             "published": pub, "simulated": sim, "ratio": sim / pub}
            for i, (pub, sim) in enumerate([(10, 12), (20, 18), (30, 40), (30, 35)])]
    # pairs with distinct published values: (0,1) agree, (0,2) agree, (0,3) agree, (1,2) agree, (1,3) agree
    assert replay.ordering(rows) == (5, 5)
    rows[1]["simulated"] = 50.0
    assert replay.ordering(rows) == (3, 5)  # p1 now above p2 and p3: two pairs flip
    lines = replay.source_lines(rows, {"s": {"tpot": {"h200": 1.21}}})
    text = "\n".join(lines)
    assert "tpot spread between nights: h200 +-10% (x1.21)" in text and "tpot_median_ms 60% of 5" in text


def test_ttft_is_reported_apart_with_how_each_sources_client_paced_its_requests():
    def row(src, metric, ratio, gpu="h200"):
        return {"set": "validation", "id": f"{src}-{metric}", "source": src, "gpu": gpu, "model": "m", "engine": "e",
                "regime": "r", "metric": metric, "published": 10.0, "simulated": 10.0 * ratio, "ratio": ratio}

    rows = [row("a", "tpot_median_ms", 1.1), row("a", "ttft_median_ms", 3.0), row("b", "total_tok_s", 0.5, "b200")]
    text = "\n".join(replay.summary_lines(rows))
    assert "no TTFT     2 values  +-15%:  50%" in text and "TTFT only   1 values  +-15%:   0%" in text
    assert "no TTFT, gpu h200              1 values  +-15%: 100%" in text
    lines = "\n".join(replay.source_lines(rows, {}, {"a": "closed loop at --max-concurrency", "b": ""}))
    assert "[val] a: 2 points" in lines and "client: closed loop at --max-concurrency" in lines
    assert "client: pacing not stated: its TTFT is not an accuracy figure" in lines
    ix = "\n".join(replay.source_lines([row("inferencex-dsr1-fp8", "tpot_median_ms", 1.0)], {}, {}))
    assert "not replayed: 2 x C warm-up requests" in ix
