"""The ``vllm serve`` command line, as far as the simulated engine needs it.

Accepts the flags that change what is served or how fast (``--model`` or a
positional model tag, parallelism, batching limits, KV cache, API key, host,
port) plus benchcamp's own (``--gpu``, ``--num-gpus``, ``--model-profile``,
``--fault``). Any other vLLM flag is accepted with a warning, so a deploy
command written for real vLLM runs unchanged: ``--flag``, ``--flag=value`` and
``--flag value`` (a following token that does not start with ``-`` is taken as
its value).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass


def _bool_flag(p: argparse.ArgumentParser, name: str, default: bool | None, help: str) -> None:
    p.add_argument(
        f"--{name}", dest=name.replace("-", "_"), action=argparse.BooleanOptionalAction, default=default, help=help
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchcamp engine serve",
        description="Simulated vLLM OpenAI-compatible server (same flags as `vllm serve`).",
    )
    p.add_argument("--model", default=None, help="model name (also accepted as the first positional argument)")
    p.add_argument("--served-model-name", nargs="+", default=None, help="name(s) the API answers to (default: --model)")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=None)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=None)
    p.add_argument("--enable-expert-parallel", action="store_true", default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None)
    _bool_flag(p, "enable-prefix-caching", None, "prefix caching (on by default, as in vLLM V1)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--kv-cache-dtype", default=None)
    p.add_argument(
        "--num-gpu-blocks-override",
        type=int,
        default=None,
        help="KV blocks per engine instead of what the GPU's memory holds (one is vLLM's null block)",
    )
    p.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        default=None,
        help="cap of a prefill chunk while other requests run or wait (0: off, vLLM's default)",
    )
    _bool_flag(
        p,
        "scheduler-reserve-full-isl",
        None,
        "admit a request only if its whole sequence's KV blocks fit, not just its first chunk's (on, as in vLLM)",
    )
    p.add_argument(
        "--kv-offloading-size",
        type=float,
        default=None,
        help="GiB of CPU memory for offloaded KV blocks, summed over the TP ranks (default: off)",
    )
    p.add_argument(
        "--kv-offloading-backend",
        choices=["native", "lmcache"],
        default=None,
        help="accepted as vLLM does; both are modelled as one LRU tier in host memory",
    )
    p.add_argument(
        "--kv-transfer-config",
        default=None,
        help="vLLM's KV connector JSON (prefill/decode disaggregation); modelled as ExampleConnector's "
        "shared folder (kv_connector_extra_config.shared_storage_path): benchcamp.sim.engine.kv_connector",
    )
    p.add_argument(
        "--speculative-config",
        default=None,
        help="vLLM's speculative-decoding JSON: num_speculative_tokens K, and the forced acceptance length "
        "(rejection_sample_method synthetic, synthetic_acceptance_length A) or else the model profile's draft "
        "acceptance rate; a decode step then costs K draft passes + a K+1-position verify and emits A tokens",
    )
    p.add_argument(
        "--engram-config",
        default=None,
        help="vLLM's Engram storage JSON (DeepSeek-V4.1): cpu_offload (default true: the n-gram tables in pinned "
        "host memory, looked up over the host link), dp_shared_memory, embedding_across_dp, thp_packing",
    )
    p.add_argument(
        "--speculative-acceptance-length",
        type=float,
        default=None,
        help="benchcamp: tokens per decode step A (1..K+1) assumed when --speculative-config does not force one "
        "(default: the model profile's draft acceptance rate over K drafts)",
    )
    p.add_argument(
        "--kv-link-gbps",
        type=float,
        default=None,
        help="benchcamp: GB/s per GPU, one way, of the link KV transfers use (default 50: a 400 Gb/s NIC per GPU)",
    )
    p.add_argument(
        "--kv-link-latency-us", type=float, default=None, help="benchcamp: latency per KV transfer (default 0)"
    )
    p.add_argument("--api-key", default=None, help="required Bearer token (default: $VLLM_API_KEY)")
    p.add_argument("--hf-token", "--hf_token", default=None, help="Hugging Face token (default: $HF_TOKEN); unused")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--enable-prompt-tokens-details", action="store_true", default=False)
    # benchcamp's own
    p.add_argument(
        "--gpu",
        default=None,
        help="GPU profile: benchcamp/profiles/gpus/*.yaml (h200, b200, mi300x, cpu, ...) or $BENCHCAMP_PROFILE_PATH's",
    )
    p.add_argument(
        "--engine-profile",
        default=None,
        help="engine profile: profiles/engines/*.yaml or $BENCHCAMP_PROFILE_PATH's (default vllm; vllm-cpu for vLLM's CPU build)",
    )
    p.add_argument("--num-gpus", type=int, default=None, help="GPUs in the node (default: tp x dp)")
    p.add_argument(
        "--model-profile", default=None, help="performance profile of the model (default: derived from --model)"
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="inject a fault (see benchcamp.sim.engine.faults), repeatable",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="BENCHMARK ONLY: multiply every modelled step time by this factor (0 = steps are "
        "free, to measure the HTTP server's own ceiling); results are not a GPU model",
    )
    p.add_argument(
        "--routing-key-header",
        default="X-Session-ID",
        help="route a request carrying this header to the DP rank its value hashes to (session "
        "affinity, benchcamp.router.affinity); '' = route by load and cached prefix only",
    )
    p.add_argument("--log-requests", action="store_true", default=False, help="log one line per finished request")
    p.add_argument(
        "--request-body-timeout-s",
        type=float,
        default=30.0,
        help="answer 408 when a request body is not complete after this many seconds",
    )
    return p


@dataclass
class ServeArgs:
    args: argparse.Namespace
    ignored: list[str]  # unknown vLLM flags (with their values), warned about


def _dashed(tok: str) -> str:
    """``--max_num_seqs[=v]`` -> ``--max-num-seqs[=v]``: vLLM accepts either spelling."""
    if not tok.startswith("--"):
        return tok
    name, eq, value = tok.partition("=")
    return name.replace("_", "-") + eq + value


def _split_unknown(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], list[str]]:
    """Separate known flags from unknown ones (and their values)."""
    known_opts = set(parser._option_string_actions)  # noqa: SLF001 - argparse has no public API for this
    known: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--") and tok != "--" and tok.split("=", 1)[0] not in known_opts:
            tok = _dashed(tok)
        name = tok.split("=", 1)[0]
        if tok.startswith("-") and name not in known_opts and tok != "--":
            unknown.append(tok)
            if "=" not in tok and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                unknown.append(argv[i + 1])
                i += 1
        else:
            known.append(tok)
        i += 1
    return known, unknown


def parse_serve_args(argv: list[str]) -> ServeArgs:
    argv = list(argv)
    if argv and argv[0] in ("serve",):  # `vllm serve MODEL ...` pasted with the subcommand
        argv = argv[1:]
    positional_model = None
    if argv and not argv[0].startswith("-"):
        positional_model, argv = argv[0], argv[1:]
    parser = build_parser()
    known, unknown = _split_unknown(parser, argv)
    args = parser.parse_args(known)
    if positional_model is not None:
        if args.model is not None and args.model != positional_model:
            parser.error(f"model given twice: positional {positional_model!r} and --model {args.model!r}")
        args.model = positional_model
    if args.model is None:
        parser.error("no model: pass --model NAME or `serve NAME` (e.g. --model meta-llama/Llama-3.1-8B-Instruct)")
    if args.api_key is None:
        args.api_key = os.environ.get("VLLM_API_KEY") or None
    if args.hf_token is None:  # as vLLM (huggingface_hub) does; the simulated engine downloads nothing
        args.hf_token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None
    for name in (
        "tensor_parallel_size",
        "data_parallel_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "block_size",
        "num_gpus",
        "num_gpu_blocks_override",
    ):
        v = getattr(args, name)
        if v is not None and v < 1:
            parser.error(f"--{name.replace('_', '-')}={v}: must be >= 1")
    if args.long_prefill_token_threshold is not None and args.long_prefill_token_threshold < 0:
        parser.error(f"--long-prefill-token-threshold={args.long_prefill_token_threshold}: tokens, must be >= 0")
    if args.kv_offloading_size is not None and not args.kv_offloading_size >= 0:
        parser.error(f"--kv-offloading-size={args.kv_offloading_size}: GiB of CPU memory, must be >= 0")
    if args.gpu_memory_utilization is not None and not 0 < args.gpu_memory_utilization <= 1:
        parser.error(f"--gpu-memory-utilization={args.gpu_memory_utilization}: must be in (0, 1]")
    if not 0 < args.request_body_timeout_s < float("inf"):
        parser.error(f"--request-body-timeout-s={args.request_body_timeout_s}: must be > 0 and finite")
    if args.kv_transfer_config is not None:
        from benchcamp.sim.engine.kv_connector import parse_kv_transfer_config

        try:
            args.kv_transfer = parse_kv_transfer_config(args.kv_transfer_config)
        except ValueError as exc:
            parser.error(str(exc))
    else:
        args.kv_transfer = None
    try:
        args.engram = parse_engram_config(args.engram_config)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        args.speculative = parse_speculative_config(args.speculative_config, args.speculative_acceptance_length)
    except ValueError as exc:
        parser.error(str(exc))
    if not args.time_scale >= 0:
        parser.error(f"--time-scale={args.time_scale}: must be >= 0")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port={args.port}: must be 0..65535")
    return ServeArgs(args=args, ignored=unknown)


def served_names(args: argparse.Namespace) -> list[str]:
    return list(args.served_model_name) if args.served_model_name else [args.model]


def settings_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """The flags as keyword arguments for ``EngineSettings`` (only the ones given)."""
    out: dict[str, object] = {"model": args.model, "served_model_name": served_names(args)[0]}
    for name in (
        "tensor_parallel_size",
        "data_parallel_size",
        "enable_expert_parallel",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "block_size",
        "enable_prefix_caching",
        "kv_cache_dtype",
        "gpu_memory_utilization",
        "kv_offloading_size",
        "num_gpu_blocks_override",
        "long_prefill_token_threshold",
        "scheduler_reserve_full_isl",
        "gpu",
        "num_gpus",
        "model_profile",
        "engine_profile",
        "kv_link_gbps",
        "kv_link_latency_us",
    ):
        v = getattr(args, name)
        if v is not None:
            out[name] = v
    if getattr(args, "kv_transfer", None) is not None:
        out["kv_connector"] = args.kv_transfer.connector
    if getattr(args, "speculative", None) is not None:
        out["speculative_tokens"], out["acceptance_length"] = args.speculative
    if getattr(args, "engram", None) is not None:
        out.update(engram_settings(args.engram))
    return out


# vLLM's EngramConfig fields (vllm/config/engram.py; sources in profiles/models/deepseek-v4.1-flash.yaml)
ENGRAM_KEYS = ("cpu_offload", "embedding_across_dp", "dp_shared_memory", "thp_packing")


def parse_engram_config(raw: str | None) -> dict[str, bool] | None:
    """``--engram-config`` JSON -> its fields (unset ones at vLLM's defaults); None when not given. Checks what
    vLLM's EngramConfig checks: known keys, booleans, dp_shared_memory and thp_packing need cpu_offload."""
    import json

    if raw is None:
        return None
    example = "'{\"cpu_offload\": false}'"
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--engram-config: not JSON ({exc.msg}); pass e.g. {example}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"--engram-config: a JSON object, e.g. {example}")
    unknown = sorted(set(spec) - set(ENGRAM_KEYS))
    if unknown:
        raise ValueError(f"--engram-config: unknown key(s) {', '.join(unknown)}; vLLM's are {', '.join(ENGRAM_KEYS)}")
    bad = [k for k, v in spec.items() if not isinstance(v, bool)]
    if bad:
        raise ValueError(f"--engram-config: {', '.join(bad)} must be true or false")
    out = {"cpu_offload": True, "embedding_across_dp": False, "dp_shared_memory": False, "thp_packing": False}
    out.update(spec)
    if out["dp_shared_memory"] and not out["cpu_offload"]:
        raise ValueError("--engram-config: dp_shared_memory requires cpu_offload=true (vLLM's EngramConfig)")
    if out["thp_packing"] and (not out["cpu_offload"] or out["dp_shared_memory"]):
        raise ValueError("--engram-config: thp_packing requires cpu_offload=true and dp_shared_memory=false")
    return out


