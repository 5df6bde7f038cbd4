"""What a Slurm job of ``provider.kind: slurm`` runs: the batch script around the engine's command line.

The provider (``benchcamp.provision.slurm``) is handed a :class:`SlurmEngineJob` (``node_boot(cfg)``, wired by the
campaign's provision step) and submits its script; it never builds the engine's command line itself. The script
holds no secret (Slurm stores it, and ``scontrol write batch_script`` prints it): it sources the 0600 env file
the provider wrote, deletes it, and execs the engine (the simulated engine for engine.kind=simulated, ``vllm
serve`` for engine.kind=vllm), which listens on every address at provider.slurm.engine_port. Every engine process
carries the execution id in its environment (``BENCHCAMP_EXECUTION_ID``): a process that daemonizes out of the
job is found by it (:meth:`SlurmEngineJob.kill_leftovers`).
"""

from __future__ import annotations

import shlex
import sys

from benchcamp import redaction
from benchcamp.config import Config
from benchcamp.deploy.argv import simulated_argv, vllm_argv
from benchcamp.deploy.local import EXECUTION_ENV, kill_execution_engines

# A name is safe to export from the script (the keys of provider.slurm.env).
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def engine_command(cfg: Config) -> tuple[list[str], dict[str, str]]:
    """(the job's engine argv without secrets, the env that carries them: VLLM_API_KEY, HF_TOKEN, ...)."""
    from benchcamp.secret_refs import engine_secret_env

    port = cfg.provider.slurm.engine_port
    if cfg.engine.kind == "simulated":
        argv = simulated_argv(cfg, host="0.0.0.0", port=port)
        argv[0] = cfg.provider.slurm.python or sys.executable
    else:  # the compute node's vLLM (on the job's PATH: provider.slurm.env), serving engine.model
        argv = vllm_argv(cfg, host="0.0.0.0", port=port)
    argv, env = redaction.split_engine_secrets(argv)
    env.update(engine_secret_env(cfg))  # engine.hf_token_ref -> HF_TOKEN
    env.setdefault("VLLM_API_KEY", redaction.new_api_key())
    return argv, env


class SlurmEngineJob:
    """The batch script of an execution's engine job (``benchcamp.provision.slurm.SlurmJobBoot``)."""

    def __init__(self, cfg: Config):
        import re

        from benchcamp.errors import ConfigError

        self.cfg = cfg
        for name in cfg.provider.slurm.env:
            if not re.match(_ENV_NAME, name):
                raise ConfigError(f"provider.slurm.env: {name!r} is not a variable name; use letters, digits and _")
        self._command: tuple[list[str], dict[str, str]] | None = None

    def _built(self) -> tuple[list[str], dict[str, str]]:
        # built once, on first use (teardown needs none): its env holds this deployment's one API key
        if self._command is None:
            self._command = engine_command(self.cfg)
        return self._command

    def engine_env(self) -> dict[str, str]:
        return dict(self._built()[1])

    def script(self, execution_id: str, env_file: str) -> str:
        extra = self.cfg.provider.slurm.env
        lines = [
            "#!/bin/bash",
            "# benchcamp engine job. No secret here: Slurm stores this script. Never `set -x`.",
            "set -euo pipefail",
            f"env_file={shlex.quote(env_file)}",
            '[ -r "$env_file" ] || { echo "benchcamp: $env_file is not readable on $(hostname); provider.slurm.env_dir '
            'must be a folder this node reads" >&2; exit 1; }',
            'set -a; . "$env_file"; set +a',
            'rm -f "$env_file"',
            f"export {EXECUTION_ENV}={shlex.quote(execution_id)}",
            *(f"export {k}={shlex.quote(v)}" for k, v in sorted(extra.items())),
            'echo "benchcamp: engine on $(hostname) (job $SLURM_JOB_ID, GPUs ${CUDA_VISIBLE_DEVICES:-none})"',
            f"exec {shlex.join(self._built()[0])}",
        ]
        return "\n".join(lines) + "\n"

    def kill_leftovers(self, execution_id: str) -> int:
        return kill_execution_engines(execution_id)
