"""CI requires every service some test needs: .ci/run exports each REQUIRE variable of tests/services.py as 1,
so a test whose service is missing there fails instead of skipping, and `make test` (what .ci/run runs) has a
target that installs or builds each service it names."""

from __future__ import annotations

import re
from pathlib import Path

from benchcamp_test_services import SERVICES

ROOT = Path(__file__).resolve().parents[1]


def test_ci_run_requires_every_service_a_test_needs():
    exported = set(re.findall(r"^export (BENCHCAMP_REQUIRE_\w+)=1$", (ROOT / ".ci" / "run").read_text(), re.M))
    assert {env for env, _ in SERVICES.values()} - exported == set()


def test_make_test_installs_every_service_it_can():
    test_deps = re.search(r"^test: (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert test_deps is not None
    targets = set(test_deps.group(1).split())
    named = {m.group(1) for _, fix in SERVICES.values() if (m := re.match(r"make ([\w-]+)", fix))}
    assert named - targets - {"native"} == set()  # native: `make setup`, which every target runs
    assert "setup" in targets
