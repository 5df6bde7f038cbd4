"""Suite-wide: no test leaves the process's signal state behind for the tests after it.

Dispositions and the blocked mask are inherited by every child a later test starts (an
ignored or blocked SIGINT made a Ctrl-C test's child deaf to Ctrl-C in the full run only).
The guard restores what a test changed and warns with the test's id, so the culprit shows
in the run's warnings summary instead of as another test's failure.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

GUARDED = (signal.SIGINT, signal.SIGTERM)

# Bytecode is cached for every process the suite starts (Airflow components and tasks, benchcamp CLIs,
# servers): `uv sync` installs no .pyc, and under PYTHONDONTWRITEBYTECODE (set on the shared box CI runs on)
# each of those processes compiled every module it imported from source (~1-3 s each). The Makefile
# unexports it too; this covers a bare `uv run pytest`. The .pyc files are git-ignored.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# --- Two workers: `make test` runs pytest -n 2 --dist loadgroup (pytest-xdist) ------------------------------
# Much of the suite's wall time is waiting (points with fixed windows against engines that pace their tokens,
# servers and schedulers starting and polling), so a second worker puts the idle core to work. Three rules keep
# every test seeing what it sees in one process:
# - a module whose fixtures are module-scoped (a server per module), or session-scoped and defined in the module,
#   runs whole on one worker: its fixture is set up once, not once per worker;
# - the real vLLM tests (fixture vllm_install) share one worker: one real engine at a time (its worker holds a core);
# - a test marked ``alone`` (timings to the millisecond, a Ctrl-C landing mid-request, wall against virtual clock)
#   runs with no test beside it: the alone tests go to one worker, which holds a lock the other worker waits on.
# The groups are this file's, not xdist_group marks: xdist 3.8 names a marked test's group in its node id, which
# pytest 9 no longer reads (the marks group nothing). The workers write them where the controller's scheduler
# reads them.
LOCKS_ENV = "BENCHCAMP_XDIST_LOCKS"


def _xdist_group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("alone"):
        return "alone"
    if "vllm_install" in item.fixturenames:
        return "real-vllm"
    module = item.nodeid.split("::", 1)[0]
    for name in item.fixturenames:
        for fixture in item._fixtureinfo.name2fixturedefs.get(name, ()):
            if fixture.scope in ("module", "class") or (fixture.scope != "function" and fixture.baseid == module):
                return module
    return None


_made_locks = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        config.stash[_made_locks] = os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="benchcamp-xdist-")  # inherited


def pytest_unconfigure(config: pytest.Config) -> None:
    if _made_locks in config.stash:  # the controller's (a test's own child pytest inherits the variable too)
        shutil.rmtree(config.stash[_made_locks], ignore_errors=True)
        os.environ.pop(LOCKS_ENV, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput") and os.environ.get(LOCKS_ENV):
        groups = {item.nodeid: group for item in items if (group := _xdist_group(item))}
        mine = Path(os.environ[LOCKS_ENV]) / f"groups.{config.workerinput['workerid']}.json"
        mine.with_suffix(".tmp").write_text(json.dumps(groups))
        mine.with_suffix(".tmp").replace(mine)  # every worker collects the same tests: any one file will do


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which would make its LoadGroupScheduling
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """xdist's load-by-scope scheduling with this file's groups as the scopes (a test of no group: its own)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first called once every worker has collected (and written its file)
                self.groups = json.loads(next(Path(os.environ[LOCKS_ENV]).glob("groups.*.json")).read_text())
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


def _built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build) -> Path:
    shared = os.environ.get(LOCKS_ENV)
    if not shared or not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    done = Path(shared) / f"{name}.built"
    with open(Path(shared) / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=shared))  # a fresh one after a failed try
            done.write_text(str(build(folder)))
    return Path(done.read_text())


class _Room:
    """A readers-writer lock over the run's workers (flock on files in the folder the controller made): every test
    holds it shared, an ``alone`` test exclusive, kept over the alone tests that follow it. A writer takes the
    turnstile first and keeps it while it waits, so the other worker's next tests cannot overtake it."""

    def __init__(self, folder: Path) -> None:
        self.turnstile = open(folder / "turnstile", "a")  # held for the worker's life
        self.room = open(folder / "room", "a")
        self.held: int | None = None

    def enter(self, mode: int) -> None:
        if self.held == mode:
            return
        self.leave()
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.room, mode)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.held = mode

    def leave(self) -> None:
        if self.held is not None:
            fcntl.flock(self.room, fcntl.LOCK_UN)
            self.held = None


