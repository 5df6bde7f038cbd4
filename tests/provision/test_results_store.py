"""Results store: a local folder, and s3:// against moto (S3 is unreachable here)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from benchcamp.results.store import LocalStore, S3Store, StoreError, open_store


def _tree(root):
    (root / "c8").mkdir(parents=True)
    (root / "c8" / "records.parquet").write_bytes(b"PAR1data")
    (root / "point.json").write_text('{"label": "c8"}')


def _roundtrip(store, tmp_path):
    src = tmp_path / "src"
    _tree(src)
    store.put_dir(src, "camp/run-1/m0")
    assert store.exists("camp/run-1/m0/point.json")
    out = store.get_dir("camp/run-1/m0", tmp_path / "out")
    assert (out / "c8" / "records.parquet").read_bytes() == b"PAR1data"
    assert (out / "point.json").read_text() == '{"label": "c8"}'
    store.put_file(src / "point.json", "camp/run-1/one.json")
    assert store.get_file("camp/run-1/one.json", tmp_path / "x" / "one.json").read_text() == '{"label": "c8"}'
    with pytest.raises(StoreError, match="nothing"):
        store.get_dir("camp/missing", tmp_path / "nope")


def test_local_store_roundtrip_and_relative_base(tmp_path):
    store = open_store("results", base=tmp_path)
    assert isinstance(store, LocalStore) and store.root == (tmp_path / "results").resolve()
    _roundtrip(store, tmp_path)


def test_moto_s3_store_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        store = open_store("s3://bench/prefix", client=s3)
        assert isinstance(store, S3Store) and store.url("a/b") == "s3://bench/prefix/a/b"
        _roundtrip(store, tmp_path)
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="bench")["Contents"])
        assert "prefix/camp/run-1/m0/c8/records.parquet" in keys


@pytest.mark.parametrize("bad", ["../up", "a//b", "/", ""])
def test_store_rejects_escaping_keys(tmp_path, bad):
    with pytest.raises(StoreError):
        LocalStore(tmp_path).put_file(tmp_path / "f", bad)


def test_store_rejects_unknown_scheme():
    with pytest.raises(StoreError, match="results.store"):
        open_store("gs://bucket")


def _protocol_ops(store, tmp_path):
    from benchcamp.results.store import ResultsStore
    assert isinstance(store, ResultsStore)
    store.put_text("camp/x/errors/sweep.json", '{"message": "boom"}')
    store.put_text("camp/x/errors2/deploy.json", "{}")
    assert store.get_text("camp/x/errors/sweep.json") == '{"message": "boom"}'
    assert store.exists("camp/x/errors") and not store.exists("camp/x/err")  # a key prefix is not a folder
    store.delete("camp/x/errors/sweep.json")
    assert not store.exists("camp/x/errors/sweep.json") and store.exists("camp/x/errors2/deploy.json")
    store.delete("camp/x")
    assert not store.exists("camp/x/errors2/deploy.json")
    with pytest.raises(StoreError, match="no "):
        store.get_text("camp/x/errors/sweep.json")


def test_local_store_put_get_delete_text_and_writes_are_atomic(tmp_path, monkeypatch):
    store = LocalStore(tmp_path / "r")
    _protocol_ops(store, tmp_path)
    assert store.local_path("a/b") == (tmp_path / "r" / "a" / "b").resolve() and store.local_path("") == store.root
    store.put_text("c/summary.json", "old")

    def disk_full(*_a, **_k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("os.fsync", disk_full)
    with pytest.raises(StoreError, match="No space left on device"):   # one line naming the folder and the fix
        store.put_text("c/summary.json", "new and longer")
    assert store.get_text("c/summary.json") == "old"            # never half-written
    assert sorted(p.name for p in (tmp_path / "r" / "c").iterdir()) == ["summary.json"]  # no temp file left


def test_moto_s3_store_put_get_delete_text(tmp_path, monkeypatch):
    """moto stands in for S3 (no AWS is reachable here)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        store = open_store("s3://bench/prefix", client=s3)
        assert store.local_path("a") is None
        _protocol_ops(store, tmp_path)
