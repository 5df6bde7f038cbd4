"""What runs on a node that a provider launches: the engine's command line and the node's boot script.

A provider that launches machines (``benchcamp.provision.ec2``) is handed a :class:`Ec2NodeBoot`
(``get_provider(cfg, boot=node_boot(cfg))``, wired by the campaign's provision step) and runs its script at each
node's first boot; the provider never builds the engine's command line itself. Secrets never travel in the
script's argv: the engine reads them from a root-only env file (written from SSM at boot, or from the script
itself with ``provider.ec2.secrets_via: userdata``).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from benchcamp.config import Config
from benchcamp.provision.ec2_secrets import env_file_text
from benchcamp.secrets import redaction

ENV_FILE = "/etc/benchcamp/engine.env"
DP_RPC_PORT = 13345  # vLLM's --data-parallel-rpc-port on a multi-node head (vLLM's own default is 29550 + ...)
NODE_IP = "__BENCHCAMP_NODE_IP__"  # replaced at boot by the node's private address (hostname -I)
NODE_FILE = "/etc/benchcamp/node.json"


class Ec2NodeBoot:
    """The boot scripts of an EC2 deployment's nodes (``benchcamp.provision.base.NodeBoot``)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        # built once: its env holds this deployment's one API key, which script() must not replace
        self.argv, self.env = engine_command(cfg)

    def engine_env(self) -> dict[str, str]:
        return dict(self.env)

    def script(self, env: dict[str, str] | None = None, parameter: str | None = None) -> str:
        return user_data(self.cfg, self.argv, env=env, parameter=parameter)

    def node_script(
        self, placement: Any, head_ip: str | None, env: dict[str, str] | None, parameter: str | None
    ) -> str:
        argv = node_argv(self.cfg, placement, head_ip)
        return cluster_user_data(self.cfg, argv, placement, head_ip, env, parameter)


def node_boot(cfg: Config) -> Any:
    """The boot of ``cfg``'s nodes where its provider launches machines (an Ec2NodeBoot), or submits jobs (a
    ``benchcamp.deploy.slurm_job.SlurmEngineJob``), else None."""
    if cfg.provider.kind == "slurm":
        from benchcamp.deploy.slurm_job import SlurmEngineJob

        return SlurmEngineJob(cfg)
    return Ec2NodeBoot(cfg) if cfg.provider.kind == "ec2" else None


def engine_command(cfg: Config) -> tuple[list[str], dict[str, str]]:
    """(``vllm serve`` argv without secrets, the env that carries them: VLLM_API_KEY (a fresh key unless
    engine.extra_args names one), HF_TOKEN)."""
    from benchcamp.deploy.argv import vllm_argv
    from benchcamp.secrets.refs import engine_secret_env

    argv, env = redaction.split_engine_secrets(vllm_argv(cfg, host="0.0.0.0", port=cfg.provider.ec2.engine_port))
    env.update(engine_secret_env(cfg.engine.hf_token_ref))  # engine.hf_token_ref -> HF_TOKEN
    env.setdefault("VLLM_API_KEY", redaction.new_api_key())
    return argv, env


