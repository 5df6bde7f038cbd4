"""How far to trust a simulated figure: the validation set's errors for the nearest validated configurations.

``benchcamp/data/sim_error.json`` holds every value of the validation set (``bench/fidelity/replay.py``: published
real-hardware results, replayed by the simulated engine, never fitted) as its GPU, model, phase and simulated /
published ratio; ``bench/fidelity/error_table.py`` writes it, with the command, the commit and the date, so a run
never replays the validation set. A simulated headline figure looks up the values of its phase (``throughput``:
tokens/s; ``tpot``: per-token time, so the per-user rate; ``ttft``) on the nearest validated configurations:

1. the same GPU and the same model profile;
2. else the same silicon (:data:`SILICON`: a Grace-board GPU is its HGX twin) and the same architecture class
   (attention kind x dense/MoE, from the model profiles: DeepSeek's MLA MoE, GQA MoE, GQA dense);
3. else none: the figure is "unvalidated".

A match needs at least :data:`MIN_VALUES` values. The error is ``|simulated / published - 1|``; its median is the
expected error, and a figure is printed to the digit that error leaves meaningful (:func:`rounded`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Protocol

DATA_FILE = "sim_error.json"
PHASES = ("throughput", "tpot", "ttft")
# the validation metrics of each phase (bench/common/fidelity.py METRICS)
PHASE_OF_METRIC = {
    "total_tok_s": "throughput",
    "output_tok_s": "throughput",
    "tpot_mean_ms": "tpot",
    "tpot_median_ms": "tpot",
    "tpot_p99_ms": "tpot",
    "ttft_mean_ms": "ttft",
    "ttft_median_ms": "ttft",
    "ttft_p99_ms": "ttft",
    "e2e_median_ms": "e2e",
}
# The same GPU die and HBM on a Grace board (NVL72) as on an HGX board; the profiles' datasheet figures differ by
# at most the clocks (gb300 2,500 vs b300 2,250 dense BF16 TFLOP/s, the same 8,000 GB/s HBM).
SILICON = {"gb300": "b300", "gb200": "b200"}
MIN_VALUES = 3
UNVALIDATED = "unvalidated"


@dataclass(frozen=True)
class ExpectedError:
    """The validation errors behind one simulated figure's phase, or none (``n == 0``: unvalidated)."""

    phase: str
    n: int  # comparable validation values
    median_abs: float  # median |simulated / published - 1|; NaN when unvalidated
    p90_abs: float
    median_ratio: float  # median simulated / published: > 1, the simulator tends to read high
    match: str  # "same GPU and model" | "same silicon and architecture" | "unvalidated"
    gpus: tuple[str, ...] = ()  # the validated GPUs and models the values come from
    models: tuple[str, ...] = ()

    @property
    def validated(self) -> bool:
        return self.n > 0

    def words(self) -> str:
        """'validation median error 14% on 46 comparable values (b300, deepseek-v3)', or 'unvalidated'."""
        if not self.validated:
            return f"{UNVALIDATED} (no validated configuration near this GPU and model)"
        return (
            f"validation median error {self.median_abs:.0%} on {self.n} comparable values "
            f"({', '.join(self.gpus)}; {', '.join(self.models)})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "n": self.n,
            "median_abs_error": None if math.isnan(self.median_abs) else round(self.median_abs, 4),
            "p90_abs_error": None if math.isnan(self.p90_abs) else round(self.p90_abs, 4),
            "median_ratio": None if math.isnan(self.median_ratio) else round(self.median_ratio, 4),
            "match": self.match,
            "gpus": list(self.gpus),
            "models": list(self.models),
            "text": self.words(),
        }


@cache
def table() -> dict[str, Any]:
    """The parsed data file: {command, commit, date, source, rows: [[id, source, gpu, model, metric, ratio], ...],
    architectures: {model: class}}."""
    res = resources.files("benchcamp.data").joinpath(DATA_FILE)
    return json.loads(res.read_text(encoding="utf-8"))


def architecture(model: str) -> str:
    """The model profile's class: attention kind (MLA: a latent KV, ``kv_heads`` 0; else GQA) x dense/MoE."""
    from benchcamp.profiles import load_model

    m = load_model(model)
    return f"{'MLA' if m.kv_heads == 0 else 'GQA'} {'MoE' if m.is_moe else 'dense'}"


def silicon(gpu: str) -> str:
    return SILICON.get(gpu, gpu)


def expected_error(gpu: str, model: str, phase: str, data: dict[str, Any] | None = None) -> ExpectedError:
    """The validation errors of ``phase`` on the nearest validated configurations of (``gpu``, ``model``), both
    profile names (see the module doc)."""
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r}: one of {', '.join(PHASES)}")
    data = data or table()
    rows = [r for r in data["rows"] if PHASE_OF_METRIC.get(r[4]) == phase]
    arch = data.get("architectures", {})
    exact = [r for r in rows if r[2] == gpu and r[3] == model]
    if len(exact) >= MIN_VALUES:
        return _stats(phase, exact, "same GPU and model")
    try:
        mine = architecture(model)
    except Exception:  # noqa: BLE001 - an unknown model profile has no architecture to match: unvalidated
        mine = None
    near = [r for r in rows if silicon(r[2]) == silicon(gpu) and mine is not None and arch.get(r[3]) == mine]
    if len(near) >= MIN_VALUES:
        return _stats(phase, near, "same silicon and architecture")
    return ExpectedError(phase, 0, math.nan, math.nan, math.nan, UNVALIDATED)


