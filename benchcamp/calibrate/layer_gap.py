"""The per-layer gap of a graphed decode step, grounded on aiconfigurator-core's measured per-operation tables.

The perf model charges a decode step its roofline (FLOPs, HBM bytes, collectives) plus a fixed part: the GPU's
step overhead and ``layer_overhead_us`` per layer x the GPU's (or, for one engine, the engine's per-GPU)
``layer_overhead_scale``. The roofline leaves out what a small batch costs above it: every kernel's launch and tail,
MLA's and the grouped GEMMs' distance from peak at a few tokens. That gap is what the per-layer term carries.

aiconfigurator-core (NVIDIA, Apache-2.0, PyPI, pinned in pyproject.toml) composes a decode step from its measured
per-operation tables for a given engine and version (MLA module, block-scaled FP8 GEMMs, fused MoE, all-reduce,
element-wise ops), interpolated at the shape asked. Here that composition is taken as the measured step, and the
per-layer scale that makes the perf model's step equal it is solved for at small decode batches, where the gap
dominates: scale_b = (measured step(b) - perf model step(b) without the per-layer term) / (layer_overhead_us x
layers x the engine's layer_overhead_scale), one per batch size; the profile gets their median.

No published end-to-end figure enters this (the held-out rule: bench/fidelity's validation sources never do).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from statistics import median

from benchcamp.calibrate.kernels import SYSTEMS
from benchcamp.calibrate.sources import CalibrateError
from benchcamp.profiles import load_engine, load_gpu, load_model
from benchcamp.sim.engine.perfmodel import BatchSummary, PerfModel

BATCHES = (1, 2, 4, 8)  # decode batches where the fixed gap dominates the step
CONTEXT = 1024  # tokens each decoding sequence attends over


@dataclass(frozen=True)
class GapRow:
    batch: int
    measured_ms: float  # aiconfigurator-core's composed decode step from measured tables
    roofline_ms: float  # the perf model's step without the per-layer term (roofline + collectives + step overhead)
    scale: float  # the per-layer scale that closes the difference


@dataclass(frozen=True)
class LayerGap:
    gpu: str
    engine: str
    model: str
    tp: int
    version: str  # the engine version of aiconfigurator's tables
    rows: tuple[GapRow, ...]

    @property
    def scale(self) -> float:
        return median(r.scale for r in self.rows)


def measured_steps(
    hf_model: str, system: str, backend: str, tp: int, kv_dtype: str, batches: tuple[int, ...]
) -> tuple[str, list[float]]:
    """(engine version, decode step ms per batch) from aiconfigurator-core's composition of its measured tables."""
    try:
        from aiconfigurator_core.sdk import EngineHandle
        from aiconfigurator_core.sdk.engine import _literal_backend_version
    except ModuleNotFoundError as e:
        raise CalibrateError("the layer gap needs aiconfigurator-core (uv sync installs it)") from e
    from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError

    try:
        version = _literal_backend_version(system, backend, None, None, None)
        handle = EngineHandle.compile(
            hf_model,
            system,
            backend,
            backend_version=version,
            tp_size=tp,
            moe_tp_size=tp,
            moe_ep_size=1,
            kvcache_quant_mode=kv_dtype,
        )
        # isl = the context, osl 2: one decode step at that context
        return str(version), [handle.decode_step_latency(b, CONTEXT, 2) for b in batches]
    except PerfDataNotAvailableError as e:
        raise CalibrateError(f"{system} {backend}: aiconfigurator-core has no table for {hf_model} here ({e})") from e


def roofline_steps(
    gpu: str, engine: str, model: str, tp: int, kv_bytes: float, batches: tuple[int, ...]
) -> list[float]:
    """The perf model's decode step (s) at each batch with the per-layer term set to 0, the engine overlapping its
    CPU work (SGLang's overlap scheduler, vLLM's async scheduling)."""
    eng = dataclasses.replace(load_engine(engine), layer_overhead_scale=0.0, eager_layer_overhead_scale=0.0)
    pm = PerfModel(load_gpu(gpu), load_model(model), tp=tp, kv_dtype_bytes=kv_bytes, engine=eng, async_scheduling=True)
    return [pm.cost([BatchSummary(decode_seqs=b, decode_ctx=b * CONTEXT)]).duration_s for b in batches]


def layer_gap(
    gpu: str, engine: str, model: str, hf_model: str, tp: int, kv_dtype: str = "fp8", batches: tuple[int, ...] = BATCHES
) -> LayerGap:
    if gpu not in SYSTEMS:
        raise CalibrateError(f"--gpu {gpu}: aiconfigurator-core has no tables for it; choose one of {sorted(SYSTEMS)}")
    version, measured = measured_steps(hf_model, SYSTEMS[gpu], engine, tp, kv_dtype, batches)
    base = roofline_steps(gpu, engine, model, tp, 1.0 if kv_dtype == "fp8" else 2.0, batches)
    m, eng = load_model(model), load_engine(engine)
    unit = m.layer_overhead_us * 1e-6 * m.layers * eng.layer_overhead_scale
    rows = tuple(
        GapRow(b, ms, r * 1e3, (ms * 1e-3 - r) / unit) for b, ms, r in zip(batches, measured, base, strict=True)
    )
    return LayerGap(gpu, engine, model, tp, version, rows)