def engram_settings(engram: dict[str, bool]) -> dict[str, object]:
    """``parse_engram_config``'s fields as ``EngineSettings`` keyword arguments (thp_packing: not modelled)."""
    return {
        "engram_cpu_offload": engram["cpu_offload"],
        "engram_dp_shared_memory": engram["dp_shared_memory"],
        "engram_across_dp": engram["embedding_across_dp"],
    }


def engram_from_argv(argv: list[str]) -> dict[str, object]:
    """The ``EngineSettings`` keyword arguments of an ``--engram-config`` in a vLLM argv (a config's
    ``engine.extra_args``, a role's ``extra_args``); the last one wins, as argparse's; {} when there is none."""
    raw = None
    for i, tok in enumerate(argv):
        if tok == "--engram-config":
            if i + 1 >= len(argv):
                raise ValueError("--engram-config: needs a JSON value, e.g. '{\"cpu_offload\": false}'")
            raw = argv[i + 1]
        elif tok.startswith("--engram-config="):
            raw = tok.split("=", 1)[1]
    engram = parse_engram_config(raw)
    return engram_settings(engram) if engram is not None else {}


def parse_speculative_config(raw: str | None, assumed: float | None = None) -> tuple[int, float] | None:
    """``--speculative-config`` JSON -> (K draft tokens, forced acceptance length A or 0.0 = the model profile's
    draft acceptance rate, resolved by EngineSettings, unless ``assumed`` says A); None when not given. Other keys (method, model, ...) are
    vLLM's business: the simulator models every method by its K and A."""
    import json

    if raw is None:
        return None
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f'--speculative-config: not JSON ({exc.msg}); pass e.g. \'{{"method":"mtp","num_speculative_tokens":3}}\''
        ) from None
    k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError("--speculative-config: num_speculative_tokens must be a whole number >= 1")
    a = spec.get("synthetic_acceptance_length") if spec.get("rejection_sample_method") == "synthetic" else None
    if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float)) or not 1 <= a <= k + 1):
        raise ValueError(f"--speculative-config: synthetic_acceptance_length={a!r} must be in 1..K+1 = {k + 1}")
    if a is None and assumed is not None:
        if not 1 <= assumed <= k + 1:
            raise ValueError(f"--speculative-acceptance-length={assumed:g} must be in 1..K+1 = {k + 1}")
        a = assumed
    return k, float(a or 0.0)


def redacted_argv(argv: list[str]) -> list[str]:
    """argv with every secret flag's value (``--api-key``, ``--hf-token``, ...) masked, for logs."""
    from benchcamp.secrets.redaction import mask_argv

    return mask_argv(list(argv))
