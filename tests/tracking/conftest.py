import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # factory.py
# No usage telemetry from tests (and nothing but loopback traffic).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory, mlflow_db_template):
    """A real `mlflow server` on loopback, artifacts proxied over HTTP (mlflow-artifacts:)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    shutil.copy(mlflow_db_template, root / "server.db")
    port = _free_port()
    exe = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or "mlflow"
    log = open(root / "server.log", "wb")
    proc = subprocess.Popen(
        [exe, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{root}/server.db",
         "--artifacts-destination", str(root / "artifacts"), "--serve-artifacts"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server not healthy in 180 s: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield {"uri": url, "artifacts": root / "artifacts"}
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()
