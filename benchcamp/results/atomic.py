"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Write to a temporary file in the same folder, flush and fsync it, then
``os.replace`` it over the destination (atomic on POSIX within one file
system). A failure (disk full, read-only folder) leaves the destination as it
was, removes the temporary file and raises StoreError: one line naming the
folder and the fix (the setting that names the folder: ``setting``), where an
OSError would have been a traceback. ``permissions``: the file's mode (0644 for
results; 0600 for a file that holds a secret, which is never readable by others,
not even while it is written: the temporary file is created 0600).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from benchcamp.errors import StoreError

RESULTS_SETTING = "results.store"  # the folder of most atomic writes: results


@contextmanager
def atomic_open(
    path: str | Path,
    mode: str = "w",
    *,
    permissions: int = 0o644,
    setting: str = RESULTS_SETTING,
    **kwargs: Any,
) -> Iterator[IO[Any]]:
    """``with atomic_open(p) as f: f.write(...)``: ``p`` appears complete, with mode ``permissions``, when the
    block ends; an OSError names ``setting`` (the setting that chose the folder) in its fix."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)  # created 0600
    except OSError as exc:
        raise write_error(path, exc, setting) from None
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, permissions)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(path, exc, setting) from None
        raise


def write_error(path: Path, exc: OSError, setting: str = RESULTS_SETTING) -> StoreError:
    """An OSError while writing, as one line: the folder, the cause, the fix (``setting`` names the folder)."""
    cause = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space there, or set {setting} to a folder with room"
    else:
        fix = f"make it writable, or set {setting} to a writable folder"
    return StoreError(f"cannot write {path.name} in {path.parent}: {cause}; {fix}")


def write_text(path: str | Path, text: str, *, permissions: int = 0o644, setting: str = RESULTS_SETTING) -> Path:
    with atomic_open(path, "w", permissions=permissions, setting=setting, encoding="utf-8") as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def write_json(path: str | Path, data: Any, **dumps_kwargs: Any) -> Path:
    """``data`` as strict JSON (NaN as null: benchcamp.results.jsonsafe), atomically."""
    from benchcamp.results.jsonsafe import dumps

    return write_text(path, dumps(data, **({"indent": 2, "sort_keys": True} | dumps_kwargs)))
