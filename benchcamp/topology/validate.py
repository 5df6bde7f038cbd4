"""Topology checks that need the shipped profiles: the GPU of every role, the GPU count, and speculative
settings the model can run. Each failure is one line naming the field and the fix (a ConfigError)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchcamp.errors import ConfigError, ProfileError
from benchcamp.topology.model import HEAD_METHODS, Topology

if TYPE_CHECKING:
    from benchcamp.profiles import ModelProfile


def check(topo: Topology | None, gpu_count: int, model_profile: str) -> None:
    """Raise ConfigError for a ``topology:`` section that the config's ``hardware.gpu_count`` and
    ``engine.model_profile`` cannot run."""
    if topo is None:
        return
    check_gpus(topo, gpu_count)
    from benchcamp.profiles import check_profile

    for kind, role in topo.roles():
        if role.gpu:
            check_profile("gpus", f"topology.{kind}.gpu", role.gpu)
    model = _model(model_profile)
    for kind, role in topo.roles():
        if model is not None and role.enable_expert_parallel and model.is_moe:
            ep = role.expert_parallel_size
            if ep > model.num_experts:
                raise ConfigError(
                    f"topology.{kind}: expert parallel size {ep} (TP x DP) exceeds {model.name}'s "
                    f"{model.num_experts} routed experts (a rank would hold none); lower data_parallel_size or "
                    "set enable_expert_parallel: false"
                )
        if model is not None and model.is_moe and role.dp_layout(True) == "moe_tp":
            # vLLM shards every expert's intermediate dimension over the DP x TP group (FusedMoEParallelConfig.make,
            # flatten_tp_across_dp); the weight loader needs it to divide evenly
            group = role.expert_shards(True)
            inter = round(model.expert_params_m * 1e6 / (3 * model.hidden))  # gate, up, down: 3 x hidden x I
            if inter % group:
                raise ConfigError(
                    f"topology.{kind}: without expert parallel vLLM shards each of {model.name}'s experts over "
                    f"data_parallel_size x tensor_parallel_size = {group} GPUs, which does not divide its "
                    f"moe_intermediate_size {inter}; set enable_expert_parallel: true or a data_parallel_size whose "
                    "product with tensor_parallel_size divides it"
                )
        spec = role.speculative
        if spec is None:
            continue
        key = f"topology.{kind}.speculative"
        if spec.method in HEAD_METHODS:
            if model is None:
                raise ConfigError(
                    f"{key}.method={spec.method} runs a head trained with the checkpoint, but "
                    f"engine.model_profile={model_profile!r} is not a known profile to check it "
                    "against; set engine.model_profile"
                )
            has = spec.method in model.speculative_methods and (spec.method != "mtp" or model.mtp_layers > 0)
            if not has:
                offered = ", ".join(model.speculative_methods) or "none"
                raise ConfigError(
                    f"{key}.method={spec.method}: model profile {model.name} has no {spec.method} head "
                    f"(its checkpoint's methods: {offered}); use one of those, or ngram/suffix/eagle3 with a "
                    "draft model"
                )
        if (
            spec.acceptance == "real"
            and spec.acceptance_length is None
            and (model is None or model.draft_acceptance_rate <= 0 or spec.method not in HEAD_METHODS)
        ):
            raise ConfigError(
                f"{key}.acceptance_length: no published acceptance rate for {spec.method} on "
                f"{model_profile}; set acceptance_length (tokens per step, 1..{spec.num_speculative_tokens + 1}) "
                "or acceptance: synthetic"
            )


def check_gpus(topo: Topology, gpu_count: int) -> None:
    if topo.total_gpus != gpu_count:
        split = " + ".join(f"{k} {n}" for k, n in topo.gpus_by_role.items())
        raise ConfigError(
            f"hardware.gpu_count={gpu_count} does not match the topology's {topo.total_gpus} GPUs ({split}); "
            f"set hardware.gpu_count={topo.total_gpus} (tokens/s/GPU and cost divide by every GPU)"
        )


def _model(model_profile: str) -> ModelProfile | None:
    from benchcamp.profiles import load_model

    try:
        return load_model(model_profile)
    except ProfileError:
        return None


def acceptance_length(spec_tokens: int, rate: float) -> float:
    """Tokens per decode step with K drafts each accepted with probability ``rate`` (accepted prefix + 1):
    sum_{i=0..K} rate^i (Leviathan et al., arXiv:2211.17192, eq. 1, with i.i.d. acceptance)."""
    return float(sum(rate**i for i in range(spec_tokens + 1)))
