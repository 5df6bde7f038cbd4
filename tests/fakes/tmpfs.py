"""A real tmpfs of a given size, mounted for a test and unmounted after (a full or read-only
disk for real). Skips the test where mounting is not allowed (needs root with CAP_SYS_ADMIN); fails it
instead under BENCHCAMP_REQUIRE_TMPFS=1 (what .ci/run sets)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import benchcamp_test_services as services  # loaded by tests/conftest.py


@contextmanager
def mounted_tmpfs(parent: Path, size: str) -> Iterator[Path]:
    mnt = parent / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                      capture_output=True, check=False).returncode != 0:
        services.skip_absent("tmpfs", "cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)