_room: _Room | None = None


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: pytest-timeout does not count the wait
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _room
    if not hasattr(item.config, "workerinput") or not os.environ.get(LOCKS_ENV):
        return (yield)
    if _room is None:
        _room = _Room(Path(os.environ[LOCKS_ENV]))
    alone = item.get_closest_marker("alone") is not None
    _room.enter(fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    try:
        return (yield)
    finally:
        if not (alone and nextitem is not None and nextitem.get_closest_marker("alone")):
            _room.leave()


@pytest.fixture(autouse=True)
def _signal_state_restored(request: pytest.FixtureRequest):
    handlers = {sig: signal.getsignal(sig) for sig in GUARDED}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    changed = [sig.name for sig in GUARDED if signal.getsignal(sig) is not handlers[sig]]
    now_mask = signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if now_mask != mask:
        changed.append(f"blocked mask {sorted(s.name for s in now_mask)}")
    for sig, handler in handlers.items():
        if handler is not None:  # None: set outside Python, nothing to restore to
            signal.signal(sig, handler)
    if changed:
        warnings.warn(f"{request.node.nodeid} left signal state changed: {', '.join(changed)} (restored)",
                      stacklevel=1)


# What a test does where a service it needs (Redis, Slurm, Chromium, a tmpfs mount, ...) is missing: skip, or fail
# under the service's REQUIRE variable, which .ci/run sets (tests/services.py). Loaded once under one name.
_spec = importlib.util.spec_from_file_location("benchcamp_test_services", Path(__file__).parent / "services.py")
services = sys.modules["benchcamp_test_services"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(services)


# The synthetic campaigns and the MLflow template live with the tracking tests (tests/tracking/factory.py),
# loaded once under one name for every folder that uses them (the report tests import it by that name).
_spec = importlib.util.spec_from_file_location("benchcamp_test_factory", Path(__file__).parent / "tracking" / "factory.py")
factory = sys.modules["benchcamp_test_factory"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)


@pytest.fixture(scope="session")
def mlflow_db_template(tmp_path_factory) -> Path:
    """An empty, migrated MLflow SQLite store, made once per session: a test copies it where its
    config points instead of paying MLflow's migrations (~10 s) in its run. A copy is exactly the
    store a fresh `mlflow` makes."""
    return _built_once(tmp_path_factory, "mlflow-template", factory.migrated_template)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory):
    """built_once(name, build) -> path: ``build(folder) -> path`` once per run. Under xdist the first worker to
    ask builds it in the run's shared folder while the other waits on a lock, then both use it (for a template
    each test copies: read only); in one process, once per session."""
    return lambda name, build: _built_once(tmp_path_factory, name, build)


@pytest.fixture
def mlflow_db(tmp_path, mlflow_db_template) -> Path:
    """A migrated MLflow store at tmp_path/mlflow.db (where the tests' configs point tracking.mlflow_uri)."""
    db = tmp_path / "mlflow.db"
    shutil.copy(mlflow_db_template, db)
    return db


@pytest.fixture
def sqlite_uri(mlflow_db) -> str:
    return f"sqlite:///{mlflow_db}"


@pytest.fixture(scope="session")
def agentperf_replays():
    """agentperf-local's replay files (`make agentperf-data`; `make test` fetches them first). Where
    they are missing the test skips and says so; under BENCHCAMP_REQUIRE_REAL_ENGINE=1 (what .ci/run
    sets) it fails instead, so CI cannot pass without the AA-AgentPerf tests."""
    from benchcamp.workload.agentperf import FETCH_HINT, find_replays

    root = find_replays()
    if root is None or not (root / "agentperf-default-v1").is_dir():
        why = f"no agentperf-local 0.3.4 replays here: {FETCH_HINT}"
        if os.environ.get("BENCHCAMP_REQUIRE_REAL_ENGINE") == "1":
            pytest.fail(f"BENCHCAMP_REQUIRE_REAL_ENGINE=1 but {why}")
        pytest.skip(why)
    return root


@pytest.fixture(scope="session")
def vllm_install():
    """The real CPU vLLM and its tiny model (`make real-engine`; `make test` builds it first). Where it
    is missing the test skips and says so; under BENCHCAMP_REQUIRE_REAL_ENGINE=1 (what .ci/run sets) it
    fails instead, so CI cannot pass without the real-engine tests."""
    from benchcamp.deploy import find_vllm

    found = find_vllm()
    if found is None or not found.cpu:
        why = f"no real CPU vLLM here ({found.describe() if found else 'none found'}): run `make real-engine`"
        if os.environ.get("BENCHCAMP_REQUIRE_REAL_ENGINE") == "1":
            pytest.fail(f"BENCHCAMP_REQUIRE_REAL_ENGINE=1 but {why}")
        pytest.skip(why)
    return found


# The real single-node Slurm cluster (tests/provision/slurm_cluster.py), one per session for every folder that
# runs jobs on it (the provider's tests, the DAG's): up on first use, jobs cancelled and daemons stopped at the end.
_spec = importlib.util.spec_from_file_location("benchcamp_slurm_cluster", Path(__file__).parent / "provision" / "slurm_cluster.py")
slurm_cluster_support = sys.modules["benchcamp_slurm_cluster"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slurm_cluster_support)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running single-node Slurm (SLURM_CONF set in this process's environment); skipped with the reason
    where it cannot be installed (``make slurm``: apt-get as root), failed instead under
    BENCHCAMP_REQUIRE_SLURM=1 (what .ci/run sets)."""
    why = slurm_cluster_support.install()
    if why:
        services.skip_absent("slurm", f"no Slurm test cluster ({why})")
    cluster = slurm_cluster_support.Cluster(tmp_path_factory.mktemp("slurm")).start()
    saved = os.environ.get("SLURM_CONF")
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        cluster.stop()
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
