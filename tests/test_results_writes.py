"""Disk full / read-only results: every results write is atomic and fails in one line
(StoreError naming the folder and the fix), leaving the previous file whole.

Two ways to make a write fail: a real tiny tmpfs (full, then remounted read-only) when
this process may mount one (root with CAP_SYS_ADMIN); otherwise ``os.replace`` is
monkeypatched to raise the OSError the kernel would (running as root, ``chmod`` cannot
make a folder read-only for us)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchcamp.errors import StoreError
from benchcamp.results import atomic


def _fail_replace(monkeypatch, code: int) -> None:
    def replace(src, dst):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(atomic.os, "replace", replace)


@pytest.mark.parametrize("code, fix", [(errno.ENOSPC, "free space there"), (errno.EROFS, "make it writable")])
def test_a_failed_write_is_one_line_and_keeps_the_old_file(tmp_path, monkeypatch, code, fix):
    summary = tmp_path / "summary.json"
    atomic.write_json(summary, {"headline": 1})
    before = summary.read_text()
    _fail_replace(monkeypatch, code)   # simulated: see the module docstring
    with pytest.raises(StoreError) as err:
        atomic.write_json(summary, {"headline": 2})
    msg = str(err.value)
    assert "\n" not in msg and f"summary.json in {tmp_path}" in msg and fix in msg and "results.store" in msg
    assert summary.read_text() == before                 # never half-written, never 0 bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]   # no temporary file left


@pytest.fixture
def tiny_fs(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "fakes"))
    from tmpfs import mounted_tmpfs  # skips where mounting is not allowed; the simulated test covers it

    with mounted_tmpfs(tmp_path, "128k") as mnt:
        yield mnt


def test_a_full_disk_and_a_read_only_folder_for_real(tiny_fs):
    from benchcamp.results.records import point_lock

    summary = tiny_fs / "summary.json"
    atomic.write_text(summary, "{}")
    filler = tiny_fs / "filler"
    with pytest.raises(OSError), open(filler, "wb") as f:     # fill the file system
        while True:
            f.write(b"\0" * 65536)
    with pytest.raises(StoreError, match="No space left on device; free space there"):
        atomic.write_text(summary, "x" * 200_000)
    assert summary.read_text() == "{}"
    filler.unlink()
    assert subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], capture_output=True, check=False).returncode == 0
    with pytest.raises(StoreError, match="Read-only file system; make it writable"):
        atomic.write_text(summary, "{}")
    with pytest.raises(StoreError, match="Read-only file system"), point_lock(tiny_fs / "c8"):
        pass


def test_a_full_disk_at_the_merge_keeps_the_worker_files_for_recover(tmp_path, monkeypatch):
    """The point's records cannot be merged (disk full): run_point fails in one line and
    the workers' files stay for recover() once there is room again."""
    sys.path.insert(0, str(Path(__file__).parent / "fakes"))
    sys.path.insert(0, str(Path(__file__).parent / "loadgen"))
    from loadgen_support import MODEL, make_workload
    from timed_server import TimedServer

    from benchcamp.loadgen import PointSpec, run_point
    from benchcamp.results.records import leftover_runs, read_records, recover

    real = os.replace

    def replace(src, dst):
        if Path(dst).name == "records.parquet":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))   # simulated full disk
        return real(src, dst)
    monkeypatch.setattr(atomic.os, "replace", replace)
    spec = PointSpec("c2", "closed", 2, warmup_s=0.0, duration_s=0.8, drain_s=2, workers=1)
    with TimedServer(ttft_s=0.01, tpot_s=0.005, model=MODEL) as srv:
        with pytest.raises(StoreError, match="records.parquet in .*No space left on device"):
            run_point(srv.url, None, MODEL, make_workload(4, 2), spec, tmp_path)
        served = len(srv.log)
    assert not (tmp_path / "records.parquet").exists() and len(leftover_runs(tmp_path)) == 1
    monkeypatch.setattr(atomic.os, "replace", real)
    [kept] = recover(tmp_path)
    assert len(read_records(kept)) == served > 0


def test_a_private_file_is_0600_from_its_first_byte_and_its_failure_names_its_own_setting(tmp_path, monkeypatch):
    """A file holding a secret (provider.slurm's env and key files) is never readable by others, not even
    its temporary file while it is written; a failed write names the setting that chose its folder."""
    key = tmp_path / "job.key"
    seen: list[int] = []

    def replace(src, dst):
        seen.append(os.stat(src).st_mode & 0o777)  # the temporary file's mode at the moment it is renamed
        return real(src, dst)

    real = atomic.os.replace
    monkeypatch.setattr(atomic.os, "replace", replace)
    with atomic.atomic_open(key, permissions=0o600, setting="provider.slurm.env_dir") as f:
        assert os.stat(f.name).st_mode & 0o777 == 0o600
        f.write("secret")
    assert seen == [0o600] and key.stat().st_mode & 0o777 == 0o600 and key.read_text() == "secret"
    assert atomic.write_text(tmp_path / "results.txt", "x").stat().st_mode & 0o777 == 0o644  # the default
    _fail_replace(monkeypatch, errno.ENOSPC)
    with pytest.raises(StoreError, match="set provider.slurm.env_dir to a folder with room") as err:
        atomic.write_text(key, "other", permissions=0o600, setting="provider.slurm.env_dir")
    assert "results.store" not in str(err.value) and key.read_text() == "secret"
