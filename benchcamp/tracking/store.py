"""The MLflow store: client, experiment, and the provenance facts of a run.

A local SQLite store and a remote ``mlflow server`` are the same code path:
only the tracking URI differs. For a SQLite store the artifacts go beside the
database file (``mlartifacts/``), not into the current directory's ``mlruns``.
"""

from __future__ import annotations

from benchcamp.errors import TrackingError  # noqa: F401  (re-exported)

import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

TAG = "benchcamp."
ROLE_CAMPAIGN = "campaign"
ROLE_POINT = "point"




def client(uri: str):
    # A progress bar per downloaded baseline artifact only clutters the campaign's summary.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if urlparse(uri).password:  # MLflow prints run URLs, password included, to stdout
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def sqlite_artifact_root(uri: str) -> str | None:
    """``sqlite:///dir/mlflow.db`` -> ``file:///abs/dir/mlartifacts``; None for other stores."""
    if not uri.startswith("sqlite:"):
        return None
    path = uri.split("sqlite:///", 1)[1] if "sqlite:///" in uri else ""
    if not path or path == ":memory:":
        return None
    return (Path(path).resolve().parent / "mlartifacts").as_uri()


def experiment_id(mlflow_client, name: str, uri: str, create: bool = True) -> str | None:
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            mlflow_client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    if not create:
        return None
    root = sqlite_artifact_root(uri)
    location = f"{root}/{name}" if root else None
    try:
        return mlflow_client.create_experiment(name, artifact_location=location)
    except Exception:  # created concurrently by another process: use theirs
        exp = mlflow_client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def git_commit(cwd: str | Path | None = None) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else "unknown"


def airflow_ids(explicit: dict[str, str] | None = None) -> dict[str, str]:
    """Airflow's dag_id / run_id from the task context env (set for every task), or as passed."""
    ids = {"dag_id": os.environ.get("AIRFLOW_CTX_DAG_ID", ""),
           "run_id": os.environ.get("AIRFLOW_CTX_DAG_RUN_ID", "")}
    ids.update({k: v for k, v in (explicit or {}).items() if v})
    return {k: v for k, v in ids.items() if v}


def describe_uri(uri: str) -> str:
    """The URI without any password, for messages."""
    p = urlparse(uri)
    if p.password:
        return uri.replace(f":{p.password}@", ":***@")
    return uri
