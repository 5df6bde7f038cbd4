"""The handle of a deployed engine: what later steps (sweep, stop) need, as small JSON.

The key itself stays in this process (``api_key``); what leaves it (:meth:`Deployment.to_dict`,
an Airflow XCom) carries ``api_key_ref``, where a later step finds the key
(benchcamp.secrets.refs.deployment_api_key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchcamp.secrets import redaction


@dataclass
class Deployment:
    endpoint: str  # base URL, e.g. http://127.0.0.1:8000
    api_key: str | None  # in this process only: never in to_dict()
    log_path: str | None  # engine stdout+stderr (local), None when remote
    handle: dict[str, Any] = field(default_factory=dict)  # kind, pid, create_time, argv, engine, fingerprint
    model: str = ""
    api_key_ref: str | None = None  # benchcamp.secrets.refs: engine-env:PID:T, ec2:EXECUTION, env:NAME, ...

    def to_dict(self) -> dict[str, Any]:
        """Small JSON for other steps and processes: the key's reference, never the key."""
        return {
            "endpoint": self.endpoint,
            "api_key_ref": self.api_key_ref,
            "log_path": self.log_path,
            "handle": dict(self.handle),
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Deployment:
        return cls(
            endpoint=data["endpoint"],
            api_key=data.get("api_key"),
            log_path=data.get("log_path"),
            handle=dict(data.get("handle") or {}),
            model=data.get("model") or "",
            api_key_ref=data.get("api_key_ref"),
        )

    def __repr__(self) -> str:  # never print the key
        return (
            f"Deployment(endpoint={self.endpoint!r}, api_key={redaction.mask_tail(self.api_key)}, "
            f"api_key_ref={self.api_key_ref!r}, log_path={self.log_path!r})"
        )
