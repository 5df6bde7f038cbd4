"""Per-operation grounding of the GPU profiles (pure): the perf model's operation classes held against measured
kernel timings (``benchcamp.calibrate.kernels`` reads them from aiconfigurator-core's tables).

Each measured row carries what the perf model (``benchcamp.sim.engine.perfmodel``) would charge for it: ``flops`` at the
class's peak (the GPU profile's BF16 or FP8 figure), ``bytes`` read from HBM, and for collectives ``link_bytes``
over the link. A class's model is the perf model's roofline plus a fixed time per kernel:

    predicted = max(flops / (peak x compute_eff), bytes / (hbm x memory_eff)) + fixed        (compute classes)
    predicted = latency + link_bytes / (link_gbps x 1e9)                                      (collectives)

``fixed`` (launch and tail of one kernel) has no place of its own in the perf model, whose per-layer
``layer_overhead_us`` carries it; it is fitted so that small kernels do not bias the efficiencies. The factors are
searched on a log grid (then refined) to minimise the mean |log(predicted / measured)| over the fit split, and the
error is reported on the held-back split: rows are split by shape group (a GEMM's (n, k), an attention's head
layout, a MoE's model shape, a collective's message size), seeded, so held-back rows are shapes the fit never saw.

Outliers are found before the fit by two stated rules and are listed with their reason, never fitted:
- ``slower than the reference GPU``: a GEMM row that takes more than twice the same dtype and (m, n, k) on the
  reference GPU (H200, same backend) while this GPU's datasheet peak and HBM bandwidth are both at least the
  reference's: a newer, larger GPU running the same kernel shape at under half the speed is a kernel or collection
  defect (e.g. the B200/GB200 vLLM DeepGEMM FP8-block rows at small m: 170-560 us where H200 takes 56-60 us);
- ``off the class's roofline``: after a first fit on every remaining row, a row whose |log error| is above the
  class's median + 6 x MAD (median absolute deviation), and above log(3): a measurement no setting of the class's
  factors comes near (then the class is refitted without them).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# The class's factors and which GPU profile field each grounds (None: reported, not written to a profile).
COMPUTE_CLASSES = {
    "gemm_bf16": "compute_efficiency",
    "gemm_fp8": "compute_efficiency (fp8)",
    "gemm_fp8_block": "compute_efficiency (fp8 block)",
    "gemm_fp4": None,
    "attention_prefill": "attention efficiency (model attention_efficiency_scale x compute_efficiency)",
    "attention_decode": "memory_efficiency",
    "mla_prefill": None,
    "mla_decode": None,
    "moe": "MoE efficiency (model compute_efficiency_scale x compute_efficiency)",
}
COMM_CLASSES = {"all_reduce": "interconnect_gbps, collective_latency_us", "all_to_all": None, "all_to_all_ht": None}
OUTLIER_REFERENCE_RATIO = 2.0
OUTLIER_MADS = 6.0
OUTLIER_MIN_LOG = math.log(3.0)


@dataclass(frozen=True)
class ClassFit:
    op_class: str
    factors: dict[str, float]
    fit_rows: int
    held_rows: int
    fit_error: float  # median |predicted / measured - 1| on the fit split
    held_error: float  # the same on the held-back split
    held_within_15: float  # share of held-back rows within +-15%
    outliers: int


@dataclass
class GroundingResult:
    system: str
    backend: str
    fits: dict[str, ClassFit] = field(default_factory=dict)
    outliers: pd.DataFrame = field(default_factory=pd.DataFrame)


def held_back(groups: pd.Series, seed: int, share: float = 0.25) -> np.ndarray:
    """True for rows whose group falls in the held-back share (a stable hash of the group and the seed)."""

    def pick(g: str) -> bool:
        h = hashlib.sha256(f"{seed}:{g}".encode()).digest()
        return int.from_bytes(h[:4], "big") / 2**32 < share

    cache = {g: pick(g) for g in groups.unique()}
    return groups.map(cache).to_numpy(dtype=bool)


def predict_compute(rows: pd.DataFrame, peak_tflops: float, hbm_gbps: float, f: dict[str, float]) -> np.ndarray:
    c = rows["flops"].to_numpy() / (peak_tflops * 1e12 * f["compute_eff"])
    m = rows["bytes"].to_numpy() / (hbm_gbps * 1e9 * f["memory_eff"])
    return np.maximum(c, m) + f["fixed_us"] * 1e-6


def predict_comm(rows: pd.DataFrame, f: dict[str, float]) -> np.ndarray:
    return f["latency_us"] * 1e-6 + rows["link_bytes"].to_numpy() / (f["link_gbps"] * 1e9)


def _score(pred: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(np.log(pred / measured))))


def _search(score, start: dict[str, float], bounds: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Coordinate search on a log scale: each factor over a grid inside its bounds, then finer grids around the best."""
    best = dict(start)
    for width in (None, 0.3, 0.08, 0.02):
        for _ in range(2):
            for k, (lo, hi) in bounds.items():
                if width is None:
                    grid = np.geomspace(lo, hi, 41)
                else:
                    grid = np.clip(best[k] * np.exp(np.linspace(-width, width, 13)), lo, hi)
                vals = [score({**best, k: float(v)}) for v in grid]
                best[k] = float(grid[int(np.argmin(vals))])
    return best


