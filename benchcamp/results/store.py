"""Where a campaign's results live: a folder or s3://, behind one protocol.

Steps of one execution may run on different workers (Celery, Kubernetes), so
nothing passes through one worker's local disk: each step downloads what it
needs and uploads what it made. Keys are '/'-separated relative paths; which
key holds what is decided by ``benchcamp.campaign.layout.StoreLayout`` only.
Local writes are atomic (temp + rename): a reader sees a whole file or none.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

from benchcamp.errors import StoreError
from benchcamp.results import atomic

__all__ = ["LocalStore", "ResultsStore", "S3Store", "StoreError", "open_store"]


@runtime_checkable
class ResultsStore(Protocol):
    def url(self, key: str) -> str: ...
    def local_path(self, key: str) -> Path | None: ...
    def put_file(self, local: str | Path, key: str) -> None: ...
    def get_file(self, key: str, local: str | Path) -> Path: ...
    def put_dir(self, local: str | Path, key: str) -> None: ...
    def get_dir(self, key: str, local: str | Path) -> Path: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def put_text(self, key: str, text: str) -> None: ...
    def get_text(self, key: str) -> str: ...


def _check_key(key: str) -> str:
    key = key.strip("/")
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise StoreError(f"results key {key!r}: use a relative path like 'campaign/run/c8'")
    return key


class LocalStore:
    """A folder (on shared storage when Airflow workers are on several machines)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def url(self, key: str) -> str:
        return str(self._path(key))

    def local_path(self, key: str) -> Path | None:
        """Where ``key`` lives on this machine ("" = the root): steps measure straight into it."""
        return self._path(key) if key else self.root

    def put_dir(self, local: str | Path, key: str) -> None:
        dst = self._path(key)
        src = Path(local).resolve()
        if src == dst:
            return
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            self.put_file(f, f"{_check_key(key)}/{f.relative_to(src).as_posix()}")

    def get_dir(self, key: str, local: str | Path) -> Path:
        src = self._path(key)
        if not src.is_dir():
            raise StoreError(f"results store: nothing at {src}; did the step that writes it run?")
        if src != Path(local).resolve():
            shutil.copytree(src, local, dirs_exist_ok=True)
        return Path(local)

    def put_file(self, local: str | Path, key: str) -> None:
        dst = self._path(key)
        if Path(local).resolve() == dst:
            return
        with open(local, "rb") as src, atomic.atomic_open(dst, "wb") as out:
            shutil.copyfileobj(src, out)

    def get_file(self, key: str, local: str | Path) -> Path:
        src = self._path(key)
        if not src.is_file():
            raise StoreError(f"results store: no file {src}")
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        if src != Path(local).resolve():
            shutil.copyfile(src, local)
        return Path(local)

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def delete(self, key: str) -> None:
        path = self._path(key)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def put_text(self, key: str, text: str) -> None:
        atomic.write_text(self._path(key), text)

    def get_text(self, key: str) -> str:
        path = self._path(key)
        if not path.is_file():
            raise StoreError(f"results store: no file {path}")
        return path.read_text(encoding="utf-8")


class S3Store:
    """s3://bucket/prefix (boto3's default credentials; the client is made on first use)."""

    def __init__(self, url: str, client: Any = None):
        parsed = urlparse(url)
        if not parsed.netloc:
            raise StoreError(f"results.store={url!r}: expected s3://bucket[/prefix]")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("s3")
        return self._client

    def _k(self, key: str) -> str:
        key = _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._k(key)}"

    def local_path(self, key: str) -> Path | None:
        return None

    def _keys(self, key: str) -> list[str]:
        prefix = self._k(key) + "/"
        out: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            out += [obj["Key"] for obj in page.get("Contents", [])]
        return out

    def put_dir(self, local: str | Path, key: str) -> None:
        local = Path(local)
        for f in sorted(p for p in local.rglob("*") if p.is_file()):
            self.client.upload_file(str(f), self.bucket, f"{self._k(key)}/{f.relative_to(local).as_posix()}")

    def get_dir(self, key: str, local: str | Path) -> Path:
        prefix = self._k(key) + "/"
        keys = self._keys(key)
        if not keys:
            raise StoreError(f"results store: nothing under {self.url(key)}; did the step that writes it run?")
        for k in keys:
            dst = Path(local) / k[len(prefix) :]
            dst.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(self.bucket, k, str(dst))
        return Path(local)

    def put_file(self, local: str | Path, key: str) -> None:
        self.client.upload_file(str(local), self.bucket, self._k(key))

    def get_file(self, key: str, local: str | Path) -> Path:
        from botocore.exceptions import ClientError

        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.client.download_file(self.bucket, self._k(key), str(local))
        except ClientError as exc:
            raise StoreError(
                f"results store: no object {self.url(key)} ({exc.response['Error'].get('Code')})"
            ) from None
        return Path(local)

    def exists(self, key: str) -> bool:
        k = self._k(key)
        resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=k, MaxKeys=2)
        # 'a/b' must not match 'a/bc': the key itself or something under 'a/b/'
        return (
            any(o["Key"] == k or o["Key"].startswith(k + "/") for o in resp.get("Contents", []))
            or self.client.list_objects_v2(Bucket=self.bucket, Prefix=k + "/", MaxKeys=1).get("KeyCount", 0) > 0
        )

    def delete(self, key: str) -> None:
        keys = [self._k(key), *self._keys(key)]
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True}
            )

    def put_text(self, key: str, text: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=text.encode("utf-8"))

    def get_text(self, key: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            return self.get_file(key, Path(tmp) / "f").read_text(encoding="utf-8")


def open_store(location: str, base: str | Path | None = None, client: Any = None) -> LocalStore | S3Store:
    """``results.store`` -> a store; relative folders resolve against ``base`` (default: cwd)."""
    if location.startswith("s3://"):
        return S3Store(location, client=client)
    if "://" in location:
        raise StoreError(f"results.store={location!r}: unsupported scheme; use a folder or s3://bucket/prefix")
    path = Path(location)
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return LocalStore(path)
