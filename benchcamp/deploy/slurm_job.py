"""What a Slurm job of ``provider.kind: slurm`` runs: the batch script around the engine's command line.

The provider (``benchcamp.provision.slurm``) is handed a :class:`SlurmEngineJob` (``node_boot(cfg)``, wired by the
campaign's provision step) and submits its script; it never builds the engine's command line itself. The script
holds no secret (Slurm stores it, and ``scontrol write batch_script`` prints it): it sources the 0600 env file
the provider wrote, deletes it, and execs the engine (the simulated engine for engine.kind=simulated, ``vllm
serve`` for engine.kind=vllm), which listens on every address at provider.slurm.engine_port. Every engine process
carries the execution id in its environment (``BENCHCAMP_EXECUTION_ID``): a process that daemonizes out of the
job is found by it (:meth:`SlurmEngineJob.kill_leftovers`).

A topology (``cfg.topology``: roles x instances x nodes behind the router), or one engine over several nodes
(``engine.data_parallel_size_local``: a head and ``--headless`` peers), is **one job of every node it needs**
(``--nodes=N --ntasks-per-node=1``: :func:`job_nodes`), its batch script starting one ``srun`` step per node
(``--nodes=1 --nodelist=<that node>``) and the router beside it on the first node (the batch host). Why one job,
and not a job per role instance or a heterogeneous job: a topology serves only whole (prefill without decode
measures nothing), and one job is allocated whole, at once (separate jobs would let one role's GPUs idle in a
running job while another role waits in the queue, and two campaigns could each hold half of what they need);
it is one id to ``scancel``, one time limit, one line in ``squeue``, one accounting record whose steps are
the engines, node by node: what a Slurm admin sees of any multi-node MPI or inference job. A heterogeneous job
(``hetjob``) is Slurm's answer when components need different resources per node (other GPU types); every
role here runs on the job's one kind of node (``provider.slurm``'s gres, constraint, partition), so roles on
different GPUs are refused in one line (``check_config``). The nodes come from Slurm as the job starts
(``scontrol show hostnames $SLURM_JOB_NODELIST``) and their addresses from ``scontrol show node`` (NodeAddr);
each head's address goes in its peers' ``--data-parallel-address`` and in the router's backends. Ports:
the router on provider.slurm.engine_port (the deployment's endpoint, on the batch host), the heads, RPC and
side-channel ports from engine_port + 1 up, one per process, so that nodes that share a host (a test
cluster) never collide. Every step inherits the job's environment (``srun --export=ALL``: the engine key,
the execution id); ``scancel`` ends every step and the router; any process that exits ends the job (the
others are stopped), so that readiness sees the job end.
"""

from __future__ import annotations

import itertools
import re
import shlex
import sys
from pathlib import Path

from benchcamp.config import Config, topology_of
from benchcamp.deploy.argv import multinode, simulated_argv, vllm_argv
from benchcamp.deploy.local import EXECUTION_ENV, kill_execution_engines
from benchcamp.deploy.roles import Proc, plan
from benchcamp.secrets import redaction
from benchcamp.topology import Topology

# The address of node i of the job, known only once it runs: "${addr[i]}" in the batch script.
NODE_TOKEN = "__BENCHCAMP_NODE_{}__"
_NODE_TOKEN = re.compile(r"__BENCHCAMP_NODE_(\d+)__")
_SHELL_SAFE = re.compile(r"^[\w@%+=:,./-]+$")  # what shlex leaves unquoted: a token in it can become "${addr[i]}"

# A name is safe to export from the script (the keys of provider.slurm.env).
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def job_topology(cfg: Config) -> Topology | None:
    """What a multi-process job runs (a topology, or one engine over several nodes); None for one engine on
    one node (one process: the plain script)."""
    if cfg.topology is not None:
        return cfg.topology
    return topology_of(cfg) if multinode(cfg) else None


def job_nodes(cfg: Config) -> int:
    """How many nodes the execution's one job asks for (``sbatch --nodes``)."""
    topo = job_topology(cfg)
    return len(topo.nodes()) if topo is not None else 1


def job_processes(cfg: Config, kv_folder: Path | None = None) -> list[tuple[Proc, int]]:
    """Every process of a multi-process job with the index of the job's node it runs on (the router: 0, the
    batch host), their argv without secrets; addresses are :data:`NODE_TOKEN` s. ``kv_folder``: the simulated
    engines' KV connector folder (a shared one, beside the env file)."""
    topo = job_topology(cfg)
    assert topo is not None
    port = cfg.provider.slurm.engine_port
    ports = itertools.count(port + 1 if topo.needs_router else port)  # the front process serves engine_port
    placed = {(n.role, n.instance, n.node): n.index for n in topo.nodes()}
    real = cfg.engine.kind == "vllm"
    if cfg.topology is None:  # topology_of's role already holds engine.extra_args: role_config adds both
        cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"extra_args": []})})
    procs = plan(
        cfg,
        topo,
        "0.0.0.0",
        free_port=lambda: next(ports),
        storage=kv_folder if not real else None,
        executable="vllm" if real else None,  # the compute node's (on the job's PATH: provider.slurm.env)
        router_port=port,
        address_of=lambda kind, instance, node: NODE_TOKEN.format(placed[(kind, instance, node)]),
    )
    python = cfg.provider.slurm.python or sys.executable
    out = []
    for p in procs:
        if p.argv[0] == sys.executable:  # the simulated engine and the router: benchcamp on the compute node
            p.argv = [python, *p.argv[1:]]
        out.append((p, 0 if p.role == "router" else placed[(p.role, p.instance, p.node)]))  # type: ignore[index]
    return out


