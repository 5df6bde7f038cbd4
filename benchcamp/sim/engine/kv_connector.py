"""The simulated engine's KV connector: prefill/decode disaggregation between two servers.

Mirrors vLLM's disk-backed ``ExampleConnector`` (vllm/distributed/kv_transfer/kv_connector/v1/
example_connector.py; its old name SharedStorageConnector), the one connector that works on
vLLM's CPU build, so a simulated 1P1D behaves as the real one on this machine:

- the engine is started with vLLM's ``--kv-transfer-config`` JSON: ``kv_connector``,
  ``kv_role`` (``kv_producer``, ``kv_consumer`` or ``kv_both``) and
  ``kv_connector_extra_config.shared_storage_path``, a folder both instances see;
- a producing role (``kv_producer``, ``kv_both``) stores every prompt it prefills: the
  whole blocks of its first ``len - 1`` tokens, ``(len - 1) // block_size`` blocks, under the
  chained hash of the last of them (which names the whole prefix, as the connector's folder
  name hashes the prefix's token ids);
- a consuming role (``kv_consumer``, ``kv_both``) looks a prompt up with the connector's own
  rule, ``(len - 2) // block_size`` blocks (``align_to_block_size(len(token_ids) - 1)``), and
  finds them only when a prompt of exactly that aligned length was stored: so, as in vLLM,
  a prompt of ``k * block_size + 1`` tokens never hits (store aligns to ``k`` blocks, lookup
  to ``k - 1``). What the local prefix cache already holds is not transferred again; the rest
  of the hit is "external" (``vllm:external_prefix_cache_hits_total``,
  ``prompt_tokens_by_source_total{source="external_kv_transfer"}``) and counts in
  ``usage.cached_tokens`` as vLLM reports it. The lookup is ``EngineCore.add_request``'s
  ``external_tokens``: the scheduler's one KV-connector path (the topology simulation's NIXL
  decode takes it too), which caches the pulled blocks like computed ones.

The transfer itself: ``ExampleConnector`` loads the blocks synchronously in the forward pass
that admits the request, so the engine adds ``latency + tokens x KV bytes per token per GPU /
link bandwidth`` to that step (every GPU of the instance pulls its own shard at once). The
link is the one between the two instances (``--kv-link-gbps`` GB/s one way and
``--kv-link-latency-us``, benchcamp's flags: the topology's profiles name NVLink inside a
rack, RDMA between nodes). Other connector names (NixlConnector, LMCache, Mooncake) are
modelled the same way, with the folder standing for the transfer: the deployer gives the
simulated engines a ``shared_storage_path``.

Nothing in vLLM cleans the folder; benchcamp's deploy removes it at teardown.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


@dataclass(frozen=True)
class KVTransferConfig:
    connector: str
    role: str
    storage: Path

    @property
    def produces(self) -> bool:
        return self.role in ("kv_producer", "kv_both")

    @property
    def consumes(self) -> bool:
        return self.role in ("kv_consumer", "kv_both")


def parse_kv_transfer_config(text: str) -> KVTransferConfig:
    """vLLM's ``--kv-transfer-config`` JSON -> the simulated connector; ValueError naming the key."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f"--kv-transfer-config is not JSON ({exc}); give e.g. "
            '\'{"kv_connector":"ExampleConnector","kv_role":"kv_both",'
            '"kv_connector_extra_config":{"shared_storage_path":"/tmp/kv"}}\''
        ) from None
    if not isinstance(raw, dict) or not raw.get("kv_connector"):
        raise ValueError("--kv-transfer-config needs kv_connector (e.g. ExampleConnector)")
    role = raw.get("kv_role") or "kv_both"
    if role not in KV_ROLES:
        raise ValueError(f"--kv-transfer-config kv_role={role!r}: use one of {', '.join(KV_ROLES)}")
    extra = raw.get("kv_connector_extra_config") or {}
    path = extra.get("shared_storage_path") if isinstance(extra, dict) else None
    if not path:
        raise ValueError(
            "--kv-transfer-config: the simulated engine models every KV connector with a shared folder; "
            "give kv_connector_extra_config.shared_storage_path"
        )
    return KVTransferConfig(str(raw["kv_connector"]), role, Path(path))


def stored_blocks(prompt_len: int, block_size: int) -> int:
    """Blocks a producer stores for a prompt: those of its first ``len - 1`` tokens."""
    return max(prompt_len - 1, 0) // block_size


def lookup_blocks(prompt_len: int, block_size: int) -> int:
    """Blocks a consumer looks up for a prompt: ``align_to_block_size(len - 1)`` of its ``len - 1`` tokens."""
    return max(prompt_len - 2, 0) // block_size


class SharedStorage:
    """The connector's folder: one small file per stored prefix, named by its last block's chained hash."""

    def __init__(self, cfg: KVTransferConfig, block_size: int) -> None:
        self.cfg, self.block_size = cfg, block_size
        self.dir = cfg.storage
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stored = 0  # prefixes written by this instance

    def _path(self, h: int) -> Path:
        return self.dir / f"{h & 0xFFFFFFFFFFFFFFFF:016x}"

    def store(self, hashes: list[int], prompt_len: int) -> None:
        if not self.cfg.produces:
            return
        k = min(stored_blocks(prompt_len, self.block_size), len(hashes))
        if k <= 0:
            return
        path = self._path(hashes[k - 1])
        if path.exists():
            return
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"tokens": k * self.block_size}))
        os.replace(tmp, path)
        self.stored += 1

    def lookup(self, hashes: list[int], prompt_len: int) -> int:
        """Tokens the folder holds for this prompt (whole blocks; 0 when its aligned prefix was not stored)."""
        if not self.cfg.consumes:
            return 0
        k = min(lookup_blocks(prompt_len, self.block_size), len(hashes))
        if k <= 0 or not self._path(hashes[k - 1]).exists():
            return 0
        return k * self.block_size
