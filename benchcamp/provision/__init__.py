"""Where the engine runs: ``get_provider(cfg)`` -> local, ec2, endpoint or slurm."""

from __future__ import annotations

from benchcamp.config import Config
from benchcamp.provision.base import Node, Provider, ProvisionError

__all__ = ["Node", "Provider", "ProvisionError", "get_provider"]


def get_provider(cfg: Config, **kwargs) -> Provider:
    """The provider named by ``cfg.provider.kind``; kwargs go to the ec2 provider's constructor (``boot=``: what
    its nodes run, ``benchcamp.deploy.remote.node_boot``; ``client=``: a preconfigured boto3 EC2 client), and
    ``boot=`` to the slurm provider's (what its job runs)."""
    kind = cfg.provider.kind
    if kind == "local":
        from benchcamp.provision.local import LocalProvider

        return LocalProvider(cfg)
    if kind == "ec2":
        from benchcamp.provision.ec2 import Ec2Provider

        return Ec2Provider(cfg, **kwargs)
    if kind == "endpoint":
        from benchcamp.provision.endpoint import EndpointProvider

        return EndpointProvider(cfg)
    if kind == "slurm":
        from benchcamp.provision.slurm import SlurmProvider

        return SlurmProvider(cfg, boot=kwargs.get("boot"))
    raise ProvisionError(f"provider.kind={kind!r}: unknown; use local, ec2, endpoint or slurm")
