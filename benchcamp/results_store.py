"""Where a campaign's results live between Airflow tasks: a folder or s3://.

Tasks of one run may execute on different workers (Celery, Kubernetes), so
nothing passes through one worker's local disk: each task downloads what it
needs and uploads what it made. Keys are '/'-separated relative paths.
"""

from __future__ import annotations

from benchcamp.errors import StoreError  # noqa: F401  (re-exported)

import shutil
from pathlib import Path
from urllib.parse import urlparse




def _check_key(key: str) -> str:
    key = key.strip("/")
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise StoreError(f"results key {key!r}: use a relative path like 'campaign/run/c8'")
    return key


class LocalStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def url(self, key: str) -> str:
        return str(self.root / _check_key(key))

    def put_dir(self, local: str | Path, key: str) -> None:
        dst = self.root / _check_key(key)
        if Path(local).resolve() == dst:
            return
        shutil.copytree(local, dst, dirs_exist_ok=True)

    def get_dir(self, key: str, local: str | Path) -> Path:
        src = self.root / _check_key(key)
        if not src.is_dir():
            raise StoreError(f"results store: nothing at {src}; did the task that writes it run?")
        shutil.copytree(src, local, dirs_exist_ok=True)
        return Path(local)

    def put_file(self, local: str | Path, key: str) -> None:
        dst = self.root / _check_key(key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dst)

    def get_file(self, key: str, local: str | Path) -> Path:
        src = self.root / _check_key(key)
        if not src.is_file():
            raise StoreError(f"results store: no file {src}")
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, local)
        return Path(local)

    def exists(self, key: str) -> bool:
        return (self.root / _check_key(key)).exists()


class S3Store:
    def __init__(self, url: str, client=None):
        parsed = urlparse(url)
        if not parsed.netloc:
            raise StoreError(f"results.store={url!r}: expected s3://bucket[/prefix]")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self._client = client

    @property
    def client(self):
        if self._client is None:
            import boto3
            self._client = boto3.client("s3")
        return self._client

    def _k(self, key: str) -> str:
        key = _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._k(key)}"

    def put_dir(self, local: str | Path, key: str) -> None:
        local = Path(local)
        for f in sorted(p for p in local.rglob("*") if p.is_file()):
            self.client.upload_file(str(f), self.bucket, f"{self._k(key)}/{f.relative_to(local).as_posix()}")

    def get_dir(self, key: str, local: str | Path) -> Path:
        prefix = self._k(key) + "/"
        n = 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                dst = Path(local) / obj["Key"][len(prefix):]
                dst.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(self.bucket, obj["Key"], str(dst))
                n += 1
        if not n:
            raise StoreError(f"results store: nothing under {self.url(key)}; did the task that writes it run?")
        return Path(local)

    def put_file(self, local: str | Path, key: str) -> None:
        self.client.upload_file(str(local), self.bucket, self._k(key))

    def get_file(self, key: str, local: str | Path) -> Path:
        from botocore.exceptions import ClientError
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.client.download_file(self.bucket, self._k(key), str(local))
        except ClientError as exc:
            raise StoreError(f"results store: no object {self.url(key)} ({exc.response['Error'].get('Code')})") from None
        return Path(local)

    def exists(self, key: str) -> bool:
        resp = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self._k(key), MaxKeys=1)
        return resp.get("KeyCount", 0) > 0


def open_store(location: str, base: str | Path | None = None, client=None) -> LocalStore | S3Store:
    """``results.store`` -> a store; relative folders resolve against ``base`` (default: cwd)."""
    if location.startswith("s3://"):
        return S3Store(location, client=client)
    if "://" in location:
        raise StoreError(f"results.store={location!r}: unsupported scheme; use a folder or s3://bucket/prefix")
    path = Path(location)
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return LocalStore(path)
