"""The deployment's API key, found again from its reference (``Deployment.api_key_ref``) by the
step that needs it (sweep, stop), in its own process: the key never travels between steps.

``engine-env:PID:CREATE_TIME``: a local engine; the key lives only in that process's environment,
read back (``/proc/PID/environ``) by the same user on the same machine. ``ec2:EXECUTION_ID``: the
execution's SSM SecureString (or the node's user data), via the EC2 provider. ``slurm:EXECUTION_ID``: the 0600
key file of the execution's Slurm job, via the slurm provider. ``process:N``: a key
handed to this process directly (only here). Anything else is a user reference
(benchcamp.secrets.refs: ``env:``, ``file:``, ``airflow-conn:``, ...): an endpoint's key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchcamp.errors import ConfigError
from benchcamp.secrets import refs as secret_refs

if TYPE_CHECKING:
    from benchcamp.config import Config


def _engine_env_key(rest: str) -> str | None:
    """VLLM_API_KEY from a local engine's environment (same user, same machine); None when the
    engine is gone (its pid reused, or it died: the sweep then fails on the engine, not the key)."""
    import psutil

    from benchcamp.deploy.local import alive

    pid_text, _, created = rest.partition(":")
    try:
        proc = alive({"pid": int(pid_text), "create_time": float(created or 0)})  # None: gone or pid reused
        if proc is None:
            return None
        return proc.environ().get("VLLM_API_KEY") or None
    except (psutil.NoSuchProcess, psutil.ZombieProcess, ValueError):
        return None
    except psutil.AccessDenied:
        raise ConfigError(
            f"engine pid {pid_text}: its environment (the API key) is not readable by this user; "
            "run the deploy and sweep tasks as the same user on the same machine"
        ) from None


def _needs(cfg: Config | None, ref: str) -> Config:
    if cfg is None:
        raise ConfigError(f"the deployment's API key ({ref}) is kept by its provider: pass the campaign's config")
    return cfg


def deployment_api_key(cfg: Config | None, deployment: dict[str, Any]) -> str | None:
    """The API key of ``deployment`` (a Deployment.to_dict()), resolved in this process: a key kept in
    this process (``benchcamp run``), else its ``api_key_ref``. ``cfg``: the campaign's config, which an
    ``ec2:`` or ``slurm:`` reference needs (its provider section says where the key is kept); None for others."""
    if deployment.get("api_key"):  # an in-process handle (never in a dict that left the process)
        return secret_refs.publish(str(deployment["api_key"]))
    ref = deployment.get("api_key_ref")
    if not ref:
        return None
    scheme, _, rest = ref.partition(":")
    if scheme == "process":
        key = secret_refs.in_process(ref)
        if key is None:
            raise ConfigError(f"the deployment's API key was handed to another process ({ref}); use a reference")
        return secret_refs.publish(key)
    if scheme == "engine-env":
        return secret_refs.publish(_engine_env_key(rest))
    if scheme == "ec2":
        from benchcamp.provision import Node
        from benchcamp.provision.ec2 import Ec2Provider

        handle = deployment.get("handle") or {}
        node = Node(kind="ec2", host="", node_id=handle.get("node_id", ""), meta={"execution_id": rest})
        return secret_refs.publish(Ec2Provider(_needs(cfg, ref)).api_key_for(node))
    if scheme == "slurm":  # the 0600 copy beside the job's env file (benchcamp.provision.slurm)
        from benchcamp.provision.slurm import SlurmProvider

        return secret_refs.publish(SlurmProvider(_needs(cfg, ref)).api_key_for(rest))
    return secret_refs.resolve(ref, "the endpoint's API key")
