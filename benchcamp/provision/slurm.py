"""The slurm provider: the engine runs as a Slurm batch job, one per campaign execution.

One engine on one node is a one-node job; a topology (or one engine over several nodes) is one job of every node
it needs, a step per node and the router on the batch host (``benchcamp.deploy.slurm_job`` says what runs and why
one job); the Node's host is the batch host, where the deployment's endpoint listens.

Provision submits (``sbatch``) the job that :class:`SlurmJobBoot` describes (``benchcamp.deploy.slurm_job``:
what runs in the job is deploy's; where it runs is provision's), then waits in the queue until Slurm places it:
the node list and address come from ``scontrol``. Retry safety: the job's name carries the execution id, so a
retried task finds the job it already submitted (``squeue --name``) and never submits a second one. The Airflow
DAG waits in the queue with a sensor in reschedule mode (:meth:`SlurmProvider.poll`), holding no worker slot.

Secrets (the engine's API key, an HF token) never appear in the batch script, ``sbatch``'s argv or ``scontrol
show job`` (Slurm stores the script and shows the command line): they go in a 0600 env file in
``provider.slurm.env_dir`` (a folder the compute node reads: a shared filesystem on a real cluster), which the
job sources and deletes as it starts. A 0600 copy of the key beside it (``<job>.key``) lets later steps (sweep,
stop) find the key again (``slurm:<execution id>``); deprovision deletes both, and the job's state file.

Teardown: ``scancel``, wait until the job has left the queue, then kill the engine processes that daemonized
out of it (``proctrack/linuxproc`` does not follow a process that left the job's process tree) by the marker
every engine process carries in its environment (``BENCHCAMP_EXECUTION_ID``): the boot's ``kill_leftovers``,
which can only see this machine's processes. On a multi-node cluster use ``ProctrackType=proctrack/cgroup``
(Slurm then kills everything the job started, daemons included). An expired job (its time limit hit, or its
execution's state file past its expiry) is reaped by :func:`reap` (``benchcamp reap``), as an expired EC2 node is.
A job that ends under a running point (its time limit, a scancel, a failed node) names its end in the point's
reason (:func:`job_end`, asked by the sweep once the endpoint stops answering): ``engine died: slurm job 12
ended: TIMEOUT (time limit 1 min; ...)``; the teardown runs as on any other path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from benchcamp.config import Config
from benchcamp.errors import ConfigError
from benchcamp.provision.base import Node, Provider, ProvisionError, check_execution_id, safe_name
from benchcamp.results import atomic

log = logging.getLogger(__name__)

JOB_PREFIX = "benchcamp-"
# Squeue states of a job that still holds (or will hold) resources.
LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"}
COMMAND_TIMEOUT_S = 60.0
END_WAIT_S = 10.0  # job_end: how long a job that lost its engine gets to reach its final state
STOP_GRACE_S = 20.0  # a running job's engines, between SIGTERM and scancel (local deploys give 10 s per process)


class SlurmJobBoot(Protocol):
    """What an execution's job runs (``benchcamp.deploy.slurm_job``), handed to the provider."""

    def engine_env(self) -> dict[str, str]:
        """The engine's secrets (a fresh API key, an HF token): written to the job's env file, never the script."""
        ...

    def script(self, execution_id: str, env_file: str) -> str:
        """The batch script: sources and deletes ``env_file``, then runs the engine on provider.slurm.engine_port."""
        ...

    def kill_leftovers(self, execution_id: str) -> int:
        """Kill this machine's engine processes of ``execution_id`` (those that left the job); returns how many."""
        ...

    def nodes(self) -> int:
        """How many nodes the job asks for (``--nodes``): a topology's every node, else 1."""
        ...


def job_name(execution_id: str) -> str:
    """The job's name: readable, and unique per execution id (a short hash of the whole id)."""
    digest = hashlib.sha256(execution_id.encode()).hexdigest()[:10]
    return f"{JOB_PREFIX}{safe_name(execution_id)[:60]}-{digest}"


def env_folder(cfg: Config) -> Path:
    d = cfg.provider.slurm.env_dir
    return Path(d).expanduser() if d else Path.home() / ".cache" / "benchcamp" / "slurm"


