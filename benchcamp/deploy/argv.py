"""The engine's command line: the single source of ``vllm serve`` argv.

A leaf: the local process (deploy.local), the EC2 user data (provision.ec2) and
the simulated engine (same flags plus its hardware profile) all build on it.
The API key never appears here: engines read it from ``VLLM_API_KEY``.
"""

from __future__ import annotations

import sys

from benchcamp.config import Config


def vllm_argv(
    cfg: Config,
    host: str | None = None,
    port: int | None = None,
    *,
    executable: str = "vllm",
    model: str | None = None,
    dp_rpc_port: int | None = None,
    dp_address: str | None = None,
) -> list[str]:
    """``vllm serve`` argv for ``cfg.engine``; host/port default to the provider's. A local
    deployment names its ``executable`` and where the ``model`` lies (a local folder); the model
    is served under ``cfg.served_model_name`` either way. ``dp_rpc_port``: the head of a multi-node
    data-parallel launch (see :func:`multinode`), reached by its peers at ``dp_address`` (default
    ``host``: a head that listens on every address gives the one its peers reach it at)."""
    e = cfg.engine
    if host is None:
        host = cfg.provider.local.host if cfg.provider.kind == "local" else "0.0.0.0"
    if port is None:
        port = cfg.provider.local.port if cfg.provider.kind == "local" else cfg.provider.ec2.engine_port
    argv = [
        executable,
        "serve",
        model or e.model,
        "--served-model-name",
        cfg.served_model_name,
        "--tensor-parallel-size",
        str(e.tensor_parallel_size),
        "--data-parallel-size",
        str(e.data_parallel_size),
    ]
    if dp_rpc_port is not None and e.data_parallel_size_local is not None:
        argv += [
            "--data-parallel-size-local",
            str(e.data_parallel_size_local),
            "--data-parallel-address",
            dp_address or host,
            "--data-parallel-rpc-port",
            str(dp_rpc_port),
        ]
    if e.enable_expert_parallel:
        argv.append("--enable-expert-parallel")
    argv += [
        "--max-num-seqs",
        str(e.max_num_seqs),
        "--max-num-batched-tokens",
        str(e.max_num_batched_tokens),
    ]
    if e.max_model_len:
        argv += ["--max-model-len", str(e.max_model_len)]
    if e.num_gpu_blocks_override is not None:
        argv += ["--num-gpu-blocks-override", str(e.num_gpu_blocks_override)]
    if e.long_prefill_token_threshold:
        argv += ["--long-prefill-token-threshold", str(e.long_prefill_token_threshold)]
    if e.kv_offloading_size_gib:
        argv += ["--kv-offloading-size", f"{e.kv_offloading_size_gib:g}"]
    argv += [
        "--block-size",
        str(e.block_size),
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching",
        "--kv-cache-dtype",
        e.kv_cache_dtype,
        "--gpu-memory-utilization",
        str(e.gpu_memory_utilization),
        # cached_tokens in usage: needed for the cached/uncached split.
        "--enable-prompt-tokens-details",
        "--port",
        str(port),
        "--host",
        host,
        *e.extra_args,
    ]
    return argv


def multinode(cfg: Config) -> bool:
    """Data-parallel ranks over several nodes: a head, and a peer per further node."""
    local = cfg.engine.data_parallel_size_local
    return local is not None and local < cfg.engine.data_parallel_size


def peer_argvs(head_argv: list[str], cfg: Config) -> list[list[str]]:
    """The ``--headless`` peers of a multi-node head's argv, one per further node: the same engine
    flags, and the first data-parallel rank each node runs."""
    local = cfg.engine.data_parallel_size_local or cfg.engine.data_parallel_size
    return [
        [*head_argv, "--headless", "--data-parallel-start-rank", str(rank)]
        for rank in range(local, cfg.engine.data_parallel_size, local)
    ]


def simulated_argv(cfg: Config, host: str | None = None, port: int | None = None) -> list[str]:
    """The simulated engine's command: the vLLM flags plus its GPU, model and engine profiles."""
    flags = vllm_argv(cfg, host, port)[2:]
    return [
        sys.executable,
        "-m",
        "benchcamp.cli",
        "engine",
        "serve",
        *flags,
        "--gpu",
        cfg.hardware.gpu,
        "--num-gpus",
        str(cfg.hardware.gpu_count),
        "--model-profile",
        cfg.engine.model_profile,
        "--engine-profile",
        cfg.engine_profile,
        # the header the client's session key travels in (the engine's default is X-Session-ID)
        *(["--routing-key-header", cfg.load.session_header] if cfg.load.session_header != "X-Session-ID" else []),
    ]
