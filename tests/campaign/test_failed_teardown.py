"""A teardown that fails (the cloud refuses to release a node) fails the execution, loudly,
and loses nothing: the summary is still written, names the step, and the exit code is 1.

The provider's release is made to fail with monkeypatch: the real failure (EC2 refusing to
terminate) cannot be produced on loopback. Engine, store and MLflow are real."""

from __future__ import annotations

import json

import pytest
from campaign_support import HTTP_PARAMS, tiny_sets

from benchcamp.cli import main
from benchcamp.provision.local import LocalProvider

pytestmark = pytest.mark.timeout(300)


def test_a_failed_deprovision_is_in_the_summary_and_fails_the_run(tmp_path, capsys, monkeypatch):
    calls = []

    def refuse(self, node):
        calls.append(node)
        raise RuntimeError("TerminateInstances refused: UnauthorizedOperation")

    monkeypatch.setattr(LocalProvider, "deprovision", refuse)
    argv = ["run", "--params", str(HTTP_PARAMS), "--reports", str(tmp_path / "reports"), "--no-track"]
    for s in tiny_sets(tmp_path):
        argv += ["--set", s]
    code = main(argv)
    out, err = capsys.readouterr()
    assert calls, "the teardown ran"
    assert code == 1, out + err
    assert "deprovision failed: TerminateInstances refused" in out + err
    (summary,) = (tmp_path / "results").glob("*/*/summary.json")
    doc = json.loads(summary.read_text())
    assert doc["status"] == "failed"
    assert "deprovision: TerminateInstances refused" in doc["error"]
    assert doc["points"], "what was measured is kept"