def _stats(phase: str, rows: list[list[Any]], match: str) -> ExpectedError:
    import numpy as np

    ratio = np.array([float(r[5]) for r in rows])
    err = np.abs(ratio - 1)
    return ExpectedError(
        phase,
        len(rows),
        float(np.median(err)),
        float(np.percentile(err, 90)),
        float(np.median(ratio)),
        match,
        tuple(sorted({r[2] for r in rows})),
        tuple(sorted({r[3] for r in rows})),
    )


def for_engine(gpu: str, model: str) -> dict[str, ExpectedError]:
    """phase -> expected error, for every headline phase of a simulated engine on ``gpu`` serving ``model``."""
    return {p: expected_error(gpu, model, p) for p in PHASES}


class _EngineSection(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def model_profile(self) -> str: ...


class _HardwareSection(Protocol):
    @property
    def gpu(self) -> str: ...


class _ProviderSection(Protocol):
    @property
    def kind(self) -> str: ...


class EngineChoice(Protocol):
    """What :func:`for_config` reads of a config (benchcamp.config.Config, a layer above): which engine, on
    which GPU, through which provider."""

    @property
    def engine(self) -> _EngineSection: ...
    @property
    def hardware(self) -> _HardwareSection: ...
    @property
    def provider(self) -> _ProviderSection: ...


def config_profiles(cfg: EngineChoice) -> tuple[str, str]:
    """(GPU profile, model profile) a config's simulated engine runs."""
    from benchcamp.profiles import model_profile_for

    return cfg.hardware.gpu, cfg.engine.model_profile or model_profile_for(cfg.engine.model)


def for_config(cfg: EngineChoice) -> dict[str, ExpectedError] | None:
    """The expected errors of a campaign's figures: None unless the simulated engine measured them."""
    if cfg.engine.kind != "simulated" or cfg.provider.kind == "endpoint":
        return None
    return for_engine(*config_profiles(cfg))


def rounded(value: float | None, err: ExpectedError | None, unit: str = "") -> str:
    """``value`` to the digit its expected error leaves meaningful: one digit below the order of magnitude of
    ``median error x value`` (41,714 at 28%: +-11,680, so to the thousand: 42K; at 7%: 41.7K); two significant
    digits when unvalidated. Thousands and millions as K and M."""
    if value is None or not math.isfinite(value):
        return "-"
    e = err.median_abs if err is not None and err.validated else math.nan
    if value == 0:
        step = 1.0
    elif math.isfinite(e) and e > 0:
        step = 10.0 ** (math.floor(math.log10(e * abs(value))) - 1)
    else:
        step = 10.0 ** (math.floor(math.log10(abs(value))) - 1)
    for div, suffix in ((1e6, "M"), (1e3, "K")):
        if abs(value) >= div:
            return _digits(value / div, step / div) + suffix + unit
    return _digits(value, step) + unit


def _digits(x: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    q = round(x / step) * step if step >= 1 else round(x, decimals)
    return f"{q:,.{decimals}f}"


def figure(value: float, err: ExpectedError | None, unit: str) -> str:
    """'42K tokens/s/GPU, simulated; validation median error 28% on 46 comparable values (...)'."""
    return f"{rounded(value, err)} {unit}, simulated; " + (err.words() if err is not None else UNVALIDATED)


# What each headline figure's error is read from, and how the figure is named.
HEADLINE_PHASES = (("tokens/s/GPU", "throughput"), ("tokens/s/user (P90)", "tpot"), ("s TTFT (P90)", "ttft"))


def headline_lines(headline: dict[str, Any], errors: dict[str, ExpectedError]) -> list[str]:
    """One line per simulated headline figure: the figure to its precision, 'simulated', its expected error."""
    from benchcamp.metrics import Metric

    keys = {"throughput": Metric.THROUGHPUT_PER_GPU, "tpot": Metric.P90_USER_RATE, "ttft": Metric.TTFT_P90}
    lines = []
    for unit, phase in HEADLINE_PHASES:
        value = headline.get(keys[phase])
        if isinstance(value, (int, float)) and math.isfinite(value):
            lines.append(figure(float(value), errors.get(phase), unit))
    return lines


def mlflow_tags(errors: dict[str, ExpectedError] | None) -> dict[str, str]:
    """``sim_error.<phase>``: the expected error in words (a comparison reads 'unvalidated' or the figures)."""
    return {f"sim_error.{p}": e.words() for p, e in (errors or {}).items()}


def mlflow_metrics(errors: dict[str, ExpectedError] | None) -> dict[str, float]:
    """``sim_error/<phase>_median`` (|simulated / published - 1|), ``_p90`` and ``_n``; none for an unvalidated
    phase (there is no figure to log)."""
    out: dict[str, float] = {}
    for p, e in (errors or {}).items():
        if e.validated:
            out |= {f"sim_error/{p}_median": e.median_abs, f"sim_error/{p}_p90": e.p90_abs, f"sim_error/{p}_n": e.n}
    return out
