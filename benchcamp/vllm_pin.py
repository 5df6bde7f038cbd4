"""The vLLM version benchcamp tracks.

``PINNED_VLLM`` is the version of the ``vllm`` extra in uv.lock (a test keeps the
two equal). It is the default ``engine.version``: the EC2 image tag
(``vllm/vllm-openai:v<version>``), the pip pin, the simulated engine's ``/version``.
A local real engine is checked against the vLLM it finds (benchcamp.deploy.vllm_install).
"""

from __future__ import annotations

PINNED_VLLM = "0.33.0"