def _run(argv: list[str], check: bool = True, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    """A Slurm command; a missing one is a ProvisionError naming the fix."""
    if shutil.which(argv[0]) is None:
        raise ProvisionError(
            f"provider.kind=slurm: {argv[0]} not found on this machine; run benchcamp where the Slurm client "
            "commands are installed (a login or submit node), or install slurm-client"
        )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise ProvisionError(f"{' '.join(argv[:2])}: {proc.stderr.strip() or proc.stdout.strip() or proc.returncode}")
    return proc


def _fields(line: str) -> dict[str, str]:
    """``scontrol show -o`` output (Key=Value, space separated; values without spaces for the keys used)."""
    out = {}
    for part in line.split():
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out


def queued_jobs(name: str | None = None) -> list[dict[str, str]]:
    """This user's live jobs (of ``name``, else every benchcamp job): id, name, state."""
    argv = ["squeue", "-h", "--me", "-o", "%i|%j|%T"]
    if name:
        argv += ["--name", name]
    jobs = []
    for line in _run(argv).stdout.splitlines():
        job_id, jname, state = (line.split("|") + ["", "", ""])[:3]
        if jname.startswith(JOB_PREFIX) and state in LIVE_STATES:
            jobs.append({"job_id": job_id, "name": jname, "state": state})
    return jobs


def show_job(job_id: str) -> dict[str, str] | None:
    """``scontrol show job`` as a dict; None once Slurm has forgotten the job (MinJobAge after it ended)."""
    proc = _run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return _fields(proc.stdout.strip().splitlines()[0])


def job_live(job_id: str) -> bool:
    """The job is still queued or running (False once it ended, or Slurm forgot it)."""
    job = show_job(job_id)
    return job is not None and job.get("JobState", "") in LIVE_STATES


def _sacct_job(job_id: str) -> dict[str, str] | None:
    """The job's accounting record (``sacct``), in ``scontrol show job``'s keys; None without accounting."""
    if shutil.which("sacct") is None:
        return None
    proc = _run(["sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State,Reason,Timelimit,ExitCode"], check=False)
    lines = proc.stdout.strip().splitlines() if proc.returncode == 0 else []
    if not lines:
        return None
    state, reason, limit, exit_code = (lines[0].split("|") + ["", "", "", ""])[:4]
    # "CANCELLED by 0": the state alone
    return {"JobState": state.split()[0] if state else "", "Reason": reason, "TimeLimit": limit, "ExitCode": exit_code}


def _limit_text(limit: str) -> str:
    """Slurm's ``[D-]HH:MM:SS`` time limit in minutes (as ``provider.slurm.time_limit_min`` gives it)."""
    days, _, clock = limit.rpartition("-")
    try:
        parts = [int(x) for x in clock.split(":")]
        h, m, sec = [0] * (3 - len(parts)) + parts
        minutes = int(days or 0) * 1440 + h * 60 + m + sec / 60
    except ValueError:
        return limit  # UNLIMITED, Partition_Limit
    return f"{minutes:g} min"


def job_end(job_id: str, wait_s: float = END_WAIT_S, poll_s: float = 0.5) -> str | None:
    """Why job ``job_id`` no longer serves, in one line (``slurm job 12 ended: TIMEOUT (time limit 1 min; ...)``),
    or None while it still runs ``wait_s`` later (its engine died on its own and the job lives on).

    Slurm ends a job at its time limit by marking it COMPLETING with reason TimeLimit, then signalling its
    processes (SIGTERM, SIGKILL after KillWait): the engine is gone before the final state, TIMEOUT, is set,
    so the reason alone names it. Another end (scancel, a failed node) is waited for until the state is final.
    A job Slurm has forgotten (MinJobAge) is looked up in its accounting (``sacct``) where there is one."""
    deadline = time.monotonic() + wait_s
    while True:
        job = show_job(job_id) or _sacct_job(job_id)
        if job is None:
            return f"slurm job {job_id} ended (no longer known to scontrol or sacct)"
        state, reason = job.get("JobState", ""), job.get("Reason", "")
        if state == "TIMEOUT" or (state == "COMPLETING" and reason == "TimeLimit"):
            return (
                f"slurm job {job_id} ended: TIMEOUT (time limit {_limit_text(job.get('TimeLimit', '?'))}; "
                "raise provider.slurm.time_limit_min to fit the whole campaign)"
            )
        if state and state not in LIVE_STATES:
            return f"slurm job {job_id} ended: {state} (reason {reason or 'None'}, exit {job.get('ExitCode', '?')})"
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def node_address(name: str) -> str:
    """The address Slurm reaches ``name`` at (its NodeAddr)."""
    proc = _run(["scontrol", "show", "node", "-o", name], check=False)
    return _fields(proc.stdout).get("NodeAddr") or name


def expand_nodes(nodelist: str) -> list[str]:
    if not nodelist or nodelist == "(null)":
        return []
    return _run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def _iso(slurm_time: str) -> str | None:
    """Slurm's local ``2026-12-02T06:30:00`` as an ISO 8601 instant in UTC."""
    try:
        return datetime.fromisoformat(slurm_time).astimezone(UTC).isoformat()
    except ValueError:
        return None  # Unknown, None


class SlurmProvider(Provider):
    kind = "slurm"

    _boot: SlurmJobBoot | None

    def __init__(self, cfg: Config, boot: SlurmJobBoot | None = None):
        self.cfg = cfg
        self.scfg = cfg.provider.slurm
        self._boot = boot

    # -- files of an execution --------------------------------------------------
    def files(self, execution_id: str) -> dict[str, Path]:
        base = env_folder(self.cfg) / job_name(execution_id)
        return {
            "env": base.with_suffix(".env"),
            "key": base.with_suffix(".key"),
            "state": base.with_suffix(".json"),
            "log": base.with_suffix(".log"),
        }

    def _write_private(self, path: Path, text: str) -> None:
        """A 0600 file in a 0700 folder, written atomically (a reader never sees half an env or state file)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic.write_text(path, text, permissions=0o600, setting="provider.slurm.env_dir")

    # -- submit ----------------------------------------------------------------
    def sbatch_argv(self, execution_id: str, script_path: Path) -> list[str]:
        """One job for the whole deployment: one node per engine process (a topology's every node at once)."""
        s = self.scfg
        nodes = self.boot.nodes()
        argv = [
            "sbatch",
            "--parsable",
            f"--job-name={job_name(execution_id)}",
            f"--comment=benchcamp execution {safe_name(execution_id)}",
            *(["--nodes=1", "--ntasks=1"] if nodes == 1 else [f"--nodes={nodes}", "--ntasks-per-node=1"]),
            f"--cpus-per-task={s.cpus_per_task}",
            f"--time={s.time_limit_min}",
            f"--output={self.files(execution_id)['log']}",
            "--no-requeue",  # the env file is gone once the job started: a requeued job could not start again
            # the job's environment is the script's, not this worker's (which may hold secrets)
            "--export=PATH,HOME,USER,LANG,TMPDIR",
        ]
        for flag, value in (
            ("--partition", s.partition),
            ("--account", s.account),
            ("--qos", s.qos),
            ("--constraint", s.constraint),
            ("--mem", s.mem),
        ):
            if value:
                argv.append(f"{flag}={value}")
        if s.gpus_per_node:
            argv.append(f"--gres=gpu:{s.gres_type + ':' if s.gres_type else ''}{s.gpus_per_node}")
        if s.exclusive:
            argv.append("--exclusive")
        return [*argv, str(script_path)]

    def submit(self, execution_id: str) -> str:
        """The execution's job id: the one already queued (a retry), else a new job's."""
        check_execution_id(execution_id)
        check_config(self.cfg)
        name = job_name(execution_id)
        queued = queued_jobs(name)
        if queued:
            job_id = min(queued, key=lambda j: int(j["job_id"].split("_")[0]))["job_id"]
            log.info("reusing Slurm job %s (%s) already submitted for %s", job_id, queued[0]["state"], execution_id)
            return job_id
        f = self.files(execution_id)
        env = self.boot.engine_env()
        self._write_private(f["env"], "".join(f"{k}={_quote(v)}\n" for k, v in sorted(env.items())))
        self._write_private(f["key"], env.get("VLLM_API_KEY", ""))
        script = f["env"].with_suffix(".sbatch")
        self._write_private(script, self.boot.script(execution_id, str(f["env"])))
        # the latest a job of this execution may still run: its wait in the queue, then its time limit
        expires = datetime.now(UTC) + timedelta(seconds=self.scfg.queue_timeout_s, minutes=self.scfg.time_limit_min)
        state = {
            "execution_id": execution_id,
            "job_id": None,
            "expires_at": expires.isoformat(),
            "submitted_at": time.time(),
        }
        self._write_private(f["state"], json.dumps(state))
        try:
            job_id = _run(self.sbatch_argv(execution_id, script)).stdout.strip().split(";")[0]
        except BaseException:
            self.delete_files(execution_id)  # nothing was queued: nothing may read them
            raise
        finally:
            script.unlink(missing_ok=True)  # Slurm keeps its own copy (without secrets)
        self._write_private(f["state"], json.dumps({**state, "job_id": job_id}))
        log.info("submitted Slurm job %s (%s) for %s", job_id, job_name(execution_id), execution_id)
        return job_id

    # -- wait in the queue --------------------------------------------------------
    def poll(self, execution_id: str) -> Node | None:
        """Submit if needed; the node once the job runs, None while it waits in the queue. A job that ended
        before it ran (cancelled, failed, out of time) is a ProvisionError with its state and reason."""
        job_id = self.submit(execution_id)
        job = show_job(job_id)
        state = (job or {}).get("JobState", "")
        if state == "RUNNING":
            return self._node(job_id, job or {}, execution_id)
        if state in LIVE_STATES:
            waited = time.time() - self._submitted_at(execution_id)
            if waited > self.scfg.queue_timeout_s:
                self.release(execution_id)
                raise ProvisionError(
                    f"provider.slurm.queue_timeout_s={self.scfg.queue_timeout_s:g}: job {job_id} still {state} "
                    f"({(job or {}).get('Reason', '')}) after {waited:.0f} s, cancelled; raise it, or ask for fewer "
                    "resources (partition, gpus_per_node, time_limit_min)"
                )
            log.info("Slurm job %s is %s (%s)", job_id, state, (job or {}).get("Reason", ""))
            return None
        self.delete_files(execution_id)
        raise ProvisionError(
            f"Slurm job {job_id} ({job_name(execution_id)}) is {state or 'gone'}, not running "
            f"(reason {(job or {}).get('Reason', 'unknown')}, exit {(job or {}).get('ExitCode', '?')}); its output "
            f"is in {self.files(execution_id)['log']}"
        )

    def _node(self, job_id: str, job: dict[str, str], execution_id: str) -> Node:
        nodes = expand_nodes(job.get("NodeList", ""))
        batch = job.get("BatchHost") or (nodes[0] if nodes else "")
        return Node(
            kind="slurm",
            host=node_address(batch),
            node_id=str(job_id),
            meta={
                "execution_id": execution_id,
                "job_id": str(job_id),
                "job_name": job_name(execution_id),
                "nodes": nodes,  # the router (a topology's) or the engine runs on the first, the batch host
                "partition": job.get("Partition"),
                "expires_at": _iso(job.get("EndTime", "")),
                "log_path": str(self.files(execution_id)["log"]),
            },
        )

    def _submitted_at(self, execution_id: str) -> float:
        try:
            return float(json.loads(self.files(execution_id)["state"].read_text())["submitted_at"])
        except (OSError, ValueError, KeyError):
            return time.time()

    def provision(self, execution_id: str) -> Node:
        """Submit (or find) the job and block until it runs: ``benchcamp run``'s path; the DAG polls instead."""
        try:
            while True:
                node = self.poll(execution_id)
                if node is not None:
                    return node
                time.sleep(self.scfg.poll_s)
        except BaseException:
            # a failed setup gets no teardown: cancel what this attempt queued (SIGTERM and Ctrl-C too)
            self.release(execution_id)
            raise

    # -- key, teardown -------------------------------------------------------------
    def api_key_for(self, execution_id: str) -> str:
        path = self.files(execution_id)["key"]
        try:
            key = path.read_text()
        except OSError:
            raise ProvisionError(
                f"{path}: no engine key for {execution_id}; the job was deprovisioned or submitted elsewhere "
                "(provider.slurm.env_dir must be the same folder for every task)"
            ) from None
        return key

    def delete_files(self, execution_id: str) -> None:
        for path in self.files(execution_id).values():
            if path.suffix != ".log":  # the engine's output stays, as a local engine's log does
                path.unlink(missing_ok=True)
        # the simulated engines' KV connector folder of a topology (benchcamp.deploy.slurm_job)
        shutil.rmtree(self.files(execution_id)["env"].with_suffix(".kv"), ignore_errors=True)

    def cancel(self, execution_id: str, timeout_s: float = 60.0) -> list[str]:
        """scancel every live job of the execution and wait until none is left in the queue. A running job's
        engines get SIGTERM first and up to STOP_GRACE_S to stop as they would anywhere else (vLLM stops its
        EngineCore and frees its shared memory): a cluster's KillWait may be shorter than that."""
        name = job_name(execution_id)
        jobs = queued_jobs(name)
        ids = [j["job_id"] for j in jobs]
        running = [j["job_id"] for j in jobs if j["state"] == "RUNNING"]
        if running:  # the batch script, its children and every step
            _run(["scancel", "--signal=TERM", "--full", *running], check=False)
            deadline = time.monotonic() + STOP_GRACE_S
            while any(j["job_id"] in running for j in queued_jobs(name)) and time.monotonic() < deadline:
                time.sleep(0.2)
        if ids:
            _run(["scancel", "--full", *ids], check=False)
            deadline = time.monotonic() + timeout_s
            while queued_jobs(name):
                if time.monotonic() > deadline:
                    raise ProvisionError(f"Slurm job(s) {', '.join(ids)} still queued {timeout_s:g} s after scancel")
                time.sleep(0.2)
            log.info("cancelled Slurm job(s) %s of %s", ", ".join(ids), execution_id)
        return ids

    def release(self, execution_id: str) -> None:
        self.cancel(execution_id)
        if self._boot is not None:
            self._boot.kill_leftovers(execution_id)
        self.delete_files(execution_id)

    def deprovision(self, node: Node) -> None:
        execution_id = node.meta.get("execution_id", "")
        if not execution_id:
            raise ProvisionError(f"Slurm node {node.node_id}: no execution_id in its meta; scancel it by hand")
        self.release(execution_id)


def _quote(value: str) -> str:
    """A value for a file that ``set -a; . file`` reads: single-quoted."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


# -- the reaper ---------------------------------------------------------------------


@dataclass
class ReapedJob:
    execution_id: str
    job_id: str | None
    expires_at: str
    state: str


def expired_jobs(cfg: Config, now: datetime | None = None) -> list[ReapedJob]:
    """benchcamp executions in ``provider.slurm.env_dir`` whose job ended (its time limit hit, or it failed)
    while their files remain, or whose expiry has passed."""
    now = now or datetime.now(UTC)
    folder = env_folder(cfg)
    live = {j["job_id"]: j["state"] for j in queued_jobs()} if folder.exists() else {}
    out = []
    for state_file in sorted(folder.glob(f"{JOB_PREFIX}*.json")):
        try:
            doc = json.loads(state_file.read_text())
            expires = datetime.fromisoformat(doc["expires_at"])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("%s: unreadable (%s); left alone", state_file, exc)
            continue
        job_id = doc.get("job_id")
        state = live.get(job_id or "", "GONE" if job_id else "SUBMITTING")
        if expires <= now or state == "GONE":
            out.append(ReapedJob(doc["execution_id"], job_id, doc["expires_at"], state))
    return out


def reap(cfg: Config, boot: SlurmJobBoot | None = None, dry_run: bool = False) -> list[ReapedJob]:
    """Cancel expired benchcamp jobs, kill their leftover engine processes here, delete their files."""
    found = expired_jobs(cfg)
    provider = SlurmProvider(cfg, boot=boot)
    for r in found:
        if dry_run:
            log.info("would reap Slurm job %s of %s (%s)", r.job_id, r.execution_id, r.state)
        else:
            provider.release(r.execution_id)
            log.info("reaped Slurm job %s of %s (%s)", r.job_id, r.execution_id, r.state)
    return found


def check_config(cfg: Config) -> None:
    """A slurm config that cannot run: one line naming the field."""
    s = cfg.provider.slurm
    if s.python and not Path(s.python).is_absolute():
        raise ConfigError(f"provider.slurm.python={s.python!r}: give an absolute path (the compute node's Python)")
    if cfg.topology is not None:
        gpus = {r.gpu or cfg.hardware.gpu for _, r in cfg.topology.roles()}
        if len(gpus) > 1:
            raise ConfigError(
                f"topology: roles on different GPUs ({', '.join(sorted(gpus))}) need a heterogeneous Slurm job, "
                "which provider.kind=slurm does not submit; give every role the same gpu (one partition, one gres)"
            )
        need = max(r.gpus_per_node for _, r in cfg.topology.roles())
        if s.gpus_per_node and s.gpus_per_node < need:
            raise ConfigError(
                f"provider.slurm.gpus_per_node={s.gpus_per_node}: a node of this topology runs {need} GPUs "
                f"(a role's gpus_per_node); set it to {need} or more"
            )


__all__ = ["JOB_PREFIX", "SlurmJobBoot", "SlurmProvider", "job_end", "job_name", "reap"]
