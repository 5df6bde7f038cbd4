"""Deploy the engine on a node: argv, launch, readiness, logs, stop.

``vllm_argv(cfg)`` is the single source of the engine command line: the local
provider runs it as a subprocess, the ec2 provider puts it in user data, and
the simulated engine takes the same flags (plus its hardware profile). The API
key is a fresh random value per deployment, handed to the engine through the
``VLLM_API_KEY`` environment variable (vLLM reads it) and never through argv,
so it does not show in ``ps`` or in the engine's own argument dump.

The local engine runs in its own session (process group): it outlives the
Airflow task that started it, and ``stop`` kills the whole group (vLLM forks
workers). Each engine carries ``BENCHCAMP_EXECUTION_ID`` in its environment so
a retried deploy or the deprovision step can find and kill leftovers even when
the handle was lost.
"""

from __future__ import annotations

from benchcamp.errors import EngineError  # noqa: F401  (re-exported)

import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchcamp import secrets
from benchcamp.config import Config
from benchcamp.provision.base import Node, safe_name

log = logging.getLogger(__name__)

EXECUTION_ENV = "BENCHCAMP_EXECUTION_ID"
LOG_TAIL_LINES = 30




@dataclass
class Deployment:
    endpoint: str                       # base URL, e.g. http://127.0.0.1:8000
    api_key: str | None
    log_path: str | None                # engine stdout+stderr (local), None when remote
    handle: dict[str, Any] = field(default_factory=dict)  # kind, pid, create_time, argv, engine, fingerprint
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Deployment":
        return cls(**{k: data.get(k) for k in ("endpoint", "api_key", "log_path", "handle", "model")})

    def __repr__(self) -> str:  # never print the key
        return f"Deployment(endpoint={self.endpoint!r}, api_key={secrets.mask_tail(self.api_key)}, log_path={self.log_path!r})"


# -- argv ------------------------------------------------------------------

def vllm_argv(cfg: Config, host: str | None = None, port: int | None = None) -> list[str]:
    """``vllm serve`` argv for ``cfg.engine``; host/port default to the provider's."""
    e = cfg.engine
    if host is None:
        host = cfg.provider.local.host if cfg.provider.kind == "local" else "0.0.0.0"
    if port is None:
        port = cfg.provider.local.port if cfg.provider.kind == "local" else cfg.provider.ec2.engine_port
    argv = [
        "vllm", "serve", e.model,
        "--served-model-name", cfg.served_model_name,
        "--tensor-parallel-size", str(e.tensor_parallel_size),
        "--data-parallel-size", str(e.data_parallel_size),
    ]
    if e.enable_expert_parallel:
        argv.append("--enable-expert-parallel")
    argv += [
        "--max-num-seqs", str(e.max_num_seqs),
        "--max-num-batched-tokens", str(e.max_num_batched_tokens),
    ]
    if e.max_model_len:
        argv += ["--max-model-len", str(e.max_model_len)]
    if e.kv_offloading_size_gib:
        argv += ["--kv-offloading-size", f"{e.kv_offloading_size_gib:g}"]
    argv += [
        "--block-size", str(e.block_size),
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching",
        "--kv-cache-dtype", e.kv_cache_dtype,
        "--gpu-memory-utilization", str(e.gpu_memory_utilization),
        # cached_tokens in usage: needed for the cached/uncached split.
        "--enable-prompt-tokens-details",
        "--port", str(port),
        "--host", host,
        *e.extra_args,
    ]
    return argv


def simulated_argv(cfg: Config, host: str | None = None, port: int | None = None) -> list[str]:
    """The simulated engine's command: the vLLM flags plus its hardware profile."""
    flags = vllm_argv(cfg, host, port)[2:]
    return [sys.executable, "-m", "benchcamp.cli", "engine", "serve", *flags,
            "--gpu", cfg.hardware.gpu, "--num-gpus", str(cfg.hardware.gpu_count),
            "--model-profile", cfg.engine.model_profile]


def real_vllm_available() -> bool:
    """vLLM importable here and a working NVIDIA GPU."""
    if importlib.util.find_spec("vllm") is None or not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def engine_kind(cfg: Config) -> str:
    """What actually runs locally: 'vllm' only when asked for and possible."""
    if cfg.engine.kind == "vllm" and real_vllm_available():
        return "vllm"
    return "simulated"