def _errors(pred: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    if not len(measured):
        return math.nan, math.nan
    rel = np.abs(pred / measured - 1)
    return float(np.median(rel)), float(np.mean(rel <= 0.15))


def reference_outliers(gemm: pd.DataFrame, reference: pd.DataFrame, name: str) -> pd.Series:
    """Rule 1 (``slower than the reference GPU``) over GEMM rows of one GPU and backend: a reason per outlier row,
    "" else. ``reference``: the same backend's GEMM rows on a GPU with at most this one's datasheet peak and HBM
    bandwidth (the caller checks), ``name`` its name."""
    key = ["op_class", "m", "n", "k"]
    ref = gemm.join(reference.groupby(key)["measured_s"].min().rename("ref_s"), on=key)["ref_s"]
    bad = gemm["measured_s"] > OUTLIER_REFERENCE_RATIO * ref
    text = [
        f"slower than {name}: {s * 1e6:.0f} us vs {r * 1e6:.1f} us on {name} for the same dtype, m, n, k" if b else ""
        for s, r, b in zip(gemm["measured_s"], ref, bad)
    ]
    return pd.Series(text, index=gemm.index, dtype=object)


def fit_class(
    rows: pd.DataFrame,
    op_class: str,
    seed: int,
    peak_tflops: float = 0.0,
    hbm_gbps: float = 0.0,
    reasons: pd.Series | None = None,
) -> tuple[ClassFit, pd.DataFrame]:
    """Fit one class's factors on its fit split, score the held-back split; returns the fit and its outliers
    (rows with a ``reason``). ``reasons``: outlier reasons found before the fit (rule 1), "" for none."""
    rows = rows.copy()
    rows["reason"] = reasons.reindex(rows.index).fillna("") if reasons is not None else ""
    comm = op_class in COMM_CLASSES
    if comm:
        start = {"latency_us": 10.0, "link_gbps": 200.0}
        bounds = {"latency_us": (0.5, 2000.0), "link_gbps": (1.0, 2000.0)}

        def predict(r: pd.DataFrame, f: dict[str, float]) -> np.ndarray:
            return predict_comm(r, f)
    else:
        start = {"compute_eff": 0.6, "memory_eff": 0.8, "fixed_us": 3.0}
        bounds = {"compute_eff": (0.02, 1.0), "memory_eff": (0.05, 1.0), "fixed_us": (0.1, 60.0)}

        def predict(r: pd.DataFrame, f: dict[str, float]) -> np.ndarray:
            return predict_compute(r, peak_tflops, hbm_gbps, f)

    held = held_back(rows["group"].astype(str), seed)
    measured = rows["measured_s"].to_numpy()

    def fit_on(mask: np.ndarray) -> dict[str, float]:
        sub = rows[mask]
        meas = measured[mask]
        return _search(lambda f: _score(predict(sub, f), meas), start, bounds)

    clean = (rows["reason"] == "").to_numpy()
    if not (clean & ~held).any():
        raise ValueError(f"{op_class}: no row left to fit (every row is held back or an outlier)")
    factors = fit_on(clean & ~held)
    # Rule 2: rows off the class's roofline, then refit without them.
    logerr = np.abs(np.log(predict(rows, factors) / measured))
    med = float(np.median(logerr[clean]))
    mad = float(np.median(np.abs(logerr[clean] - med)))
    off = clean & (logerr > max(med + OUTLIER_MADS * mad, OUTLIER_MIN_LOG))
    if off.any():
        rows.loc[off, "reason"] = [
            f"off the {op_class} roofline: {m * 1e6:.1f} us measured vs {p * 1e6:.1f} us at the class's fit "
            f"(|log error| > median + {OUTLIER_MADS:g} MAD and > log 3)"
            for m, p in zip(measured[off], predict(rows[off], factors))
        ]
        clean = clean & ~off
        factors = fit_on(clean & ~held)
    pred = predict(rows, factors)
    fit_err, _ = _errors(pred[clean & ~held], measured[clean & ~held])
    held_err, within = _errors(pred[clean & held], measured[clean & held])
    out = rows[rows["reason"] != ""]
    return (
        ClassFit(
            op_class,
            {k: round(v, 4) for k, v in factors.items()},
            int((clean & ~held).sum()),
            int((clean & held).sum()),
            fit_err,
            held_err,
            within,
            len(out),
        ),
        out,
    )


def ground(
    system: str,
    backend: str,
    rows: pd.DataFrame,
    peaks: dict[str, float],
    hbm_gbps: float,
    seed: int = 0,
    max_rows: int = 6000,
    reference: pd.DataFrame | None = None,
    reference_name: str = "",
) -> GroundingResult:
    """Fit every class present in ``rows`` (``benchcamp.calibrate.kernels.load_rows``'s frame). ``peaks``: the
    GPU profile's peak TFLOP/s per class's ``peak`` column value (bf16, fp8, fp4). Classes with more than
    ``max_rows`` rows are subsampled (seeded) for the fit's speed. ``reference``: rule 1's reference rows (see
    the module docstring), None to skip rule 1."""
    res = GroundingResult(system, backend)
    gemm = rows[rows["op_class"].str.startswith("gemm_")]
    if reference is not None and len(gemm):
        pre = reference_outliers(gemm, reference[reference["op_class"].str.startswith("gemm_")], reference_name)
    else:
        pre = pd.Series("", index=gemm.index)
    outs = [gemm[pre != ""].assign(reason=pre[pre != ""], system=system, backend=backend)]
    rows = rows.drop(index=pre.index[pre != ""])
    for op_class in [c for c in (*COMPUTE_CLASSES, *COMM_CLASSES) if c in set(rows["op_class"])]:
        sub = rows[rows["op_class"] == op_class]
        if len(sub) > max_rows:
            sub = sub.sample(max_rows, random_state=seed)
        peak = peaks.get(str(sub["peak"].iloc[0]), 0.0) if "peak" in sub else 0.0
        if op_class in COMPUTE_CLASSES and not peak:
            continue
        fit, out = fit_class(sub, op_class, seed, peak, hbm_gbps)
        n_pre = int((pre != "").sum()) if op_class.startswith("gemm_") else 0
        n_pre = int((gemm[pre != ""]["op_class"] == op_class).sum()) if n_pre else 0
        res.fits[op_class] = ClassFit(**{**fit.__dict__, "outliers": fit.outliers + n_pre})
        outs.append(out.assign(system=system, backend=backend))
    res.outliers = pd.concat(outs) if outs else pd.DataFrame()
    return res


__all__ = [
    "COMM_CLASSES",
    "COMPUTE_CLASSES",
    "ClassFit",
    "GroundingResult",
    "fit_class",
    "ground",
    "grounded_figures",
    "held_back",
    "predict_comm",
    "predict_compute",
    "reference_outliers",
]


def grounded_figures(fits: dict[str, ClassFit]) -> dict[str, tuple[float, str]]:
    """The GPU profile fields the fitted classes ground, each with the class it came from and that class's
    held-back error: compute_efficiency from BF16 dense GEMMs, fp8_compute_efficiency from FP8 block-scaled GEMMs
    (the shipped FP8 models' format; per-tensor FP8 where no block rows are left); its compute factor is set by the
    compute-bound (large m) rows, which rule 1 leaves on Blackwell, memory_efficiency from the memory-bound BF16 GEMMs' fit (streaming
    weights, the bulk of a decode step's bytes; decode attention's own bandwidth varies 0.3-0.9 of the datasheet's
    with the kernel and head layout, so it is reported, not written), interconnect_gbps and collective_latency_us from all-reduce."""
    out: dict[str, tuple[float, str]] = {}

    def note(c: str) -> str:
        f = fits[c]
        return (
            f"{c} (median |error| held back {f.held_error:.1%}, {f.held_within_15:.0%} within +-15%, "
            f"{f.held_rows} held-back / {f.fit_rows} fit rows)"
        )

    if "gemm_bf16" in fits:
        out["compute_efficiency"] = (fits["gemm_bf16"].factors["compute_eff"], note("gemm_bf16"))
    # FP8 block-scaled first: every FP8 model benchcamp ships is a 128x128 block-scaled checkpoint (DeepGEMM or
    # CUTLASS block kernels); per-tensor FP8 where no block rows are left to fit.
    usable = [c for c in ("gemm_fp8_block", "gemm_fp8") if c in fits and fits[c].fit_rows >= 50]
    if usable:
        fp8 = usable[0]
        out["fp8_compute_efficiency"] = (fits[fp8].factors["compute_eff"], note(fp8))
    if "gemm_bf16" in fits:
        out["memory_efficiency"] = (fits["gemm_bf16"].factors["memory_eff"], note("gemm_bf16"))
    if "all_reduce" in fits:
        f = fits["all_reduce"].factors
        out["interconnect_gbps"] = (f["link_gbps"], note("all_reduce"))
        out["collective_latency_us"] = (f["latency_us"], note("all_reduce"))
    return out
