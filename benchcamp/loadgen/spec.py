"""What one sweep point runs (PointSpec) and what it produced (PointResult)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchcamp.errors import EndpointError  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from benchcamp.config import Load
    from benchcamp.loadgen.readiness import Capabilities


def default_workers() -> int:
    """One client process per core less one (the engine or the OS needs one), at least 1."""
    return max(1, (os.cpu_count() or 2) - 1)


def point_label(mode: str, level: float) -> str:
    """c32 (closed, 32 sessions), r2.5 (open, 2.5 sessions/s), t1 (trace at speed x1)."""
    prefix = {"closed": "c", "open": "r", "trace": "t"}[mode]
    return f"{prefix}{int(level)}" if float(level).is_integer() else f"{prefix}{level:g}"


def point_salt(label: str, execution: str) -> int:
    """A sweep point's prompt salt (non-zero 63-bit), from the campaign execution and the point label."""
    digest = hashlib.blake2b(f"{execution}\x00{label}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 1) or 1


@dataclass(frozen=True)
class PointSpec:
    label: str
    mode: str  # closed | open | trace
    level: float  # closed: sessions; open: sessions/s; trace: time scale
    warmup_s: float
    duration_s: float
    max_requests: int | None = None
    drain_s: float = 30.0
    request_timeout_s: float = 300.0
    workers: int = 0  # 0 = default_workers()
    api: str = "completions"  # completions | chat: the API the point sends to (after adapting to the server)
    arrival: str = "poisson"  # open loop: poisson | gamma
    gamma_shape: float = 1.0
    seed: int = 0
    salt: int = 0  # prompt salt (benchcamp.workload.tokens); 0 = the workload's own token ids
    # How requests look (benchcamp.loadgen.readiness.RequestPlan), adapted to what the server accepts:
    prompt: str = "ids"  # ids (token-id prompts) | text (words built from the same token blocks)
    vllm_sampling: bool = True  # min_tokens = max_tokens, ignore_eos: output lengths forced
    cached_tokens_reported: bool = True  # False: the server never reports cached tokens (records -1)
    request_notes: tuple[str, ...] = ()  # every way the requests differ from the workload as specified
    capabilities: dict | None = None  # benchcamp.loadgen.readiness.Capabilities.to_dict() of the endpoint
    session_header: str = "X-Session-ID"  # load.session_header: the routing key's header ("" = none)
    agentx: dict | None = None  # load.agentx (AgentX's replay rules) as a dict; None: benchcamp's replay
    # the lane rules of a closed loop without load.agentx (load.steady.replay_rules(); same mechanism)
    replay: dict | None = None

    @classmethod
    def from_load(
        cls, load: Load, level: float, execution_id: str | None = None, capabilities: Capabilities | None = None
    ) -> PointSpec:
        """The point of ``level`` under the config's ``load`` section; its prompt salt comes from the campaign execution,
        the seed and the label, so two executions against one long-lived engine
        share no prompts either. Requests adapt to ``capabilities`` (a
        benchcamp.loadgen.readiness.Capabilities, what the endpoint's probe found; None: a
        vLLM-compatible server, token-id prompts and vLLM's sampling fields)."""
        ld = load
        label = point_label(ld.mode, level)
        caps = capabilities
        request: dict[str, Any] = {"api": ld.api}
        if caps is not None:
            plan = caps.request_plan(ld.api)
            request = {
                "api": plan.api,
                "prompt": plan.prompt,
                "vllm_sampling": plan.vllm_sampling,
                "cached_tokens_reported": plan.cached_tokens_reported,
                "request_notes": plan.notes,
                "capabilities": caps.to_dict(),
            }
        agentx = ld.agentx.model_dump() if ld.agentx is not None else None
        if agentx is not None and not agentx["ignore_eos"]:
            request["vllm_sampling"] = False  # outputs may end early: an AgentX unsafe override
        salt = point_salt(label, f"{execution_id or ''}/seed={ld.seed}")
        if agentx is not None:  # the harness's cache-bust digest takes the benchmark id: the point's salt
            agentx["benchmark_id"] = f"{salt:016x}"
        return cls(
            label=label,
            mode=ld.mode,
            level=float(level),
            warmup_s=ld.warmup_s,
            # AgentX's profiling window replaces load.duration_s
            duration_s=ld.duration_s if agentx is None else float(agentx["duration_s"]),
            agentx=agentx,
            replay=ld.steady.replay_rules() if agentx is None and ld.mode in ("closed", "capacity") else None,
            max_requests=ld.max_requests,
            drain_s=ld.drain_s,
            request_timeout_s=ld.request_timeout_s,
            workers=ld.workers,
            arrival=ld.arrival,
            gamma_shape=ld.gamma_shape,
            seed=ld.seed,
            salt=salt,
            session_header=ld.session_header,
            **request,
        )

    @property
    def lane_rules(self) -> dict | None:
        """The closed loop's lane rules (``benchcamp.loadgen.agentx.AgentxReplay``): AgentX's, else load.steady's."""
        return self.agentx if self.agentx is not None else self.replay

    @property
    def window_end_s(self) -> float:
        return self.warmup_s + self.duration_s

    def n_workers(self, top_level_sessions: int) -> int:
        """Worker processes for this point: never more than there are slots or sessions to give them."""
        n = self.workers or default_workers()
        cap = int(self.level) if self.mode == "closed" else top_level_sessions
        return max(1, min(n, max(1, cap)))


@dataclass
class PointResult:
    label: str
    records_path: Path
    window: tuple[float, float]  # measurement window, seconds since the point's epoch
    client_health: dict[str, Any] = field(default_factory=dict)
    server_metrics_delta: dict[str, Any] = field(default_factory=dict)
    aborted: str | None = None  # why the point ended early; None when it ran to completion
    level: float = 0.0
    requests: int = 0  # records written (all phases)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["records_path"] = str(self.records_path)
        d["window"] = list(self.window)
        return d

    @classmethod
    def load(cls, point_dir: str | Path) -> PointResult:
        """The result ``run_point`` wrote to ``point_dir/point.json``, with its records
        beside it (wherever the folder is now)."""
        import json

        point_dir = Path(point_dir)
        doc = json.loads((point_dir / "point.json").read_text())
        fields = {
            k: doc[k]
            for k in ("label", "client_health", "server_metrics_delta", "aborted", "level", "requests")
            if k in doc
        }
        return cls(records_path=point_dir / "records.parquet", window=tuple(doc["window"]), **fields)


def probe_spec(
    load: Load, level: int, attempt: int = 0, execution_id: str = "", capabilities: Capabilities | None = None
) -> PointSpec:
    """The ``PointSpec`` of a search probe: a closed-loop point of ``level`` agents (label
    ``c<level>``); a retry (attempt k >= 1) is ``c<level>.retry<k>`` with a window and a
    drain 2^k as long (validity's fixes for too few requests in the window and for requests
    still running when the drain ends) and a prompt salt of its own (on a shared engine it
    must not find the first attempt's prompts in the prefix cache)."""
    closed = load.model_copy(deep=True)
    closed.mode = "closed"
    spec = PointSpec.from_load(closed, int(level), execution_id, capabilities=capabilities)
    if attempt:
        label = f"{spec.label}.retry{attempt}"
        salt = point_salt(label, f"{execution_id or ''}/seed={load.seed}")
        agentx = None if spec.agentx is None else {**spec.agentx, "benchmark_id": f"{salt:016x}"}
        spec = replace(
            spec,
            label=label,
            duration_s=spec.duration_s * 2**attempt,
            drain_s=spec.drain_s * 2**attempt,
            salt=salt,
            agentx=agentx,
        )
    return spec
