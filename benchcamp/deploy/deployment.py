"""The handle of a deployed engine: what later steps (sweep, stop) need, as small JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchcamp import secrets


@dataclass
class Deployment:
    endpoint: str  # base URL, e.g. http://127.0.0.1:8000
    api_key: str | None
    log_path: str | None  # engine stdout+stderr (local), None when remote
    handle: dict[str, Any] = field(default_factory=dict)  # kind, pid, create_time, argv, engine, fingerprint
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Deployment:
        return cls(
            endpoint=data["endpoint"],
            api_key=data.get("api_key"),
            log_path=data.get("log_path"),
            handle=dict(data.get("handle") or {}),
            model=data.get("model") or "",
        )

    def __repr__(self) -> str:  # never print the key
        return (
            f"Deployment(endpoint={self.endpoint!r}, api_key={secrets.mask_tail(self.api_key)}, "
            f"log_path={self.log_path!r})"
        )
