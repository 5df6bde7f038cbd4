"""What one step of a campaign hands to the next: the node, the deployment, the workload reference, the summary,
the evaluation and the verdict's outcome, as frozen dataclasses.

`benchcamp run` (benchcamp.campaign.driver) passes them as objects. An Airflow task runs each step in a process
of its own and XCom carries JSON, so the tasks (tasks/campaign_tasks.py) hand on ``x.to_dict()`` and the next
task reads it back with ``from_dict``: ``from_dict(d).to_dict() == d``, the XCom documents being the dicts the
steps returned before they were typed, which a running Airflow's stored XComs still are.

A value JSON cannot hold (NaN, +-inf) follows benchcamp.results.jsonsafe: ``to_dict`` writes it as null (XCom
refuses NaN). A key a producer adds that is not a field here (a provider's own node meta, a deploy-internal
handle entry) is kept in the object's ``extra`` and written back as it came; so is a known key whose value is
not of its field's type (a null where a string is expected), so that nothing read is lost or changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from benchcamp.campaign import kinds
from benchcamp.campaign.kinds import Status
from benchcamp.campaign.layout import StoreLayout
from benchcamp.errors import ExitCode
from benchcamp.results.jsonsafe import strict_json

if TYPE_CHECKING:
    from benchcamp.config import Config
    from benchcamp.deploy.deployment import Deployment as InProcessDeployment
    from benchcamp.provision.base import Node as ProviderNode

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = JsonScalar | list["JsonValue"] | dict[str, "JsonValue"]
Extra: TypeAlias = dict[str, JsonValue]  # keys that are not a field of their object, as they came


class _Fields:
    """Reads a JSON document's known keys into typed values; what it does not take stays in ``rest``."""

    def __init__(self, data: Mapping[str, JsonValue]):
        self.rest: Extra = dict(data)

    def text(self, key: str) -> str | None:
        v = self.rest.get(key)
        if not isinstance(v, str):
            return None
        del self.rest[key]
        return v

    def integer(self, key: str) -> int | None:
        v = self.rest.get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        del self.rest[key]
        return v

    def real(self, key: str) -> float | None:
        v = self.rest.get(key)
        if not isinstance(v, float):  # an int stays in rest: written back as the int it was
            return None
        del self.rest[key]
        return v

    def flag(self, key: str) -> bool | None:
        v = self.rest.get(key)
        if not isinstance(v, bool):
            return None
        del self.rest[key]
        return v

    def texts(self, key: str) -> tuple[str, ...] | None:
        v = self.rest.get(key)
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            return None
        del self.rest[key]
        return tuple(s for s in v if isinstance(s, str))

    def doc(self, key: str) -> dict[str, JsonValue] | None:
        v = self.rest.get(key)
        if not isinstance(v, dict):
            return None
        del self.rest[key]
        return dict(v)

    def docs(self, key: str) -> list[dict[str, JsonValue]] | None:
        v = self.rest.get(key)
        if not isinstance(v, list) or not all(isinstance(d, dict) for d in v):
            return None
        del self.rest[key]
        return [d for d in v if isinstance(d, dict)]


