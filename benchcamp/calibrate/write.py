"""Write a calibrated profile: the base profile's YAML with the fitted values and a provenance header."""

from __future__ import annotations

import datetime
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from benchcamp.calibrate.fit import FACTORS, FitResult
from benchcamp.profiles import profile_file
from benchcamp.results.atomic import write_text

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"--name {name!r}: use lower-case letters, digits, '.', '_' or '-' (e.g. cpu-calibrated)")
    return name


def provenance(result: FitResult, info: dict[str, Any], kind: str) -> list[str]:
    now = info.get("date") or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"Calibrated by `benchcamp calibrate` on {now} (benchcamp {info.get('benchcamp', '?')}).",
        f"Command: {info.get('command', '?')}",
        f"Base profiles: gpu {info.get('base_gpu')}, engine {info.get('base_engine')}, model {info.get('model')}.",
        f"Measured: engine {info.get('engine', '?')} on {info.get('hardware', '?')}.",
        f"Fit points ({len(info.get('points', []))}): " + ", ".join(info.get("points", [])),
        "Figures: "
        + ("the engine's /metrics means for TPOT and TTFT" if info.get("server") else "client medians")
        + ", throughput from the client's records.",
        f"Fit error (mean |log(sim / measured)|): {result.score_start:.4f} with the base profiles -> {result.score:.4f}"
        f" after {result.evaluations} replays.",
    ]
    for label, metric, a, b in result.rows:
        lines.append(f"  {label:>12} {metric:10} measured {a:.6g}  simulated {b:.6g}  ({b / a - 1:+.1%})")
    fitted = [f for f in result.fitted if FACTORS[f][0] == kind]
    lines.append(
        "FITTED here: " + (", ".join(f"{f} {result.start[f]:.4g} -> {result.fitted[f]:.4g}" for f in fitted) or "none")
    )
    lines.append(
        "Every other figure is the base profile's (its own sources are in that file); not validated here:"
        " bench/calibrate_real.py reports the error on points the fit did not see."
    )
    return [f"# {line}" if line else "#" for line in lines]


def render(profile: Any, base_name: str, kind: str, result: FitResult, info: dict[str, Any]) -> str:
    data = asdict(profile)
    for k, v in data.items():
        if isinstance(v, tuple):
            data[k] = list(v)
        elif isinstance(v, float):
            data[k] = float(f"{v:.6g}")
    base = profile_file(f"{kind}s", base_name)
    body = yaml.safe_dump(data, sort_keys=False, width=120)
    ref = f"# Base profile: {base}" if base else "# Base profile: (in memory)"
    return "\n".join([*provenance(result, info, kind), ref, body])


def write_profiles(result: FitResult, name: str, out: str | Path, info: dict[str, Any]) -> list[Path]:
    """``<out>/gpus/<name>.yaml`` always; ``<out>/engines/<name>.yaml`` too when an engine factor was fitted."""
    check_name(name)
    out = Path(out)
    written = []
    prof = result.profiles
    kinds: list[tuple[str, Any, str]] = [("gpu", prof.gpu, info["base_gpu"])]
    if any(FACTORS[f][0] == "engine" for f in result.fitted):
        kinds.append(("engine", prof.engine, info["base_engine"]))
    for kind, profile, base_name in kinds:
        from dataclasses import replace

        path = out / f"{kind}s" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, render(replace(profile, name=name), base_name, kind, result, info))
        written.append(path)
    return written


GROUNDED_BEGIN = "# --- grounded on measured kernel tables (benchcamp calibrate --kernel-tables) ---"
GROUNDED_END = "# --- end of grounding ---"


def ground_yaml(text: str, name: str, figures: dict[str, tuple[float, str]], header: list[str]) -> str:
    """A GPU profile's YAML ``text`` with ``figures`` (field -> (value, where it came from)) set in place, the
    replaced line's old value kept in its comment, and ``header`` (one grounding block, replacing an earlier
    one) after the file's leading comments. Fields the text lacks are added after compute_efficiency."""
    lines = text.splitlines()
    if GROUNDED_BEGIN in lines:
        a, b = lines.index(GROUNDED_BEGIN), lines.index(GROUNDED_END)
        lines = lines[:a] + lines[b + 1 :]
    lines = [f"name: {name}" if ln.startswith("name:") else ln for ln in lines]
    for field, (value, _) in figures.items():
        shown = f"{value:.4g}"
        pat = re.compile(rf"^{field}:\s*([^#\s]+)\s*(#.*)?$")
        hit = next((i for i, ln in enumerate(lines) if pat.match(ln)), None)
        if hit is None:
            at = next((i for i, ln in enumerate(lines) if ln.startswith("compute_efficiency:")), len(lines) - 1)
            lines.insert(at + 1, f"{field}: {shown}  # grounded (header)")
            continue
        m = pat.match(lines[hit])
        assert m
        old = m.group(1)
        was = old if "was " not in (m.group(2) or "") else (m.group(2) or "").split("was ", 1)[1].split(")")[0]
        lines[hit] = f"{field}: {shown}  # grounded (header; was {was})" if was != shown else lines[hit]
    top = 0
    while top < len(lines) and lines[top].startswith("#"):
        top += 1
    block = [GROUNDED_BEGIN, *(f"# {h}" if h else "#" for h in header), GROUNDED_END]
    return "\n".join(lines[:top] + block + lines[top:]) + "\n"