def user_data(cfg: Config, argv: list[str], env: dict[str, str] | None = None, parameter: str | None = None) -> str:
    """Boot script: the engine env file (fetched from the SSM ``parameter``, or written from ``env`` when
    provider.ec2.secrets_via=userdata), then the pinned vLLM with ``argv`` (no secrets in it)."""
    ec2 = cfg.provider.ec2
    ttl_min = max(1, int(ec2.ttl_hours * 60))
    lines = [
        "#!/bin/bash",
        "# benchcamp engine node. Never `set -x` here: secrets must stay out of cloud-init logs.",
        "set -euo pipefail",
        "umask 077",
        f"shutdown -h +{ttl_min} 'benchcamp TTL reached' || true  # terminates (shutdown behaviour)",
        "install -d -m 700 /etc/benchcamp",
    ]
    if parameter:
        # The instance role's credentials can lag the boot by a few seconds: retry for ~5 minutes.
        get = (
            f"aws ssm get-parameter --region {shlex.quote(ec2.region)} --name {shlex.quote(parameter)} "
            f"--with-decryption --query Parameter.Value --output text > {ENV_FILE}"
        )
        lines += [
            f"for attempt in $(seq 30); do if {get}; then break; fi; sleep 10; done",
            (
                f"[ -s {ENV_FILE} ] || {{ echo 'benchcamp: cannot read {parameter} from SSM; check the role of "
                f"provider.ec2.instance_profile' >&2; exit 1; }}"
            ),
        ]
    else:
        lines += [f"cat > {ENV_FILE} <<'BENCHCAMP_EOF'", env_file_text(env or {}).rstrip("\n"), "BENCHCAMP_EOF"]
    lines.append(f"chmod 600 {ENV_FILE}")
    if ec2.install == "container":
        image = f"{ec2.container_image}:v{cfg.engine.version}"
        # The official image's entrypoint is `vllm serve`: pass what follows it.
        lines.append(
            "docker run -d --name benchcamp-engine --gpus all --ipc=host "
            f"-p {ec2.engine_port}:{ec2.engine_port} --env-file {ENV_FILE} "
            f"{shlex.quote(image)} {shlex.join(argv[2:])}"
        )
    else:
        lines += [
            "python3 -m venv /opt/vllm",
            f"/opt/vllm/bin/pip install --quiet {shlex.quote('vllm==' + cfg.engine.version)}",
            (
                f"systemd-run --unit benchcamp-engine --property=EnvironmentFile={ENV_FILE} "
                f"/opt/vllm/bin/{shlex.join(argv)}"
            ),
        ]
    return "\n".join(lines) + "\n"


def node_argv(cfg: Config, placement: Any, head_ip: str | None) -> list[str]:
    """``vllm serve`` argv of one node of a multi-node deployment: its role's flags; a head serves the API on
    provider.ec2.engine_port and coordinates its instance's DP ranks at its own address (``NODE_IP``, set at
    boot); a peer runs ``--headless`` from its start rank against ``head_ip``."""
    from benchcamp.config import topology_of
    from benchcamp.deploy.argv import vllm_argv
    from benchcamp.deploy.roles import role_config, role_flags

    topo = topology_of(cfg)
    role = topo.role(placement.role)
    rc = role_config(cfg, role)
    multinode = role.nodes_per_instance > 1
    argv = vllm_argv(
        rc, host="0.0.0.0", port=cfg.provider.ec2.engine_port, dp_rpc_port=DP_RPC_PORT if multinode else None
    )
    if multinode:
        i = argv.index("--data-parallel-address")
        argv[i + 1] = NODE_IP if placement.head else str(head_ip)
    argv += role_flags(cfg, placement.role, role, None)
    if not placement.head:
        argv += ["--headless", "--data-parallel-start-rank", str(placement.start_rank)]
    return argv


def cluster_user_data(
    cfg: Config, argv: list[str], placement: Any, head_ip: str | None, env: dict[str, str] | None, parameter: str | None
) -> str:
    """A node's boot script: :func:`user_data` plus its place in the deployment (``NODE_FILE``: role, instance,
    node, DP ranks, the head's address), its own address for a head's coordinator, and host networking with
    the EFA devices for the engine container (DP ranks, NIXL and the all-to-all talk node to node)."""
    script = user_data(cfg, argv, env=env, parameter=parameter)
    node = {
        "role": placement.role,
        "instance": placement.instance,
        "node": placement.node,
        "head": placement.head,
        "data_parallel_size": placement.data_parallel_size,
        "data_parallel_start_rank": placement.start_rank,
        "data_parallel_size_local": placement.local_ranks,
        "head_address": head_ip or "self",
    }
    boot = [
        "BENCHCAMP_NODE_IP=$(hostname -I | awk '{print $1}')",
        f"cat > {NODE_FILE} <<'BENCHCAMP_NODE'",
        json.dumps(node, sort_keys=True),
        "BENCHCAMP_NODE",
    ]
    script = script.replace(
        "install -d -m 700 /etc/benchcamp\n", "install -d -m 700 /etc/benchcamp\n" + "\n".join(boot) + "\n", 1
    )
    port = cfg.provider.ec2.engine_port
    script = script.replace(f"-p {port}:{port} ", "--network host --device /dev/infiniband ")
    return script.replace(NODE_IP, '"$BENCHCAMP_NODE_IP"')
