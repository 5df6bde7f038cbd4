"""The MLflow store: client, experiment, and the provenance facts of a run.

A local SQLite store and a remote ``mlflow server`` are the same code path:
only the tracking URI differs. For a SQLite store the artifacts go beside the
database file (``mlartifacts/``), not into the current directory's ``mlruns``.

A remote store is checked before anything depends on it (:func:`check_reachable`:
one request, no retries, a few seconds), and MLflow's own retries are cut from
7 (about four minutes of back-off per call) to ``CLIENT_RETRIES`` unless the
environment sets ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, overload
from urllib.parse import urlparse

from benchcamp.errors import TrackingError  # noqa: F401  (re-exported)

TAG = "benchcamp."
# What MLflow 3's UI opens an experiment on. Its experiment page reads the experiment tag
# mlflow.experimentKind (custom_model_development: the classic runs table, not the GenAI traces page);
# 3.17 (workflow-based navigation) takes the kind from the page's ?workflowType= (else the user's last
# choice, default genai), so benchcamp's links carry workflowType=machine_learning. Read from mlflow
# 3.17.2's UI bundle (mlflow/server/js/build, "mlflow.experimentKind", "mlflow.workflowType"), 2026-12-02.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
WORKFLOW_TYPE = "machine_learning"
# The runs table a benchcamp link opens on: MLflow 3's saved views (the runs page's "Views" menu) are experiment
# tags mlflow.sharedViewState.<id> holding {name, createdAt, updatedAt, state: the view's JSON (search facets and
# table state: selected columns, sort)}, and the runs page applies one when its address has ?viewStateShareKey=<id>.
# benchcamp saves one such view, its headline metrics as the first columns, newest run first. Read from mlflow
# 3.17.2's UI bundle (mlflow/server/js/build: the tag prefix "mlflow.sharedViewState.", the envelope check "Invalid
# saved-view envelope", the URL key "viewStateShareKey", the state keys "selectedColumns", "orderByKey", a column's
# key metrics.`<name>`), 2026-12-05.
VIEW_STATE_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "benchcamp-headline"
VIEW_NAME = "Headline first (benchcamp)"
VIEW_CREATED_MS = 1_796_428_800_000  # 2026-12-05: fixed, so the tag's value changes only when the view does
ROLE_CAMPAIGN = "campaign"
ROLE_POINT = "point"
CLIENT_RETRIES = 2  # with MLflow's back-off factor 2: ~6 s before a dead server is reported
CHECK_TIMEOUT_S = 5.0  # to connect: a server that is not there fails within this
CHECK_ANSWER_S = 30.0  # to answer once connected: a busy server's first request (store init) can be slow


def client(uri: str):
    # A progress bar per downloaded baseline artifact only clutters the campaign's summary.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(CLIENT_RETRIES))
    if urlparse(uri).password:  # MLflow prints run URLs, password included, to stdout
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def check_reachable(
    uri: str, timeout_s: float = CHECK_TIMEOUT_S, setting: str = "tracking.mlflow_uri", can_skip: bool = True
) -> None:
    """Raise TrackingError (one line: the setting and the fix) unless the MLflow store at
    ``uri`` answers: a remote server one search request, without MLflow's retries, that
    connects within ``timeout_s`` and is answered within CHECK_ANSWER_S; a SQLite store
    needs its folder. Other stores are not checked. ``setting``: where the user gave ``uri``
    (``--tracking-uri``); ``can_skip``: the command has ``--no-track`` (compare and log do not)."""
    scheme = urlparse(uri).scheme
    skip = ", or run with --no-track" if can_skip else ""
    fix = f"start the MLflow server (or point {setting} at a running one){skip}"
    if scheme == "sqlite":
        db = sqlite_db_path(uri)
        if db is not None:
            _check_sqlite(uri, db, setting)
        return
    if scheme not in ("http", "https"):
        return
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        resp = http_request(
            get_default_host_creds(uri),
            "/api/2.0/mlflow/experiments/search",
            "GET",
            max_retries=0,
            backoff_factor=0,
            params={"max_results": 1},
            timeout=(timeout_s, max(timeout_s, CHECK_ANSWER_S)),
            raise_on_status=False,
        )
    except Exception as exc:  # noqa: BLE001  (whatever the transport raised, the cause is in its chain)
        raise TrackingError(f"{setting}={describe_uri(uri)}: MLflow is not reachable ({_cause(exc)}); {fix}") from None
    if resp.status_code in (401, 403):
        raise TrackingError(
            f"{setting}={describe_uri(uri)}: MLflow rejected the credentials (HTTP "
            f"{resp.status_code}); set MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or "
            f"MLFLOW_TRACKING_TOKEN{skip}"
        )
    if resp.status_code != 200:
        raise TrackingError(
            f"{setting}={describe_uri(uri)}: answered HTTP {resp.status_code} to an "
            f"MLflow API request; is it an MLflow tracking server? {fix}"
        )


def _cause(exc: BaseException) -> str:
    """The root of a transport error in a few words: 'Connection refused', 'timed out'."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for e in chain:
        if "timed out" in str(e).lower() or isinstance(e, TimeoutError):
            return "timed out"
    for e in reversed(chain):
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
    return str(chain[-1]).splitlines()[0][:200] if str(chain[-1]) else type(chain[-1]).__name__


