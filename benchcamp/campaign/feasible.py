"""Infeasible campaigns, refused before any node is provisioned: one line each, naming the config keys (the
trigger form shows them with its labels: benchcamp.campaign.form.labelled) and a fix the same models say is true.

- :func:`check_layout`: the weights (+ activation headroom) against the GPU's memory at the chosen layout (TP, DP,
  expert parallel), by the simulator's memory model (benchcamp.sim.engine.perfmodel); the fix is the smallest
  layout of that GPU type that holds them, found by the same model.
- :func:`check_workload`: the workload's longest request (prompt + output) against the model's context length,
  and the measurement window against ``load.min_requests``: in a closed loop at level L a session sends about
  one request per (mean think time + the mean request's decode alone at batch 1, a lower bound on its time),
  so the window holds about L x window / that many; a campaign where even twice that falls short of
  ``load.min_requests`` is refused with the duration at which the estimate reaches it.
- :func:`check_model`: a model id no model profile lists, with the simulated engine, is refused with the
  profiles that exist; one a profile lists but Model profile names another is refused too (the simulated
  engine would serve one model's name with another's performance).

Both drivers call them: `benchcamp run` before provisioning, the DAG in resolve_config and prepare_workload (the
workload is built before provision_node).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from benchcamp.config import Config
from benchcamp.errors import ConfigError

if TYPE_CHECKING:
    from benchcamp.workload.model import Workload

# Layouts tried for the fix, per engine: powers of two up to one rack (TP x DP GPUs).
_SIZES = (1, 2, 4, 8, 16, 32, 64)


def _fits(cfg: Config, tp: int, dp: int, ep: bool) -> bool:
    from dataclasses import replace

    from benchcamp.sim.engine.perfmodel import perf_model_for
    from benchcamp.sim.engine.settings import EngineSettings

    settings = replace(
        EngineSettings.from_config(cfg),
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        enable_expert_parallel=ep,
        num_gpus=tp * dp,
    )
    try:
        perf_model_for(settings).kv_capacity_tokens(settings.gpu_memory_utilization)
    except ValueError:
        return False
    return True


def _smallest_fit(cfg: Config) -> tuple[int, int, bool] | None:
    """(TP, DP, expert parallel) of the fewest GPUs that hold the weights, TP before DP; None if none up to 64."""
    moe = _is_moe(cfg)
    for gpus in _SIZES:
        for tp in (t for t in _SIZES if t <= gpus):
            for ep in (True, False) if moe else (False,):
                if _fits(cfg, tp, gpus // tp, ep):
                    return tp, gpus // tp, ep
    return None


def _is_moe(cfg: Config) -> bool:
    from benchcamp.profiles import load_model, model_profile_for

    return bool(load_model(cfg.engine.model_profile or model_profile_for(cfg.engine.model)).is_moe)


def check_layout(cfg: Config) -> None:
    """The weights fit the GPU at the chosen layout (one engine: Topology none), else one line with the fix."""
    e = cfg.engine
    if cfg.provider.kind == "endpoint":
        return  # benchcamp deploys nothing there: the endpoint's own layout holds its weights
    if cfg.topology is not None or e.num_gpu_blocks_override is not None:
        return  # each role is checked by its engine; a fixed KV size is the CPU build's
    tp, dp, ep = e.tensor_parallel_size, e.data_parallel_size, e.enable_expert_parallel
    if _fits(cfg, tp, dp, ep):
        return
    layout = (
        f"engine.tensor_parallel_size={tp} x engine.data_parallel_size={dp}, "
        f"engine.enable_expert_parallel={'true' if ep else 'false'}"
    )
    why = f"engine.model_profile={e.model_profile or e.model} does not fit in hardware.gpu "
    why += f"{cfg.hardware.gpu}'s memory at {layout}"
    if ep and tp * dp == 1:
        why += " (expert parallel shares the experts among the engine's GPUs: on one GPU it shares nothing)"
    best = _smallest_fit(cfg)
    if best is None:
        fix = f"no layout of up to {_SIZES[-1]} {cfg.hardware.gpu} GPUs holds it: pick a larger GPU type or model"
    else:
        btp, bdp, bep = best
        fix = (
            f"it fits on {btp * bdp} GPUs: set hardware.gpu_count={btp * bdp}, "
            f"engine.tensor_parallel_size={btp}, engine.data_parallel_size={bdp}"
            + (", engine.enable_expert_parallel=true" if bep else "")
            + ", or pick a larger GPU type or a smaller model"
        )
    raise ConfigError(f"{why}; {fix}")


def check_model(cfg: Config) -> None:
    """The simulated engine serves a model it has a profile for, under that profile."""
    from benchcamp.profiles import available, load_model

    if cfg.engine.kind != "simulated":
        return  # a real vLLM loads the id from Hugging Face; the profile only guides the simulator
    model = cfg.engine.model
    listed = {n.lower(): name for name in available("models") for n in [name, *load_model(name).hf_names]}
    profile = listed.get(model.lower())
    if profile is None:
        ids = ", ".join(load_model(name).hf_names[0] for name in available("models") if load_model(name).hf_names)
        raise ConfigError(
            f"engine.model={model!r} is in no model profile (benchcamp/profiles/models), so the "
            f"simulated engine has no performance for it; type one they list ({ids}), or add the id to "
            f"a profile's hf_names"
        )
    chosen = cfg.engine.model_profile
    if chosen and chosen != profile:
        raise ConfigError(
            f"engine.model={model} is profile {profile}, but engine.model_profile="
            f"{chosen}: the simulated engine would serve it with {chosen}'s performance; set "
            f"engine.model_profile={profile}"
        )


def check_workload(cfg: Config, workload: Workload) -> None:
    """The workload's longest request fits the model's context, and the window can hold load.min_requests."""
    _check_context(cfg, workload)
    _check_window(cfg, workload)


def _max_model_len(cfg: Config) -> int:
    from benchcamp.profiles import load_model, model_profile_for

    spec = load_model(cfg.engine.model_profile or model_profile_for(cfg.engine.model))
    return int(cfg.engine.max_model_len or spec.max_model_len)


def _check_context(cfg: Config, workload: Workload) -> None:
    if cfg.engine.num_gpu_blocks_override is not None:
        return  # the CPU build's small KV: the engine itself says how long a context fits
    longest = max((r.prompt_len + r.output_len for _, r in workload.requests()), default=0)
    limit = _max_model_len(cfg)
    if longest > limit:
        raise ConfigError(
            f"workload.name={workload.name}: its longest request needs {longest:,} tokens of context "
            f"(prompt + output), more than engine.model_profile={cfg.engine.model_profile}'s "
            f"{limit:,}; pick a workload with shorter sessions or a model with a longer context"
        )


def _fastest_request_s(cfg: Config, workload: Workload) -> float:
    """The mean request's decode alone at batch 1: a lower bound on its time at any load."""
    from benchcamp.sim.engine.perfmodel import BatchSummary, perf_model_for
    from benchcamp.sim.engine.settings import EngineSettings

    reqs = [r for _, r in workload.requests()]
    if not reqs:
        return 0.0
    out = sum(r.output_len for r in reqs) / len(reqs)
    ctx = int(sum(r.prompt_len for r in reqs) / len(reqs))
    try:
        step = perf_model_for(EngineSettings.from_config(cfg)).cost([BatchSummary(decode_seqs=1, decode_ctx=ctx)])
    except (ValueError, KeyError):
        return 0.0
    return out * step.duration_s


def _check_window(cfg: Config, workload: Workload) -> None:
    """Closed loop only: open and trace modes set their own rate."""
    load = cfg.load
    if load.mode != "closed" or not load.levels:
        return
    reqs = [r for _, r in workload.requests() if r.turn > 0]
    think = sum(r.think_s for r in reqs) / len(reqs) if reqs else 0.0
    cycle = think + _fastest_request_s(cfg, workload)
    if cycle <= 0:
        return
    level = min(load.levels)
    expected = level * load.duration_s / cycle
    if 2 * expected >= load.min_requests:  # a mean-based estimate: refused only when twice it falls short
        return
    need = math.ceil(load.min_requests * cycle / level)
    raise ConfigError(
        f"load.duration_s={load.duration_s:g}: at load.levels={level:g} about {expected:.0f} "
        f"requests are sent in the window (each session: {think:.1f} s think + at least "
        f"{cycle - think:.1f} s per request), fewer than load.min_requests={load.min_requests}; set "
        f"load.duration_s to at least {need} or a higher level, or lower load.min_requests "
        "(Extra overrides)"
    )
