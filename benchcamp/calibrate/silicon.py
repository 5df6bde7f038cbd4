"""Validation on measured silicon: aiconfigurator-core's ``silicon_sample.csv`` (end-to-end TTFT and TPOT measured by
NVIDIA on real GPUs, per model, GPU, engine and version, layout, batch size, ISL/OSL) against the perf model.

VALIDATION ONLY: nothing here is fitted, and nothing in ``benchcamp calibrate`` reads these rows (its kernel-table
source is ``benchcamp.calibrate.kernels``, a different part of the package). ``check`` says why each dropped row was
dropped; ``predict`` gives each kept row's TTFT, TPOT and throughput; ``score`` the shares within +-15/30%, the median
error and the ranking agreement, per source, engine and version.

How a row is predicted (the perf model's step costs, no virtual clock, so 1,000 rows take seconds; modelling
choices): a benchmark at concurrency ``batch_size`` with fixed ISL/OSL runs in lockstep waves (every request of a
wave starts and ends together), so
- TTFT: the wave's ``batch_size`` / dp prompts per DP rank are prefilled in chunks of 8,192 tokens (vLLM's default
  token budget) before any decodes; request i's first token comes once the first i prompts are done, so the mean
  TTFT is (b + 1) / 2b of the wave's prefill time, plus one decode step;
- TPOT: the step time of a decode batch of ``batch_size`` / dp sequences per DP rank at the mean context
  ISL + OSL / 2;
- throughput per GPU, for both measured and predicted: batch x OSL / (TTFT + (OSL - 1) x TPOT) / GPUs (the
  CSV has no throughput column; the same formula on both sides).
The engine profile is ``vllm`` for vLLM rows, ``sglang`` for SGLang rows, ``vllm`` for TensorRT-LLM rows (benchcamp
has no TensorRT-LLM profile: its rows measure how far that proxy is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from benchcamp.profiles import available, load_engine, load_gpu, load_model
from benchcamp.sim.engine.perfmodel import BatchSummary, PerfModel, prefill_pairs

# aiconfigurator-core system -> benchcamp GPU profile
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200"}
GPUS |= {"gb300": "gb300", "a100_sxm": "a100-sxm"}
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "vllm"}
CHUNK = 8192


def csv_path() -> Path:
    return Path(str(files("aiconfigurator_core") / "systems" / "silicon_sample.csv"))


def read(path: str | Path | None = None) -> pd.DataFrame:
    return pd.read_csv(path or csv_path())


def _model_for(hf: str) -> str:
    low = hf.lower()
    for name in available("models"):
        if low in (n.lower() for n in load_model(name).hf_names):
            return name
    return ""


def _precision(profile: str) -> str:
    m = load_model(profile)
    if m.expert_weight_bytes and m.expert_weight_bytes < 1:
        return "fp4"
    return "fp8" if m.compute_dtype == "fp8" else "bf16"


def _n(v: float) -> int:
    return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


def check(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kept rows with their profile names, dropped rows with a ``reason`` each). The rules, in order:
    - ``disaggregated``: mode disagg (its prefill/decode worker split is not predicted here);
    - ``no GPU profile`` / ``no model profile`` (exact hf_names match only, no guess) / ``precision``: the row's
      precision is not the model profile's (e.g. an FP4 checkpoint of a model whose profile is FP8);
    - ``no measurement``: TTFT or TPOT missing or <= 0;
    - ``source``: the row cites a file on someone's machine (``source_file=/Users/...``) rather than a dated
      collection: kept, but reported as its own source group so its figures can be told apart (not dropped);
    - ``layout``: pipeline parallel, or attention DP with the MoE tensor-parallel across the DP x TP group (vLLM's
      layout without expert parallel, which benchcamp's topology cannot express), or a DP x TP that is not
      the MoE's TP x EP, or a TP that is not a power of two (e.g. TP 72 on GB200 for DeepSeek's 128 heads);
    - ``below the HBM floor``: a TPOT shorter than reading each GPU's share of the active weights once at the
      datasheet HBM bandwidth (physically impossible for one decode step; the row's definition differs, e.g. the
      Qwen3-32B H100 vLLM rows at 11.6-23 ms).
    """
    keep, drop = [], []
    for _, r in rows.iterrows():
        reason = ""
        gpu = GPUS.get(r["system"], "")
        model = _model_for(str(r["model_path"]))
        tp, dp = _n(r["tp_size"]) or 1, _n(r["attention_dp_size"]) or 1
        mtp, mep = _n(r["moe_tp_size"]) or 1, _n(r["moe_ep_size"]) or 1
        if r["mode"] != "agg":
            reason = "disaggregated: its prefill/decode worker split is not predicted here"
        elif not gpu:
            reason = f"no GPU profile for system {r['system']}"
        elif not model:
            reason = f"no model profile lists {r['model_path']}"
        elif str(r["precision"]) != _precision(model):
            reason = f"precision {r['precision']} is not {model}'s {_precision(model)}"
        elif not (r["silicon_ttft_ms"] > 0 and r["silicon_tpot_ms"] > 0):
            reason = "no measurement: TTFT or TPOT missing or <= 0"
        elif _n(r["pp_size"]) > 1:
            reason = "layout: pipeline parallel"
        elif tp & (tp - 1):
            reason = (
                f"layout: TP {tp} is not a power of two (no shipped model's attention heads divide by it; the row's "
                "TP likely counts attention-DP ranks)"
            )
        elif load_model(model).is_moe and (dp > 1 and mep == 1 or mtp * mep != tp * dp):
            reason = (
                f"layout: attention DP {dp} x TP {tp} with MoE TP {mtp} x EP {mep} (attention DP + MoE TP: a "
                "layout benchcamp's topology cannot express)"
            )
        elif not load_model(model).is_moe and dp > 1:
            reason = "layout: dense data parallel"
        else:
            m, g = load_model(model), load_gpu(gpu)
            active = (m.dense_params_b * 1e9 * m.weight_bytes) / tp
            floor_ms = active / (g.hbm_gbps * 1e9) * 1e3
            if r["silicon_tpot_ms"] < floor_ms:
                reason = (
                    f"below the HBM floor: TPOT {r['silicon_tpot_ms']:.1f} ms < {floor_ms:.1f} ms to read "
                    f"{active / 1e9:.1f} GB of dense weights per GPU at {g.hbm_gbps:g} GB/s"
                )
        row = dict(r)
        row.update(gpu=gpu, model=model, tp=tp, dp=dp, ep=mep > 1)
        src = str(r["silicon_data_source"]).split(";")[0]
        row["source"] = "local file" if src.startswith("source_file=/") else src.replace("source_file=", "")
        if reason:
            drop.append({**row, "reason": reason})
        else:
            keep.append(row)
    return pd.DataFrame(keep), pd.DataFrame(drop)


