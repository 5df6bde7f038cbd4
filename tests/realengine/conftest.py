"""The real vLLM (its CPU build and the tiny local model, from `make real-engine`) for the tests
that need an engine's real behaviour.

`make test` builds it first (scripts/real_engine/build.sh; reused once built). Where it is
missing, these tests skip and say so; under BENCHCAMP_REQUIRE_REAL_ENGINE=1 (what .ci/run sets)
they fail instead, so CI can never pass without running them.

Every test here must leave nothing of the engine behind: no process of its tree (API server,
EngineCore, worker), nothing new in the home cache, /dev/shm or the system temp folder, which
``no_engine_leftovers`` checks around each test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from realengine_support import REQUIRED, TEST_TAG_ENV, in_use_by_others, outside_files, wait_gone


@pytest.fixture(scope="session")
def vllm_install():
    from benchcamp.deploy import find_vllm

    found = find_vllm()
    if found is None or not found.cpu:
        why = f"no real CPU vLLM here ({found.describe() if found else 'none found'}): run `make real-engine`"
        if REQUIRED:
            pytest.fail(f"BENCHCAMP_REQUIRE_REAL_ENGINE=1 but {why}")
        pytest.skip(why)
    return found


@pytest.fixture
def no_engine_leftovers(monkeypatch) -> Iterator[None]:
    """Engines this test starts inherit a tag in their environment (engines of other sessions on the
    same machine do not have it); after the test none may be alive, and nothing new may lie outside."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TEST_TAG_ENV, tag)
    before = outside_files()
    yield
    left = wait_gone(tag)
    assert not left, f"engine processes left: {[(p.pid, p.name()) for p in left]}"
    new = outside_files() - before - in_use_by_others(tag)
    assert not new, f"the engine left files outside its execution's folder: {sorted(new)}"
