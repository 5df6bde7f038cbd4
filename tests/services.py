"""The services beyond Python that some tests need, and what a test does where one is missing.

Outside CI a missing service skips its tests with the reason and the command that installs it. Under the
service's REQUIRE variable (``.ci/run`` sets every one of them; ``make test`` installs every service first)
the same test fails instead, so CI cannot pass while a whole class of tests silently skipped.
tests/test_ci_requires.py holds that .ci/run sets each variable named here.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

# service -> (the variable that makes its absence a failure, how to get it)
SERVICES: dict[str, tuple[str, str]] = {
    "real-engine": ("BENCHCAMP_REQUIRE_REAL_ENGINE", "make real-engine"),
    "agentx-harness": ("BENCHCAMP_REQUIRE_AGENTX_HARNESS", "make agentx-harness"),
    "native": ("BENCHCAMP_REQUIRE_NATIVE", "make native"),
    "redis": ("BENCHCAMP_REQUIRE_REDIS", "make redis (apt-get install redis-server, as root)"),
    "slurm": ("BENCHCAMP_REQUIRE_SLURM", "make slurm (apt-get install slurm-wlm munge, as root)"),
    "browser": ("BENCHCAMP_REQUIRE_BROWSER", "make browser (apt-get install chromium, as root)"),
    "tmpfs": ("BENCHCAMP_REQUIRE_TMPFS", "run the tests as root with CAP_SYS_ADMIN (mount -t tmpfs)"),
}


def required(service: str) -> bool:
    """Whether this run must have ``service`` (its REQUIRE variable is 1)."""
    return os.environ.get(SERVICES[service][0]) == "1"


def absent(service: str, why: str) -> None:
    """A test that goes on without ``service`` (a fallback path) calls this: under the REQUIRE variable it fails."""
    env, fix = SERVICES[service]
    if required(service):
        pytest.fail(f"{env}=1 but {why}: {fix}")


def skip_absent(service: str, why: str) -> NoReturn:
    """Skip the test for want of ``service`` (with the reason and the fix), or fail under its REQUIRE variable."""
    absent(service, why)
    pytest.skip(f"{why}: {SERVICES[service][1]}")