def effective_config(cfg: Config) -> Config:
    """``cfg`` with engine.kind set to what will really run.

    The local provider runs the simulated engine when vLLM or a GPU is missing;
    the results must then say so (tags, comparability, report, fingerprint),
    or simulated figures would be compared with real-hardware baselines.
    """
    if cfg.provider.kind != "local" or cfg.engine.kind != "vllm" or engine_kind(cfg) == "vllm":
        return cfg
    log.warning("engine.kind=vllm but vLLM or a GPU is missing here; running the simulated engine "
                "with the same flags, and its results are tagged engine=simulated")
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"kind": "simulated"})})


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# -- deploy ----------------------------------------------------------------

def deploy(node: Node, cfg: Config, log_dir: str | Path | None = None,
           api_key: str | None = None) -> Deployment:
    """Start (or attach to) the engine on ``node``; returns before it is ready.

    local: launches the engine subprocess with a fresh key. ec2: the engine was
    started by user data; the key comes from the node. endpoint: ``api_key``
    (from an Airflow connection) or the env var named in the config.
    """
    fp = cfg.fingerprint()
    if node.kind == "local":
        return _deploy_local(node, cfg, log_dir, fp)
    if node.kind == "ec2":
        from benchcamp.provision.ec2 import Ec2Provider
        key = Ec2Provider(cfg).api_key_for(node)
        secrets.register(key)
        return Deployment(endpoint=f"http://{node.host}:{cfg.provider.ec2.engine_port}", api_key=key,
                          log_path=None, model=cfg.served_model_name,
                          handle={"kind": "ec2", "node_id": node.node_id, "engine": cfg.engine.kind,
                                  "fingerprint": fp, "version": cfg.engine.version})
    if node.kind == "endpoint":
        key = api_key or os.environ.get(cfg.provider.endpoint.api_key_env) or None
        secrets.register(key)
        return Deployment(endpoint=node.host.rstrip("/"), api_key=key, log_path=None, model=cfg.served_model_name,
                          handle={"kind": "endpoint", "engine": "external", "fingerprint": fp})
    raise ValueError(f"node.kind={node.kind!r}: unknown; expected local, ec2 or endpoint")


def _deploy_local(node: Node, cfg: Config, log_dir: str | Path | None, fp: str) -> Deployment:
    execution_id = node.meta.get("execution_id", "")
    if execution_id:
        # An Airflow retry of deploy: the previous attempt's engine may still run.
        kill_execution_engines(execution_id)
    host = node.host
    port = cfg.provider.local.port or free_port(host)
    kind = engine_kind(cfg)
    argv = vllm_argv(cfg, host, port) if kind == "vllm" else simulated_argv(cfg, host, port)
    key = secrets.new_api_key()
    log_dir = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / "benchcamp-engines" / safe_name(execution_id or "adhoc")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "engine.log"
    from benchcamp.tracking.redact import argv_secrets, mask_argv

    for value in argv_secrets(argv):  # e.g. --hf-token in engine.extra_args: engine logs get redacted too
        secrets.register(value)
    (log_dir / "engine-argv.json").write_text(json.dumps(
        {"argv": mask_argv(argv), "engine": kind, "version": cfg.engine.version, "fingerprint": fp}, indent=2))
    env = dict(os.environ, VLLM_API_KEY=key, **{EXECUTION_ENV: execution_id}, PYTHONUNBUFFERED="1")
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, cwd=os.getcwd())
    import psutil
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = 0.0
    log.info("engine %s started: pid %d on %s:%d (fingerprint %s), log %s", kind, proc.pid, host, port, fp, log_path)
    return Deployment(endpoint=f"http://{host}:{port}", api_key=key, log_path=str(log_path),
                      model=cfg.served_model_name,
                      handle={"kind": "local", "pid": proc.pid, "create_time": created, "argv": argv,
                              "engine": kind, "fingerprint": fp, "version": cfg.engine.version,
                              "execution_id": execution_id})


# -- readiness -------------------------------------------------------------

