import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
# The synthetic campaign factory lives with the tracking tests.
_factory = Path(__file__).parents[1] / "tracking" / "factory.py"
_spec = importlib.util.spec_from_file_location("benchcamp_test_factory", _factory)
factory = importlib.util.module_from_spec(_spec)
sys.modules["benchcamp_test_factory"] = factory
_spec.loader.exec_module(factory)


@pytest.fixture(scope="session")
def migrated_db_report(tmp_path_factory) -> Path:
    return factory.migrated_template(tmp_path_factory)


@pytest.fixture
def sqlite_uri(migrated_db_report, tmp_path) -> str:
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_db_report, db)
    return f"sqlite:///{db}"