@dataclass(frozen=True)
class Prediction:
    ttft_s: float
    tpot_s: float


def predict_row(r: dict, gpus: dict[str, object] | None = None) -> Prediction:
    gpu = (gpus or {}).get(r["gpu"]) or load_gpu(r["gpu"])
    model = load_model(r["model"])
    engine = load_engine(ENGINES.get(r["backend"], "vllm"))
    tp, dp = int(r["tp"]), int(r["dp"])
    pm = PerfModel(gpu, model, tp, dp, bool(r["ep"]), 1.0 if model.weight_bytes == 1 else 2.0, engine)  # type: ignore[arg-type]
    isl, osl = int(r["isl"]), int(r["osl"])
    b = max(1, round(float(r["batch_size"]) / dp))
    ctx = isl + osl // 2
    dec = BatchSummary(decode_seqs=b, decode_ctx=b * ctx)
    t_dec = pm.step_time([dec] * dp)
    # the wave's prefills: b prompts of isl tokens in chunks of CHUNK tokens, no decode beside them
    total = b * isl
    t_pre, done = 0.0, 0
    while done < total:
        n = min(CHUNK, total - done)
        start = done % isl  # the chunk's first token's position in its prompt (chunks may span two prompts)
        part = BatchSummary(
            prefill_seqs=max(1, -(-n // isl)),
            prefill_tokens=n,
            prefill_pairs=prefill_pairs(n, start)
            if start + n <= isl
            else prefill_pairs(isl - start, start) + prefill_pairs(n - isl + start, 0),
            prefill_ctx=start,
        )
        t_pre += pm.step_time([part] * dp)
        done += n
    # request i of the wave has its first token once the first i prompts are prefilled: the mean is (b + 1) / 2b of all
    ttft = t_pre * (b + 1) / (2 * b) + t_dec
    return Prediction(ttft_s=ttft, tpot_s=t_dec)


def throughput(batch, isl, osl, ttft_s, tpot_s, gpus):  # floats or pandas Series alike
    return batch * osl / (ttft_s + (osl - 1) * tpot_s) / gpus


def predict(kept: pd.DataFrame, gpus: dict[str, object] | None = None) -> pd.DataFrame:
    out = kept.copy()
    preds = [predict_row(r, gpus) for r in kept.to_dict("records")]
    out["sim_ttft_ms"] = [p.ttft_s * 1e3 for p in preds]
    out["sim_tpot_ms"] = [p.tpot_s * 1e3 for p in preds]
    n_gpus = out["tp"] * out["dp"]
    out["thr"] = throughput(
        out["batch_size"], out["isl"], out["osl"], out["silicon_ttft_ms"] / 1e3, out["silicon_tpot_ms"] / 1e3, n_gpus
    )
    out["sim_thr"] = throughput(
        out["batch_size"], out["isl"], out["osl"], out["sim_ttft_ms"] / 1e3, out["sim_tpot_ms"] / 1e3, n_gpus
    )
    return out


def ranking(pred: pd.DataFrame) -> float:
    """Share of pairs of configurations (same model, GPU, engine, version, ISL/OSL, at the same batch size) whose
    throughput per GPU the prediction orders as measured (ties in the measurement skipped)."""
    agree = total = 0
    for _, g in pred.groupby(["model", "system", "backend", "backend_version", "isl", "osl", "batch_size"]):
        a, s = g["thr"].to_numpy(), g["sim_thr"].to_numpy()
        for i in range(len(a)):
            for j in range(i + 1, len(a)):
                if a[i] == a[j]:
                    continue
                total += 1
                agree += (a[i] > a[j]) == (s[i] > s[j])
    return agree / total if total else math.nan


def score(pred: pd.DataFrame, by: tuple[str, ...] = ("source", "backend", "backend_version")) -> pd.DataFrame:
    """Per group of ``by`` and overall: rows, share within +-15/30% and median |error| of TTFT, TPOT and
    throughput together (3 values a row), and the ranking agreement."""

    def one(g: pd.DataFrame) -> dict:
        err = np.concatenate(
            [
                np.abs(g[f"sim_{k}"] / g[m] - 1).to_numpy()
                for k, m in (("ttft_ms", "silicon_ttft_ms"), ("tpot_ms", "silicon_tpot_ms"), ("thr", "thr"))
            ]
        )
        return {
            "rows": len(g),
            "within_15": float(np.mean(err <= 0.15)),
            "within_30": float(np.mean(err <= 0.30)),
            "median_err": float(np.median(err)),
            "ranking": ranking(g),
        }

    out = [{**dict(zip(by, k if isinstance(k, tuple) else (k,))), **one(g)} for k, g in pred.groupby(list(by))]
    out.append({**{b: "all" for b in by}, **one(pred)})
    return pd.DataFrame(out)


__all__ = ["GPUS", "check", "csv_path", "predict", "predict_row", "ranking", "read", "score", "throughput"]
