"""Measured per-operation kernel timings for ``benchcamp calibrate --kernel-tables`` (IO).

The tables are aiconfigurator-core's (NVIDIA, Apache-2.0, PyPI ``aiconfigurator-core``, pinned in pyproject.toml):
``aiconfigurator_core/systems/data/<system>/<operation>/<backend>/<version>/*.parquet``, timings in milliseconds
measured on real GPUs by its collectors. They ship inside the wheel and are read offline (no network at run time).
This module turns the ones the perf model has an operation for into one frame of rows, each with what the perf
model would charge for it (``flops``, HBM ``bytes``, ``link_bytes``) and the measured time in seconds; the fit is
``benchcamp.calibrate.kernel_fit`` (pure).

Which rows, and why (modelling choices, stated):
- GEMM (``gemm_perf``): per (dtype, m, n, k) the fastest kernel measured (vLLM selects among them); dtypes bfloat16
  (BF16 peak), fp8 per-tensor and fp8_block (FP8 peak), nvfp4 (FP4: no perf-model peak, reported only).
  bytes = A + B at the input dtype + the BF16 output.
- attention (``context_attention_perf`` = prefill, ``generation_attention_perf`` = decode): full attention only
  (window_size 0), the fastest kernel; prefill FLOPs 4 x heads x head_dim per causal (query, key) pair; decode reads
  the K and V cache of ``step`` + 1 tokens (``step`` = tokens already cached) at the table's KV dtype.
- MLA (``mla_*_module_perf``, DeepSeek-V3's attention module with its projections): reported, not written to a
  profile (its projections are GEMMs the perf model counts elsewhere).
- MoE (``moe_perf``): ``balanced`` routing only (the perf model assumes uniform routing; the power-law rows model
  skewed routing it does not have); FLOPs 2 x 3 x hidden x inter per routed (token, expert) on this rank's share
  (tp x ep), HBM bytes = the expected distinct local experts touched (the perf model's expected_experts) x their
  weights. int4 weight-only rows are skipped (no such dtype in the perf model).
- all-reduce (``custom_allreduce_perf``, the CUDA-graph kernels decode replays): ``message_size`` is in elements
  (BF16: 2 bytes each; aiconfigurator's model passes tokens x hidden); a ring moves 2 (g - 1) / g of it.
- all-to-all (``moe_a2a_perf``, DeepEP; low-latency kernels = ``all_to_all``, the perf model's decode case,
  high-throughput = ``all_to_all_ht``, reported): dispatch FP8 (1 byte) and combine BF16 (2 bytes) of hidden x topk per token,
  (g - 1) / g of it to the other ranks, as the perf model charges.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import numpy as np
import pandas as pd

from benchcamp.calibrate.sources import CalibrateError

# benchcamp GPU profile -> aiconfigurator-core system folder
SYSTEMS = {
    "a100-sxm": "a100_sxm",
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
}
GEMM_DTYPES = {"bfloat16": ("gemm_bf16", "bf16", 2.0), "fp8": ("gemm_fp8", "fp8", 1.0)}
GEMM_DTYPES |= {"fp8_block": ("gemm_fp8_block", "fp8", 1.0), "nvfp4": ("gemm_fp4", "fp4", 0.5)}
MOE_DTYPES = {"bfloat16": ("bf16", 2.0), "fp8": ("fp8", 1.0), "fp8_block": ("fp8", 1.0), "nvfp4": ("fp4", 0.5)}
MOE_DTYPES |= {"w4a16_mxfp4": ("bf16", 0.5)}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}


def data_root() -> Path:
    """aiconfigurator-core's packaged tables (a CalibrateError, not a traceback, when it is not installed)."""
    try:
        root = Path(str(files("aiconfigurator_core") / "systems" / "data"))
    except ModuleNotFoundError as e:
        raise CalibrateError("--kernel-tables needs aiconfigurator-core (uv sync installs it)") from e
    return root


def package_version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator-core")


def versions(system: str, operation: str, backend: str, root: Path | None = None) -> list[str]:
    folder = (root or data_root()) / system / operation / backend
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _table(system: str, operation: str, backend: str, version: str, name: str, root: Path) -> pd.DataFrame | None:
    """One table at ``version`` where measured, else at the newest version there; None where none is."""
    have = versions(system, operation, backend, root)
    pick = version if version in have else (have[-1] if have else "")
    path = root / system / operation / backend / pick / f"{name}.parquet"
    if not pick or not path.exists():
        return None
    df = pd.read_parquet(path)
    df["table"] = f"{system}/{operation}/{backend}/{pick}/{name}"
    return df


