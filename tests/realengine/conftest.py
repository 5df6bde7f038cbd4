"""The real vLLM (its CPU build and the tiny local model, from `make real-engine`) for the tests
that need an engine's real behaviour.

The fixture ``vllm_install`` (tests/conftest.py, for tests/airflow too) finds it or skips.

Every test here must leave nothing of the engine behind: no process of its tree (API server,
EngineCore, worker), nothing new in the home cache, /dev/shm or the system temp folder, which
``no_engine_leftovers`` checks around each test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from realengine_support import in_use, outside_files, wait_gone


@pytest.fixture
def no_engine_leftovers(tmp_path, monkeypatch) -> Iterator[None]:
    """The test's engines work under tmp_path: benchcamp runs it starts get TMPDIR=tmp_path (their engine
    folders go there), engines it deploys itself take a folder in it. After the test none may be alive,
    and nothing new may lie outside those folders. Other sessions' engines on the machine are not its."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = outside_files(tmp_path)
    yield
    left = wait_gone(tmp_path)
    assert not left, f"engine processes left: {[(p.pid, p.name()) for p in left]}"
    # a killed process's semaphores are unlinked by its resource tracker soon after: give it a few seconds
    deadline = time.monotonic() + 10.0
    while True:
        new = outside_files(tmp_path) - before
        new -= in_use(new)  # held by a live process: not this test's (its engines are gone, checked above)
        if not new or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not new, f"the engine left files outside its execution's folder: {sorted(new)}"
