"""Deploy the engine on a node and stop it: dispatch by node kind (this machine, an EC2 node, an endpoint), one
engine or a whole topology (``roles``) behind its router.

The API key is a fresh random value per local deployment, handed to the engine through ``VLLM_API_KEY`` and never
through argv; the handle that leaves the process carries only where to find it (``api_key_ref``,
benchcamp.secrets.refs).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from benchcamp.config import Config
from benchcamp.deploy.argv import multinode, peer_argvs, simulated_argv, vllm_argv
from benchcamp.deploy.deployment import Deployment
from benchcamp.deploy.local import alive as local_alive
from benchcamp.deploy.local import (
    kill_execution_engines,
    kill_tree,
)
from benchcamp.deploy.vllm_install import (
    VllmInstall,
    check_local_engine,
    engine_cwd,
    engine_environment,
    scratch_dirs,
)
from benchcamp.provision.base import Node, safe_name
from benchcamp.secrets import redaction
from benchcamp.secrets import refs as secret_refs

log = logging.getLogger(__name__)


def engine_folder(log_dir: str | Path | None, execution_id: str) -> Path:
    """Where an execution's engine processes write (logs, argv, caches): ``log_dir``, else one folder per
    execution under the temp dir."""
    if log_dir:
        return Path(log_dir)
    return Path(tempfile.gettempdir()) / "benchcamp-engines" / safe_name(execution_id or "adhoc")


def check_engine(cfg: Config) -> VllmInstall | None:
    """The real vLLM a local ``engine.kind=vllm`` deployment will run, checked against the config
    (:func:`check_local_engine`: there is one, of ``engine.version``, CPU build iff hardware.gpu=cpu);
    None for the simulated engine and remote providers. A ConfigError names the fix: nothing runs
    in place of the engine asked for."""
    if cfg.provider.kind != "local" or cfg.engine.kind != "vllm" or cfg.load.clock == "virtual":
        return None
    return check_local_engine(cfg.engine.version, cfg.hardware.gpu, cfg.engine.block_size)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def deploy(
    node: Node,
    cfg: Config,
    log_dir: str | Path | None = None,
    api_key: str | None = None,
    die_with_parent: bool = False,
    results_root: str | Path | None = None,
    api_key_ref: str | None = None,
) -> Deployment:
    """Start (or attach to) the engine on ``node``; returns before it is ready.

    local: launches the engine subprocess with a fresh key (``die_with_parent``: it must
    not outlive this process; ``results_root`` goes in its environment for the orphan
    reaper). ec2: the engine was started by user data; the key comes from the node.
    endpoint: ``api_key_ref`` (tasks/: ``airflow-conn:<provider.endpoint.airflow_conn_id>``), else
    ``api_key`` (this process only), else the env var named in the config.
    """
    fp = cfg.fingerprint()
    if node.kind == "local":
        return _deploy_local(node, cfg, log_dir, fp, die_with_parent, results_root)
    if node.kind == "ec2":
        from benchcamp.provision.ec2 import Ec2Provider

        key = Ec2Provider(cfg).api_key_for(node)
        redaction.register(key)
        handle: dict[str, Any] = {
            "kind": "ec2",
            "node_id": node.node_id,
            "engine": cfg.engine.kind,
            "fingerprint": fp,
            "version": cfg.engine.version,
        }
        endpoint = f"http://{node.host}:{cfg.provider.ec2.engine_port}"
        if node.meta.get("cluster") and cfg.topology is not None and cfg.topology.needs_router:
            endpoint, handle["router"] = _ec2_router(node, cfg, key, log_dir, die_with_parent, results_root)
        return Deployment(
            endpoint=endpoint,
            api_key=key,
            api_key_ref=f"ec2:{node.meta.get('execution_id', '')}",
            log_path=handle.get("router", {}).get("log_path"),
            model=cfg.served_model_name,
            handle=handle,
        )
    if node.kind == "slurm":
        from benchcamp.provision.slurm import SlurmProvider

        execution_id = node.meta.get("execution_id", "")
        key = SlurmProvider(cfg).api_key_for(execution_id)
        redaction.register(key)
        return Deployment(
            endpoint=f"http://{node.host}:{cfg.provider.slurm.engine_port}",
            api_key=key,
            api_key_ref=f"slurm:{execution_id}",
            log_path=node.meta.get("log_path"),  # the job's output (a shared folder on a real cluster)
            model=cfg.served_model_name,
            handle={
                "kind": "slurm",
                "node_id": node.node_id,
                "job_id": node.meta.get("job_id"),
                "engine": cfg.engine.kind,
                "fingerprint": fp,
                "version": cfg.engine.version,
                "execution_id": execution_id,
            },
        )
    if node.kind == "endpoint":
        env_name = cfg.provider.endpoint.api_key_env
        if api_key_ref:
            endpoint_key = secret_refs.resolve(api_key_ref, "the endpoint's API key")
        elif api_key:
            endpoint_key, api_key_ref = api_key, secret_refs.keep_in_process(api_key)
        else:
            endpoint_key = os.environ.get(env_name) or None
            api_key_ref = f"env:{env_name}" if endpoint_key else None
        redaction.register(endpoint_key)
        return Deployment(
            endpoint=node.host.rstrip("/"),
            api_key=endpoint_key,
            api_key_ref=api_key_ref,
            log_path=None,
            model=cfg.served_model_name,
            handle={"kind": "endpoint", "engine": "external", "fingerprint": fp},
        )
    raise ValueError(f"node.kind={node.kind!r}: unknown; expected local, ec2, endpoint or slurm")


def _deploy_local(
    node: Node, cfg: Config, log_dir: str | Path | None, fp: str, die_with_parent: bool, results_root: str | Path | None
) -> Deployment:
    from benchcamp.deploy.local import launch

    execution_id = node.meta.get("execution_id", "")
    if execution_id:
        # An Airflow retry of deploy: the previous attempt's engine may still run.
        kill_execution_engines(execution_id)
    if cfg.topology is not None:
        return _deploy_topology(node, cfg, log_dir, fp, die_with_parent, results_root)
    host = node.host
    port = cfg.provider.local.port or free_port(host)
    kind = cfg.engine.kind
    log_dir = engine_folder(log_dir, execution_id)
    found = check_engine(cfg)
    engine_env: dict[str, str] = {}
    scratch: list[str] = []
    if found is not None:
        for old in scratch_dirs(log_dir):  # a resumed execution's leftovers (its engine was killed)
            shutil.rmtree(old, ignore_errors=True)
        engine_env = engine_environment(found, log_dir)
        scratch = [str(d) for d in scratch_dirs(log_dir)]
        argv = vllm_argv(
            cfg,
            host,
            port,
            executable=str(found.executable),
            model=found.model_path(cfg.engine.model),
            dp_rpc_port=free_port(host) if multinode(cfg) else None,
        )
    else:  # the simulated engine runs every data-parallel rank in one process
        argv = simulated_argv(cfg, host, port)
    # Secrets (--hf-token, --api-key in engine.extra_args) travel in the engine's env, not argv (ps shows argv).
    argv, secret_env = redaction.split_engine_secrets(argv)
    secret_env.update(secret_refs.engine_secret_env(cfg.engine.hf_token_ref))  # engine.hf_token_ref -> HF_TOKEN
    key = secret_env.pop("VLLM_API_KEY", None) or redaction.new_api_key()
    # Every process of the deployment gets the same key, secrets, environment and lifetime.
    start = functools.partial(
        launch,
        log_dir=log_dir,
        api_key=key,
        secret_env=secret_env,
        extra_env=engine_env,
        cwd=engine_cwd(log_dir) if found is not None else None,
        execution_id=execution_id,
        results_root=results_root,
        die_with_parent=die_with_parent,
    )
    pid, created, log_path = start(
        argv,
        meta={
            "engine": kind,
            "version": found.version if found else cfg.engine.version,
            "fingerprint": fp,
            **({"vllm": found.describe()} if found else {}),
        },
    )
    log.info("engine %s started: pid %d on %s:%d (fingerprint %s), log %s", kind, pid, host, port, fp, log_path)
    peers = []
    if found is not None and multinode(cfg):
        # vLLM's multi-node data parallel on loopback: every further node's ranks as a --headless peer
        # of the head (which serves the API); a peer outlives its head unless stopped itself.
        for i, peer in enumerate(peer_argvs(argv, cfg), start=1):
            peer_pid, peer_created, peer_log = start(
                peer, meta={"engine": kind, "role": f"data-parallel peer {i}"}, log_name=f"engine-peer{i}.log"
            )
            peers.append({"pid": peer_pid, "create_time": peer_created, "log_path": str(peer_log)})
            log.info("engine peer %d started: pid %d, log %s", i, peer_pid, peer_log)
    return Deployment(
        endpoint=f"http://{host}:{port}",
        api_key=key,
        # the key lives in the engine's environment only: later steps read it there
        api_key_ref=secret_refs.deployment_key_ref("local", {"pid": pid, "create_time": created}),
        log_path=str(log_path),
        model=cfg.served_model_name,
        handle={
            "kind": "local",
            "pid": pid,
            "create_time": created,
            "argv": argv,
            "engine": kind,
            "fingerprint": fp,
            "version": found.version if found else cfg.engine.version,
            "execution_id": execution_id,
            "scratch": scratch,
            "peers": peers,
        },
    )


def _deploy_topology(
    node: Node, cfg: Config, log_dir: str | Path | None, fp: str, die_with_parent: bool, results_root: str | Path | None
) -> Deployment:
    """Every process of ``cfg.topology`` on this node (benchcamp.deploy.roles), the router last. The handle's
    process is the front one (router, else the single engine's head); every other one is in ``peers``, so
    ``stop`` ends them all. A launch that fails half way stops what it started."""
    from benchcamp.deploy import roles as topo_deploy
    from benchcamp.deploy.local import launch

    execution_id = node.meta.get("execution_id", "")
    topo = cfg.topology
    assert topo is not None
    host = node.host
    kind = cfg.engine.kind
    log_dir = engine_folder(log_dir, execution_id)
    found = check_engine(cfg)
    # The KV connector's shared folder, one per execution (nothing in vLLM cleans it: stop removes it).
    kcs = [r.kv_connector for _, r in topo.roles() if r.kv_connector is not None]
    storage: Path | None = None
    if kcs and (found is None or kcs[0].shared_storage_path):
        base = Path(kcs[0].shared_storage_path) if found is not None else log_dir
        storage = (base if base.is_absolute() else log_dir / base) / f"kv-shared-{safe_name(execution_id or 'adhoc')}"
        shutil.rmtree(storage, ignore_errors=True)  # a resumed execution's leftovers
        storage.mkdir(parents=True, exist_ok=True)
    procs = topo_deploy.plan(
        cfg,
        topo,
        host,
        free_port=lambda: free_port(host),
        storage=storage,
        executable=str(found.executable) if found is not None else None,
        model=found.model_path(cfg.engine.model) if found is not None else None,
        router_port=cfg.provider.local.port or None,
    )
    key = redaction.new_api_key()
    scratch: list[str] = [str(storage)] if storage is not None else []
    started: list[dict[str, Any]] = []
    meta = {"engine": kind, "version": found.version if found else cfg.engine.version, "fingerprint": fp}
    front = topo_deploy.front(procs)
    try:
        for p in procs:
            argv, secret_env = redaction.split_engine_secrets(p.argv)
            secret_env.update(secret_refs.engine_secret_env(cfg.engine.hf_token_ref))
            secret_env.pop("VLLM_API_KEY", None)
            env: dict[str, str] = dict(p.env)
            cwd = None
            if found is not None and p.role != "router":
                work = log_dir / p.work
                for old in scratch_dirs(work):
                    shutil.rmtree(old, ignore_errors=True)
                env.update(engine_environment(found, work))
                scratch += [str(d) for d in scratch_dirs(work)]
                cwd = engine_cwd(work)
            pid, created, log_path = launch(
                argv,
                log_dir,
                api_key=key,
                secret_env=secret_env,
                extra_env=env,
                cwd=cwd,
                execution_id=execution_id,
                results_root=results_root,
                die_with_parent=die_with_parent,
                meta={**meta, "role": p.role, "instance": p.instance, "node": p.node, "head": p.head},
                log_name=f"{p.name}.log",
            )
            started.append(
                {
                    "pid": pid,
                    "create_time": created,
                    "log_path": str(log_path),
                    "name": p.name,
                    "role": p.role,
                    "instance": p.instance,
                    "node": p.node,
                    "head": p.head,
                    "endpoint": p.endpoint,
                    "argv": argv,
                }
            )
            log.info("%s started: pid %d (%s), log %s", p.name, pid, p.endpoint or "headless", log_path)
    except BaseException:
        for proc in reversed(started):
            p_ = local_alive(proc)
            if p_ is not None:
                kill_tree(p_, 10.0)
        raise
    first = next(s for s in started if s["name"] == front.name)
    others = [s for s in started if s is not first]
    log.info("topology %s: %d processes, endpoint %s", topo.describe(), len(started), front.endpoint)
    return Deployment(
        endpoint=str(front.endpoint),
        api_key=key,
        api_key_ref=secret_refs.deployment_key_ref("local", {"pid": first["pid"], "create_time": first["create_time"]}),
        log_path=first["log_path"],
        model=cfg.served_model_name,
        handle={
            "kind": "local",
            "pid": first["pid"],
            "create_time": first["create_time"],
            "argv": first["argv"],
            "engine": kind,
            "fingerprint": fp,
            "version": meta["version"],
            "execution_id": execution_id,
            "scratch": scratch,
            # the router first: no request reaches an engine that is stopping
            "peers": [{k: v for k, v in s.items() if k != "argv"} for s in others],
            "topology": topo.describe(),
            "name": first["name"],
            "role": first["role"],
        },
    )


def _ec2_router(
    node: Node,
    cfg: Config,
    key: str,
    log_dir: str | Path | None,
    die_with_parent: bool,
    results_root: str | Path | None,
) -> tuple[str, dict[str, Any]]:
    """The router of a multi-node EC2 topology, run beside this process (the orchestrator, which the nodes'
    security group admits on the engine port) in front of every instance's head: (its endpoint, its process)."""
    from benchcamp.deploy.local import launch
    from benchcamp.deploy.roles import ROUTER_POLICY
    from benchcamp.router import router_argv

    topo = cfg.topology
    assert topo is not None
    port = cfg.provider.ec2.engine_port
    heads: dict[str, list[str]] = {}
    for n in node.meta["cluster"]:
        if n["node"] == 0:
            heads.setdefault(n["role"], []).append(f"http://{n['host']}:{port}")
    r = topo.router
    policy = ROUTER_POLICY[r.policy] if r is not None else "round_robin"
    header = r.session_header if r is not None else "X-Session-ID"
    own = free_port("127.0.0.1")
    if topo.disaggregated:
        argv = router_argv(
            "127.0.0.1", own, prefill=heads["prefill"], decode=heads["decode"], policy=policy, session_header=header
        )
    else:
        argv = router_argv("127.0.0.1", own, unified=heads["unified"], policy=policy, session_header=header)
    execution_id = node.meta.get("execution_id", "")
    folder = engine_folder(log_dir, execution_id)
    pid, created, log_path = launch(
        argv,
        folder,
        api_key=key,
        execution_id=execution_id,
        results_root=results_root,
        die_with_parent=die_with_parent,
        meta={"role": "router", "nodes": len(node.meta["cluster"])},
        log_name="router.log",
    )
    log.info("router for %d nodes started: pid %d on 127.0.0.1:%d", len(node.meta["cluster"]), pid, own)
    return f"http://127.0.0.1:{own}", {"pid": pid, "create_time": created, "log_path": str(log_path)}