def _rows(
    src: pd.DataFrame,
    op_class: object,
    peak: object,
    *,
    flops: object = 0.0,
    nbytes: object = 0.0,
    link_bytes: object = 0.0,
    group: object,
    shape: object,
    measured_s: object,
    **extra: object,
) -> pd.DataFrame:
    """One measured table's rows as the perf model's operation classes: the columns every class shares."""
    cols: dict[str, object] = {
        "op_class": op_class,
        "peak": peak,
        "flops": flops,
        "bytes": nbytes,
        "link_bytes": link_bytes,
        "group": group,
        "shape": shape,
        **extra,
        "kernel": src["kernel_source"],
        "measured_s": measured_s,
        "table": src["table"],
    }
    return pd.DataFrame(cols, index=src.index)


def _gemm(df: pd.DataFrame) -> pd.DataFrame:
    df = df[df["gemm_dtype"].isin(list(GEMM_DTYPES))]
    best = df.loc[df.groupby(["gemm_dtype", "m", "n", "k"])["latency"].idxmin()]
    cls = best["gemm_dtype"].map({k: v[0] for k, v in GEMM_DTYPES.items()})
    b_in = best["gemm_dtype"].map({k: v[2] for k, v in GEMM_DTYPES.items()})
    m, n, k = (best[c].astype(float) for c in ("m", "n", "k"))
    return _rows(
        best,
        cls,
        best["gemm_dtype"].map({k: v[1] for k, v in GEMM_DTYPES.items()}),
        flops=2 * m * n * k,
        nbytes=(m * k + n * k) * b_in + m * n * 2,
        group=best["n"].astype(str) + "x" + best["k"].astype(str),
        shape="m=" + best["m"].astype(str) + " n=" + best["n"].astype(str) + " k=" + best["k"].astype(str),
        measured_s=best["latency"] * 1e-3,
        m=best["m"],
        n=best["n"],
        k=best["k"],
    )