def _get(url: str, api_key: str | None, timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_ready(dep: Deployment, timeout: float = 120.0, poll_s: float = 0.25) -> None:
    """Block until ``/health`` answers 200 and ``/v1/models`` lists the model.

    Raises :class:`EngineError` with the engine's last log lines when the
    process exits or ``timeout`` passes.
    """
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not is_running(dep) and dep.handle.get("kind") == "local":
            raise EngineError(f"engine exited before it was ready ({last})\n{_tail_text(dep)}")
        try:
            status, _ = _get(dep.endpoint + "/health", None)
            if status == 200:
                status, body = _get(dep.endpoint + "/v1/models", dep.api_key)
                if status == 200:
                    try:
                        ids = [m.get("id") for m in json.loads(body).get("data", [])]
                    except (ValueError, AttributeError):
                        raise EngineError(f"engine at {dep.endpoint}: /v1/models did not answer OpenAI-style "
                                          "JSON; is this the engine's base URL?\n" + _tail_text(dep)) from None
                    if dep.model and dep.model not in ids:
                        raise EngineError(f"engine at {dep.endpoint} serves {ids}, not {dep.model!r}; "
                                          "check engine.served_model_name\n" + _tail_text(dep))
                    return
                last = f"/v1/models answered {status}"
                if status in (401, 403):
                    raise EngineError(f"engine at {dep.endpoint} rejected the API key ({status}); "
                                      "check the key source (provider.endpoint.api_key_env / airflow_conn_id)")
            else:
                last = f"/health answered {status}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        time.sleep(poll_s)
    raise EngineError(f"engine at {dep.endpoint} not ready after {timeout:.0f}s ({last})\n{_tail_text(dep)}")


def log_tail(dep: Deployment, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The engine's last ``lines`` log lines, secrets redacted."""
    if not dep.log_path or not Path(dep.log_path).exists():
        return []
    with open(dep.log_path, errors="replace") as f:
        tail = deque(f, maxlen=lines)
    return [secrets.redact(line.rstrip("\n"), [dep.api_key]) for line in tail]


def _tail_text(dep: Deployment) -> str:
    tail = log_tail(dep)
    if not tail:
        return "(no engine log)"
    return f"last {len(tail)} lines of {dep.log_path}:\n" + "\n".join("  | " + t for t in tail)


# -- stop ------------------------------------------------------------------

def _process(dep: Deployment):
    """The engine's psutil.Process, or None if gone (or the pid was reused)."""
    import psutil
    pid = dep.handle.get("pid")
    if not pid:
        return None
    try:
        p = psutil.Process(pid)
        if dep.handle.get("create_time") and abs(p.create_time() - dep.handle["create_time"]) > 1.0:
            return None
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except psutil.NoSuchProcess:
        return None


def is_running(dep: Deployment) -> bool:
    if dep.handle.get("kind") != "local":
        return True
    return _process(dep) is not None


def stop(dep: Deployment, grace_s: float = 10.0) -> None:
    """Stop a local engine: SIGTERM to its process group, SIGKILL after ``grace_s``.

    Idempotent; remote engines stop with their node (deprovision).
    """
    if dep.handle.get("kind") != "local":
        return
    p = _process(dep)
    if p is None:
        return
    _kill_tree(p, grace_s)
    log.info("engine pid %s stopped", dep.handle.get("pid"))


def _kill_tree(p, grace_s: float) -> None:
    import psutil
    try:
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    try:
        pgid = os.getpgid(p.pid)
    except ProcessLookupError:
        pgid = None
    _signal_all(procs, pgid, signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    if alive:
        _signal_all(alive, pgid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)


def _signal_all(procs, pgid, sig) -> None:
    import psutil
    if pgid is not None and pgid != os.getpgid(0):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def execution_engines(execution_id: str) -> list:
    """This user's processes started by ``deploy`` for ``execution_id``."""
    import psutil
    me = os.getuid()
    found = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.info["uids"] is None or p.info["uids"].real != me or p.pid == os.getpid():
                continue
            if p.environ().get(EXECUTION_ENV) == execution_id:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_execution_engines(execution_id: str, grace_s: float = 10.0) -> int:
    """Kill every engine process tagged with ``execution_id``; returns how many."""
    procs = execution_engines(execution_id)
    for p in procs:
        _kill_tree(p, grace_s)
    if procs:
        log.info("killed %d leftover engine process(es) of %s", len(procs), execution_id)
    return len(procs)