def _check_sqlite(uri: str, db: Path, setting: str) -> None:
    """A SQLite store that MLflow could not use fails here, in one line, not after the sweep
    (a folder in its place made MLflow retry for ~100 s; another application's database failed
    with MLflow's SQL traceback)."""
    import sqlite3
    from contextlib import closing

    fix = f"set {setting} to an MLflow database, or to a new file name (MLflow creates it)"
    if not db.parent.is_dir():
        raise TrackingError(
            f"{setting}={uri}: folder {db.parent} does not exist; create it or set {setting} to a store that exists"
        )
    if db.exists() and not db.is_file():
        raise TrackingError(f"{setting}={uri}: {db} is not a file; {fix}")
    if not db.exists() or db.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=CHECK_TIMEOUT_S)) as con:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise TrackingError(f"{setting}={uri}: {db} is not a readable SQLite database ({exc}); {fix}") from None
    if tables and "alembic_version" not in tables:  # MLflow's schema version table
        raise TrackingError(f"{setting}={uri}: {db} is the database of something other than MLflow; {fix}")


def sqlite_db_path(uri: str) -> Path | None:
    """``sqlite:///dir/mlflow.db`` -> the database file, absolute; None for other stores and
    for in-memory ones (``sqlite://``, ``sqlite:///:memory:``)."""
    if not uri.startswith("sqlite:"):
        return None
    path = uri.split("sqlite:///", 1)[1] if "sqlite:///" in uri else ""
    if not path or path == ":memory:":
        return None
    return Path(path).resolve()


def sqlite_artifact_root(uri: str) -> str | None:
    """``sqlite:///dir/mlflow.db`` -> ``file:///abs/dir/mlartifacts``; None for other stores."""
    db = sqlite_db_path(uri)
    return None if db is None else (db.parent / "mlartifacts").as_uri()


@overload
def experiment_id(mlflow_client, name: str, uri: str, create: Literal[True] = True) -> str: ...
@overload
def experiment_id(mlflow_client, name: str, uri: str, create: bool) -> str | None: ...
def experiment_id(mlflow_client, name: str, uri: str, create: bool = True) -> str | None:
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            mlflow_client.restore_experiment(exp.experiment_id)
        if create:
            for key, value in experiment_tags().items():
                if exp.tags.get(key) != value:
                    mlflow_client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id
    if not create:
        return None
    root = sqlite_artifact_root(uri)
    location = f"{root}/{name}" if root else None
    try:
        return mlflow_client.create_experiment(name, artifact_location=location, tags=experiment_tags())
    except Exception:  # created concurrently by another process: use theirs
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


# The headline metrics again under one prefix: MLflow groups a run's charts by the part before "/", and its compare
# view's plot starts on the first metric name in code-unit order (a JS .sort(): "H" before any lowercase name), so
# "Headline/1_total_tokens_per_s_per_gpu" comes first, the others after it in benchcamp.metrics.HEADLINE's order.
HEADLINE_PREFIX = "Headline/"


def headline_name(metric: str) -> str:
    """The name a headline metric is logged under again: ``Headline/<rank>_<metric>``."""
    from benchcamp.metrics import HEADLINE

    return f"{HEADLINE_PREFIX}{list(HEADLINE).index(metric) + 1}_{metric}"


def experiment_tags() -> dict[str, str]:
    """What benchcamp sets on its experiments: the kind (its runs, not the GenAI traces page) and the view
    its links open (:func:`headline_view`)."""
    view = {
        "name": VIEW_NAME,
        "createdAt": VIEW_CREATED_MS,
        "updatedAt": VIEW_CREATED_MS,
        "state": json.dumps(headline_view()),
    }
    return {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, VIEW_STATE_TAG_PREFIX + VIEW_KEY: json.dumps(view)}


def headline_view() -> dict[str, Any]:
    """The runs table as a shared MLflow view: the headline metrics first (the names they are logged under, in
    benchcamp.metrics.HEADLINE's order), then whether the campaign is valid and its headline point; newest first."""
    from benchcamp.metrics import HEADLINE

    columns = [f"metrics.`{headline_name(m)}`" for m in HEADLINE]
    columns += ["tags.`benchcamp.valid`", "tags.`benchcamp.headline_point`"]
    return {"orderByKey": "attributes.start_time", "orderByAsc": False, "selectedColumns": columns}


def experiment_ui_path(exp_id: str) -> str:
    """The MLflow UI's page of an experiment's runs, in the headline view:
    ``#/experiments/<id>/runs?workflowType=...&viewStateShareKey=...``."""
    return f"#/experiments/{exp_id}/runs?workflowType={WORKFLOW_TYPE}&viewStateShareKey={VIEW_KEY}"


def mlflow_time(iso: str | None) -> int:
    """An ISO timestamp as MLflow keeps a run's start and end: epoch milliseconds; now when
    ``iso`` is missing or not ISO."""
    try:
        return int(datetime.fromisoformat(str(iso)).timestamp() * 1000)
    except (TypeError, ValueError):
        return int(time.time() * 1000)


def git_commit(cwd: str | Path | None = None) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else "unknown"


def airflow_ids(explicit: dict[str, str] | None = None) -> dict[str, str]:
    """Airflow's dag_id / run_id from the task context env (set for every task), or as passed."""
    ids = {"dag_id": os.environ.get("AIRFLOW_CTX_DAG_ID", ""), "run_id": os.environ.get("AIRFLOW_CTX_DAG_RUN_ID", "")}
    ids.update({k: v for k, v in (explicit or {}).items() if v})
    return {k: v for k, v in ids.items() if v}


def describe_uri(uri: str) -> str:
    """The URI without any password, for messages."""
    p = urlparse(uri)
    if p.password:
        return uri.replace(f":{p.password}@", ":***@")
    return uri