def _attention(df: pd.DataFrame, prefill: bool) -> pd.DataFrame:
    for col in ("window_size", "step"):  # older collections (A100's vLLM 0.14) lack them: full attention, step 0
        if col not in df:
            df[col] = 0
    df = df[(df["window_size"] == 0) & df["kv_cache_dtype"].isin(list(KV_BYTES))]
    key = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype", "step"]
    best = df.loc[df.groupby(key)["latency"].idxmin()]
    b, h, kv, d = (best[c].astype(float) for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
    kvb = best["kv_cache_dtype"].map(KV_BYTES).astype(float)
    if prefill:
        s = best["isl"].astype(float)
        flops = 4 * h * d * b * s * (s + 1) / 2
        nbytes = b * s * d * (2 * h * 2 + 2 * kv * kvb)
        ctx = best["isl"]
    else:
        c = best["step"].astype(float) + 1
        flops = 4 * h * d * b * c
        nbytes = b * c * 2 * kv * d * kvb + b * h * d * 2 * 2
        ctx = best["step"] + 1
    layout = (
        best["num_heads"].astype(str)
        + "/"
        + best["num_key_value_heads"].astype(str)
        + "/"
        + best["head_dim"].astype(str)
    )
    return _rows(
        best,
        "attention_prefill" if prefill else "attention_decode",
        "bf16",
        flops=flops,
        nbytes=nbytes,
        group=layout + "/" + best["kv_cache_dtype"],
        shape="batch=" + best["batch_size"].astype(str) + " ctx=" + ctx.astype(str) + " heads/kv/dim=" + layout,
        measured_s=best["latency"] * 1e-3,
    )


def _mla(df: pd.DataFrame, prefill: bool) -> pd.DataFrame:
    df = df[df["kv_cache_dtype"].isin(list(KV_BYTES)) & (df["tp_size"] == 1)]
    key = ["batch_size", "isl", "num_heads", "kv_cache_dtype", "gemm_type", "step"]
    best = df.loc[df.groupby(key)["latency"].idxmin()]
    b, h = best["batch_size"].astype(float), best["num_heads"].astype(float)
    kvb = best["kv_cache_dtype"].map(KV_BYTES).astype(float)
    if prefill:  # MLA prefill: q.k over 192 dims, p.v over 128, per causal pair and head
        s = best["isl"].astype(float)
        flops = 2 * (192 + 128) * h * b * s * (s + 1) / 2
        nbytes = b * s * 576 * kvb
        ctx = best["isl"]
    else:  # absorbed MLA decode: 576-dim latent keys, 512-dim values, read once per sequence
        c = best["step"].astype(float) + 1
        flops = 2 * (576 + 512) * h * b * c
        nbytes = b * c * 576 * kvb
        ctx = best["step"] + 1
    return _rows(
        best,
        "mla_prefill" if prefill else "mla_decode",
        "bf16",
        flops=flops,
        nbytes=nbytes,
        group=best["num_heads"].astype(str) + "/" + best["kv_cache_dtype"] + "/" + best["gemm_type"],
        shape="batch="
        + best["batch_size"].astype(str)
        + " ctx="
        + ctx.astype(str)
        + " heads="
        + best["num_heads"].astype(str),
        measured_s=best["latency"] * 1e-3,
    )


def _moe(df: pd.DataFrame) -> pd.DataFrame:
    df = df[(df["distribution"] == "balanced") & df["moe_dtype"].isin(list(MOE_DTYPES))]
    if df.empty:
        return pd.DataFrame()
    key = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    best = df.loc[df.groupby(key)["latency"].idxmin()]
    t, hid, inter, k, e, tp, ep = (best[c].astype(float) for c in key[1:])
    wb = best["moe_dtype"].map({k_: v[1] for k_, v in MOE_DTYPES.items()}).astype(float)
    expert = 3 * hid * inter / tp  # one expert's gate, up and down weights on this rank
    touched = e / ep * (1 - (1 - k / e) ** t)
    group = best[key[2:]].astype(str).agg("/".join, axis=1) + "/" + best["moe_dtype"]
    return _rows(
        best,
        "moe",
        best["moe_dtype"].map({k_: v[0] for k_, v in MOE_DTYPES.items()}),
        flops=2 * t * k * expert / ep,
        nbytes=touched * expert * wb + t * hid * 2 * 2,
        group=group,
        shape="tokens="
        + best["num_tokens"].astype(str)
        + " tokens/expert="
        + (t * k / e).round(2).astype(str)
        + " "
        + group,
        measured_s=best["latency"] * 1e-3,
    )


def _all_reduce(df: pd.DataFrame) -> pd.DataFrame:
    df = df[df["backend"].str.endswith("graph") & (df["allreduce_dtype"] == "bfloat16")]
    g, msg = df["num_gpus"].astype(float), df["message_size"].astype(float) * 2
    return _rows(
        df,
        "all_reduce",
        "",
        link_bytes=msg * 2 * (g - 1) / g,
        group=df["message_size"].astype(str),
        shape="gpus=" + df["num_gpus"].astype(str) + " bytes=" + (msg.astype(np.int64)).astype(str),
        measured_s=df["latency"] * 1e-3,
    )


def _all_to_all(df: pd.DataFrame) -> pd.DataFrame:
    g = df["ep_size"].astype(float)
    per = df["phase"].map({"dispatch": 1.0, "combine": 2.0})
    nbytes = df["num_tokens"].astype(float) * df["topk"] * df["hidden_size"] * per * (g - 1) / g
    return _rows(
        df,
        np.where(df["comm_backend"].str.endswith("ll"), "all_to_all", "all_to_all_ht"),
        "",
        link_bytes=nbytes,
        group=df["num_tokens"].astype(str),
        shape=df["comm_backend"]
        + " "
        + df["phase"]
        + " ep="
        + df["ep_size"].astype(str)
        + " tokens="
        + df["num_tokens"].astype(str),
        measured_s=df["latency"] * 1e-6,  # this table is in microseconds (its transmit_us = latency)
    )


def load_rows(system: str, backend: str = "vllm", version: str = "", root: Path | None = None) -> pd.DataFrame:
    """Every measured row of ``system`` (aiconfigurator-core's name) for ``backend`` at ``version`` ("" = the newest
    GEMM table's version), each operation at that version where it was measured, else at its newest (each row's
    ``table`` says which), as the perf model's operation classes (see the module docstring)."""
    root = root or data_root()
    if not version:  # one collection where it can: the GEMM table's version for every operation that has it
        gemm = versions(system, "gemm", backend, root)
        version = gemm[-1] if gemm else ""
    if not (root / system).is_dir():
        raise CalibrateError(
            f"--kernel-system {system}: not in aiconfigurator-core's tables; choose from {', '.join(sorted(SYSTEMS.values()))}"
        )
    parts = []
    specs = [
        ("gemm", "gemm_perf", _gemm),
        ("attention", "context_attention_perf", lambda d: _attention(d, True)),
        ("attention", "generation_attention_perf", lambda d: _attention(d, False)),
        ("mla", "mla_context_module_perf", lambda d: _mla(d, True)),
        ("mla", "mla_generation_module_perf", lambda d: _mla(d, False)),
        ("moe", "moe_perf", _moe),
        ("comm", "custom_allreduce_perf", _all_reduce),
        ("comm", "moe_a2a_perf", _all_to_all),
    ]
    for operation, name, convert in specs:
        df = _table(system, operation, backend, version, name, root)
        if df is not None and len(df):
            part = convert(df)
            if len(part):  # e.g. a MoE table with power-law routing only (A100's vLLM 0.14)
                parts.append(part)
    if not parts:
        raise CalibrateError(f"--kernel-system {system}: no {backend} {version or 'table'} measured there")
    out = pd.concat(parts, ignore_index=True)
    return out[out["measured_s"] > 0].reset_index(drop=True)


__all__ = ["SYSTEMS", "data_root", "load_rows", "package_version", "versions"]