def _shell(words: list[str]) -> str:
    """``shlex.join`` with every node token as the node's address from the script's ``addr`` array."""
    for w in words:
        if _NODE_TOKEN.search(w) and not _SHELL_SAFE.match(w):
            raise ValueError(f"a node address inside a quoted word: {w!r}")
    return _NODE_TOKEN.sub(lambda m: '"${addr[' + m.group(1) + ']}"', shlex.join(words))


def engine_command(cfg: Config) -> tuple[list[str], dict[str, str]]:
    """(the job's engine argv without secrets, the env that carries them: VLLM_API_KEY, HF_TOKEN, ...); a
    multi-process job's argv is empty (each process's is :func:`job_processes`')."""
    from benchcamp.secrets.refs import engine_secret_env

    port = cfg.provider.slurm.engine_port
    if job_topology(cfg) is not None:  # several processes: the secrets of every one (the argv is each one's)
        argv, env = [], {}
        for p, _ in job_processes(cfg):
            env.update(redaction.split_engine_secrets(p.argv)[1])
    elif cfg.engine.kind == "simulated":
        argv = simulated_argv(cfg, host="0.0.0.0", port=port)
        argv[0] = cfg.provider.slurm.python or sys.executable
        argv, env = redaction.split_engine_secrets(argv)
    else:  # the compute node's vLLM (on the job's PATH: provider.slurm.env), serving engine.model
        argv, env = redaction.split_engine_secrets(vllm_argv(cfg, host="0.0.0.0", port=port))
    env.update(engine_secret_env(cfg.engine.hf_token_ref))  # engine.hf_token_ref -> HF_TOKEN
    env.setdefault("VLLM_API_KEY", redaction.new_api_key())
    return argv, env


class SlurmEngineJob:
    """The batch script of an execution's engine job (``benchcamp.provision.slurm.SlurmJobBoot``)."""

    def __init__(self, cfg: Config):
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
        if job_topology(self.cfg) is not None:
            return self._topology_script(execution_id, env_file)
        lines = [
            *self._preamble(execution_id, env_file),
            'echo "benchcamp: engine on $(hostname) (job $SLURM_JOB_ID, GPUs ${CUDA_VISIBLE_DEVICES:-none})"',
            f"exec {shlex.join(self._built()[0])}",
        ]
        return "\n".join(lines) + "\n"

    def _preamble(self, execution_id: str, env_file: str) -> list[str]:
        """Source and delete the env file (the secrets), mark every process with the execution id."""
        extra = self.cfg.provider.slurm.env
        return [
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
        ]

    def _topology_script(self, execution_id: str, env_file: str) -> str:
        """The batch script of a multi-node deployment: a step per node, the router on the batch host."""
        topo = job_topology(self.cfg)
        assert topo is not None
        s = self.cfg.provider.slurm
        kv = Path(env_file).with_suffix(".kv")  # removed with the env file's siblings at teardown
        procs = job_processes(self.cfg, kv)
        secrets = set(self._built()[1])
        nodes = job_nodes(self.cfg)
        gpu = f"gpu:{s.gres_type + ':' if s.gres_type else ''}"
        lines = [
            *self._preamble(execution_id, env_file),
            f"mkdir -p -m 700 {shlex.quote(str(kv))}",
            'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            f'[ "${{#nodes[@]}}" -ge {nodes} ] || {{ echo "benchcamp: job $SLURM_JOB_ID has ${{#nodes[@]}} node(s), '
            f'the deployment needs {nodes}" >&2; exit 1; }}',
            "addr=()",
            'for n in "${nodes[@]}"; do',
            '  a=$(scontrol show node -o "$n" | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
            '  addr+=("${a:-$n}")',
            "done",
            f'echo "benchcamp: {topo.describe()} on ${{nodes[*]}} (${{addr[*]}}), job $SLURM_JOB_ID"',
            "pids=()",
        ]
        gpus = {kind: role.gpus_per_node for kind, role in topo.roles()}
        for p, node in procs:
            argv, secret_env = redaction.split_engine_secrets(p.argv)
            assert set(secret_env) <= secrets, "a process's secret is not in the job's env file"
            env = "".join(f"{k}={_shell([v])} " for k, v in sorted(p.env.items()))
            if p.role == "router":
                lines.append(f'echo "benchcamp: router on ${{nodes[0]}}:{s.engine_port}"')
                lines.append(f"{env}{_shell(argv)} &")
            else:
                step = ["srun", "--nodes=1", "--ntasks=1", f"--cpus-per-task={s.cpus_per_task}", "--export=ALL"]
                step.append(f"--job-name={p.name}")
                if s.gpus_per_node:
                    step.append(f"--gres={gpu}{gpus[p.role]}")  # type: ignore[index]
                head = "head" if p.head else "headless peer"
                lines.append(f'echo "benchcamp: {p.name} ({head}) on ${{nodes[{node}]}}"')
                lines.append(f'{env}{shlex.join(step)} --nodelist="${{nodes[{node}]}}" {_shell(argv)} &')
            lines.append("pids+=($!)")
        lines += [
            # any process that ends ends the job: the others are stopped, and readiness sees the job end
            "status=0",
            "wait -n || status=$?",
            'echo "benchcamp: a process of the deployment exited (status $status); stopping the others" >&2',
            'kill "${pids[@]}" 2>/dev/null || true',
            "wait || true",
            "exit $(( status ? status : 1 ))",
        ]
        return "\n".join(lines) + "\n"

    def nodes(self) -> int:
        return job_nodes(self.cfg)

    def kill_leftovers(self, execution_id: str) -> int:
        return kill_execution_engines(execution_id)