def _written(pairs: Sequence[tuple[str, JsonValue]], extra: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The fields that hold a value (None: the key was not there), then the extra keys as they came."""
    out: dict[str, JsonValue] = {k: v for k, v in pairs if v is not None}
    out.update(extra)
    return out


def _strict(data: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    doc = strict_json(data)
    assert isinstance(doc, dict)
    return doc


# -- the node ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """The machine (or endpoint) a provider gave this execution: what ``provision``/``poll_node`` return and
    ``deploy_engine``/``deprovision`` take. As JSON, benchcamp.provision.Node's ``to_dict()``."""

    kind: str  # the provider: "local" | "ec2" | "endpoint" | "slurm"
    host: str  # the address the engine is reached at (an endpoint's URL)
    node_id: str  # an EC2 instance id, a Slurm job id, or a synthetic id (local, endpoint)
    execution_id: str | None = None  # meta.execution_id: whose engines deprovision may kill, whose key deploy reads
    # the provider's own meta keys, e.g. ec2: instance_type, zone, region, expires_at, and for a multi-node
    # deployment cluster (one entry per instance) and placement_group; slurm: job_id, job_name, nodes,
    # partition, expires_at, log_path
    extra: Extra = field(default_factory=dict)

    def to_dict(self) -> dict[str, JsonValue]:
        meta = _written([("execution_id", self.execution_id)], self.extra)
        return {"kind": self.kind, "host": self.host, "node_id": self.node_id, "meta": meta}

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Node:
        meta = data.get("meta")
        f = _Fields(meta if isinstance(meta, dict) else {})
        return cls(
            kind=str(data["kind"]),
            host=str(data["host"]),
            node_id=str(data["node_id"]),
            execution_id=f.text("execution_id"),
            extra=f.rest,
        )

    @classmethod
    def of_provider(cls, node: ProviderNode) -> Node:
        return cls.from_dict(node.to_dict())

    def provider_node(self) -> ProviderNode:
        """The provider's own Node, which deploy and the providers take."""
        from benchcamp.provision.base import Node as ProviderNode

        return ProviderNode.from_dict(self.to_dict())


# -- the deployment -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineProcess:
    """One more process of a deployment than its front one: a data-parallel peer or a topology's role
    (``handle.peers``), or a multi-node EC2 topology's router beside the orchestrator (``handle.router``)."""

    pid: int | None = None
    create_time: float | None = None  # psutil's: tells the process from a later one that reuses its pid
    log_path: str | None = None  # its stdout and stderr, on the machine that started it
    name: str | None = None  # a topology's process name (e.g. prefill-0), the log's heading
    role: str | None = None  # a topology's role: router, prefill, decode, unified
    instance: int | None = None  # a topology's engine instance of that role
    node: int | None = None  # the process's node within its instance
    head: bool | None = None  # the instance's head process (the one that serves)
    endpoint: str | None = None  # where it serves; a headless process has none
    extra: Extra = field(default_factory=dict)

    def to_dict(self) -> dict[str, JsonValue]:
        return _written(
            [
                ("pid", self.pid),
                ("create_time", self.create_time),
                ("log_path", self.log_path),
                ("name", self.name),
                ("role", self.role),
                ("instance", self.instance),
                ("node", self.node),
                ("head", self.head),
                ("endpoint", self.endpoint),
            ],
            self.extra,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> EngineProcess:
        f = _Fields(data)
        return cls(
            pid=f.integer("pid"),
            create_time=f.real("create_time"),
            log_path=f.text("log_path"),
            name=f.text("name"),
            role=f.text("role"),
            instance=f.integer("instance"),
            node=f.integer("node"),
            head=f.flag("head"),
            endpoint=f.text("endpoint"),
            extra=f.rest,
        )


@dataclass(frozen=True)
class EngineHandle:
    """What tells the deployed engine's processes (or job, or endpoint) apart: ``handle`` of a deployment."""

    kind: str  # where it runs: "local" | "ec2" | "slurm" | "endpoint" | "virtual" (in-process simulator)
    engine: str | None = None  # the engine kind (vllm, simulated, ...), "external" behind an endpoint
    pid: int | None = None  # local: the front process (the router of a topology, else the engine's head)
    create_time: float | None = None  # local: the front process's psutil create time
    argv: tuple[str, ...] | None = None  # local: the front process's command line
    fingerprint: str | None = None  # the campaign config's fingerprint the engine was started for
    version: str | None = None  # the engine's version
    execution_id: str | None = None
    scratch: tuple[str, ...] | None = None  # local: the engine's cache and temp folders, removed at stop
    peers: tuple[EngineProcess, ...] | None = None  # local: every other process, stopped with the front one
    topology: str | None = None  # local topology: its description; the log then holds every process's
    name: str | None = None  # local topology: the front process's name
    role: str | None = None  # local topology: the front process's role
    node_id: str | None = None  # ec2, slurm: the node's id
    job_id: str | None = None  # slurm: the job whose end tells why the engine stopped answering
    router: EngineProcess | None = None  # ec2 multi-node topology: the router run beside the orchestrator
    capabilities: dict[str, JsonValue] | None = None  # what the engine accepts (benchcamp.loadgen.readiness), at ready
    extra: Extra = field(default_factory=dict)

    def to_dict(self) -> dict[str, JsonValue]:
        return _written(
            [
                ("kind", self.kind),
                ("pid", self.pid),
                ("create_time", self.create_time),
                ("argv", None if self.argv is None else list(self.argv)),
                ("engine", self.engine),
                ("fingerprint", self.fingerprint),
                ("version", self.version),
                ("execution_id", self.execution_id),
                ("scratch", None if self.scratch is None else list(self.scratch)),
                ("peers", None if self.peers is None else [p.to_dict() for p in self.peers]),
                ("topology", self.topology),
                ("name", self.name),
                ("role", self.role),
                ("node_id", self.node_id),
                ("job_id", self.job_id),
                ("router", None if self.router is None else self.router.to_dict()),
                ("capabilities", self.capabilities),
            ],
            self.extra,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> EngineHandle:
        f = _Fields(data)
        peers = f.docs("peers")
        router = f.doc("router")
        return cls(
            kind=f.text("kind") or "",
            engine=f.text("engine"),
            pid=f.integer("pid"),
            create_time=f.real("create_time"),
            argv=f.texts("argv"),
            fingerprint=f.text("fingerprint"),
            version=f.text("version"),
            execution_id=f.text("execution_id"),
            scratch=f.texts("scratch"),
            peers=None if peers is None else tuple(EngineProcess.from_dict(p) for p in peers),
            topology=f.text("topology"),
            name=f.text("name"),
            role=f.text("role"),
            node_id=f.text("node_id"),
            job_id=f.text("job_id"),
            router=None if router is None else EngineProcess.from_dict(router),
            capabilities=f.doc("capabilities"),
            extra=f.rest,
        )


@dataclass(frozen=True)
class Deployment:
    """The deployed engine: what ``deploy_engine`` returns and the sweep, the search and ``stop_engine`` take.
    As JSON, benchcamp.deploy.Deployment's ``to_dict()``: the key's reference, never the key."""

    endpoint: str  # the engine's base URL; "" when the simulator runs in-process (load.clock=virtual)
    api_key_ref: str | None  # where a later step finds the key (benchcamp.secrets.refs)
    log_path: str | None  # the front process's stdout and stderr, on the machine that deployed it
    model: str  # the served model name
    handle: EngineHandle

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "endpoint": self.endpoint,
            "api_key_ref": self.api_key_ref,
            "log_path": self.log_path,
            "handle": self.handle.to_dict(),
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Deployment:
        handle = data.get("handle")
        ref, log_path, model = data.get("api_key_ref"), data.get("log_path"), data.get("model")
        return cls(
            endpoint=str(data["endpoint"]),
            api_key_ref=ref if isinstance(ref, str) else None,
            log_path=log_path if isinstance(log_path, str) else None,
            model=model if isinstance(model, str) else "",
            handle=EngineHandle.from_dict(handle if isinstance(handle, dict) else {}),
        )

    @classmethod
    def of_engine(cls, dep: InProcessDeployment) -> Deployment:
        return cls.from_dict(dep.to_dict())

    def engine_deployment(self) -> InProcessDeployment:
        """deploy's own Deployment (no key in it), which stop, is_running and the key lookup take."""
        from benchcamp.deploy.deployment import Deployment as InProcessDeployment

        return InProcessDeployment.from_dict(self.to_dict())


# -- the workload ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadRef:
    """The campaign's workload, built or reused: what ``prepare_workload`` returns and the sweep, the search and
    ``summarize`` take."""

    key: str | None  # its store key (by digest) when published for other workers, else None
    digest: str  # the workload file's sha256
    path: str  # the file on the machine that built it
    name: str
    sessions: int
    stats: dict[str, JsonValue]  # benchcamp.workload.stats.workload_stats, strict JSON

    @property
    def theoretical_hit_rate(self) -> float | None:
        rate = self.stats.get("theoretical_hit_rate")
        return float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "key": self.key,
            "digest": self.digest,
            "path": self.path,
            "name": self.name,
            "sessions": self.sessions,
            "stats": _strict(self.stats),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> WorkloadRef:
        key, stats, sessions = data.get("key"), data.get("stats"), data.get("sessions")
        return cls(
            key=key if isinstance(key, str) else None,
            digest=str(data["digest"]),
            path=str(data["path"]),
            name=str(data["name"]),
            sessions=sessions if isinstance(sessions, int) else 0,
            stats=dict(stats) if isinstance(stats, dict) else {},
        )


# -- the results ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """How the execution ended: what ``summarize`` returns and :func:`benchcamp.campaign.steps.judge` takes."""

    status: Status
    error: str | None = None  # every failure, '; '-joined; None when none
    # the headline point's figures (benchcamp.metrics.pick_headline), {} when no point is valid; a figure not
    # measured is NaN here and null in to_dict() and after (as in summary.json)
    headline: dict[str, JsonValue] = field(default_factory=dict)
    points: tuple[str, ...] = ()  # the labels of the points measured
    missing_points: tuple[str, ...] = ()  # the points (or trials: c8/trial-2) not measured
    interrupted: bool = False  # SIGINT/SIGTERM ended it; what was measured is kept

    def to_dict(self) -> dict[str, JsonValue]:
        return _strict(
            {
                kinds.STATUS: self.status.value,
                kinds.ERROR: self.error,
                kinds.HEADLINE: self.headline,
                kinds.POINTS: list(self.points),
                kinds.MISSING: list(self.missing_points),
                kinds.INTERRUPTED: self.interrupted,
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Summary:
        """Also reads summary.json, whose ``points`` are each point's summary (its label under ``point``)."""
        error, headline = data.get(kinds.ERROR), data.get(kinds.HEADLINE)
        status = data.get(kinds.STATUS)
        points = data.get(kinds.POINTS)
        missing = data.get(kinds.MISSING)
        return cls(
            status=Status(str(status)) if status else (Status.FAILED if error else Status.OK),
            error=None if error is None else str(error),
            headline=dict(headline) if isinstance(headline, dict) else {},
            points=tuple(_label(p) for p in points) if isinstance(points, list) else (),
            missing_points=tuple(str(m) for m in missing) if isinstance(missing, list) else (),
            interrupted=data.get(kinds.INTERRUPTED) is True,
        )


def _label(point: JsonValue) -> str:
    return str(point.get("point")) if isinstance(point, dict) else str(point)


@dataclass(frozen=True)
class Evaluation:
    """What ``evaluate`` returns: the comparison with the baselines in brief (verdicts.json holds them all)."""

    regressed: bool  # some verdict says regressed
    verdict_count: int
    notes: tuple[str, ...]  # what the comparison could not do, or did differently (one line each)
    report: str  # where the rendered report is (a path, or the store's URL)
    mlflow_run_id: str | None  # the campaign's run, None when not tracked

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            kinds.REGRESSED: self.regressed,
            "verdicts": self.verdict_count,
            "notes": list(self.notes),
            "report": self.report,
            "mlflow_run_id": self.mlflow_run_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Evaluation:
        count, notes, run_id = data.get("verdicts"), data.get("notes"), data.get("mlflow_run_id")
        return cls(
            regressed=data.get(kinds.REGRESSED) is True,
            verdict_count=count if isinstance(count, int) else 0,
            notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
            report=str(data.get("report") or ""),
            mlflow_run_id=run_id if isinstance(run_id, str) else None,
        )


@dataclass(frozen=True)
class Judgement:
    """The verdict on one execution from what the store holds (``judge_stored``): the DAG's verdict task
    returns one per execution."""

    exit_code: ExitCode
    # from summary.json; both None when there is none (its absence is the failure)
    status: str | None = None
    headline: dict[str, JsonValue] | None = None

    def to_dict(self) -> dict[str, JsonValue]:
        if self.status is None and self.headline is None:
            return {"exit_code": int(self.exit_code)}
        return _strict({"exit_code": int(self.exit_code), "status": self.status, "headline": self.headline})

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Judgement:
        code, status, headline = data.get("exit_code"), data.get("status"), data.get("headline")
        return cls(
            exit_code=ExitCode(code if isinstance(code, int) else int(ExitCode.FAILED)),
            status=status if isinstance(status, str) else None,
            headline=dict(headline) if isinstance(headline, dict) else None,
        )


# -- the matrix item ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatrixItem:
    """One engine configuration of a run's matrix, as ``resolve_config`` hands it to every task of its group
    (benchcamp.campaign.form.resolve_items): the resolved config with its paths made absolute for any worker,
    the execution id (stable across retries), the config's fingerprint, the matrix entry's own overrides and
    where the execution's files go."""

    index: int  # the entry's place in the matrix
    execution_id: str
    config: dict[str, JsonValue]  # Config.to_dict(): a worker rebuilds it with benchcamp.config.from_dict
    fingerprint: str
    overrides: dict[str, JsonValue]  # the matrix entry ({} for the base configuration)
    layout: StoreLayout

    @property
    def label(self) -> str:
        """How logs and errors name the entry: ``matrix[1] {'engine.max_num_seqs': 64}``."""
        return f"matrix[{self.index}] {self.overrides or '(base)'}"

    def resolved(self) -> Config:
        from benchcamp.config import from_dict

        return from_dict(self.config, f"config of {self.execution_id}")

    def to_dict(self) -> dict[str, JsonValue]:
        return _strict(
            {
                "index": self.index,
                "execution_id": self.execution_id,
                "config": self.config,
                "fingerprint": self.fingerprint,
                "overrides": self.overrides,
                "layout": dict(self.layout.to_dict()),
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> MatrixItem:
        config, overrides, layout = data["config"], data.get("overrides") or {}, data["layout"]
        index = data["index"]
        if not isinstance(config, dict) or not isinstance(overrides, dict) or not isinstance(layout, dict):
            raise TypeError(f"not a matrix item: {sorted(data)}")
        if not isinstance(index, int):
            raise TypeError(f"a matrix item's index is an int, not {index!r}")
        return cls(
            index=index,
            execution_id=str(data["execution_id"]),
            config=dict(config),
            fingerprint=str(data["fingerprint"]),
            overrides=dict(overrides),
            layout=StoreLayout.from_dict(layout),
        )
