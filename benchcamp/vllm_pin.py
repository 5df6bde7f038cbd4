"""The vLLM version benchcamp tracks, and the check against the vLLM installed here.

``PINNED_VLLM`` is the version of the ``vllm`` extra in uv.lock (a test keeps the
two equal). It is the default ``engine.version``: the EC2 image tag
(``vllm/vllm-openai:v<version>``), the pip pin, the simulated engine's ``/version``.
"""

from __future__ import annotations

from importlib import metadata

from benchcamp.errors import ConfigError

PINNED_VLLM = "0.33.0"


def installed_vllm() -> str | None:
    """The installed vLLM's version (package metadata: no import, no GPU), or None."""
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def check_installed(version: str, installed: str | None = None) -> None:
    """engine.version must name the vLLM that runs here; no vLLM installed = nothing to check
    (the local provider then runs the simulated engine)."""
    have = installed if installed is not None else installed_vllm()
    if have is None or have == version:
        return
    raise ConfigError(
        f"engine.version={version} but the vLLM installed here is {have}; set "
        f"engine.version={have}, or install vllm=={version}"
    )
