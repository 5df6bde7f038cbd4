"""Shared by the Airflow tests (a uniquely named module: ``from conftest import`` is ambiguous
when several test folders are collected together)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def copy_airflow_db(template: Path, home: Path) -> None:
    """The template DB into ``home`` by SQLite's online backup: a consistent copy, also over a DB
    file another connection has open. Every Airflow home of the suite starts from one
    `airflow db migrate` (each `airflow` command costs 7-13 s of imports on 2 shared cores)."""
    src, dst = sqlite3.connect(template), sqlite3.connect(home / "airflow.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _texts(value: object) -> list[str]:
    """Every readable form of a stored value: as stored, decoded, decompressed, unpickled."""
    import json
    import pickle
    import zlib

    if value is None:
        return []
    if isinstance(value, memoryview):
        value = value.tobytes()
    if not isinstance(value, bytes):
        out = [str(value)]
        if isinstance(value, str) and value[:1] in "[{\"":
            try:
                out.append(json.dumps(json.loads(value)))  # escaped forms decoded
            except ValueError:
                pass
        return out
    out = [value.decode("utf-8", errors="replace"), value.hex()]
    for decode in (zlib.decompress, pickle.loads):
        try:
            decoded = decode(value)
        except Exception:  # noqa: BLE001  (not that encoding)
            continue
        out += _texts(decoded) if isinstance(decoded, bytes) else [str(decoded)]
    return out


def scan_airflow_db(db: Path, planted: dict[str, str]) -> dict[str, list[str]]:
    """Where each planted secret occurs in EVERY table and column of an Airflow metadata DB (SQLite):
    ``{label: ["table.column", ...]}``, one entry per row and column that holds it."""
    from sqlalchemy import column, create_engine, inspect, select, table

    engine = create_engine(f"sqlite:///{db}")
    found: dict[str, list[str]] = {label: [] for label in planted}
    try:
        with engine.connect() as conn:
            for name in inspect(engine).get_table_names():
                cols = [c["name"] for c in inspect(engine).get_columns(name)]
                t = table(name, *[column(c) for c in cols])
                for row in conn.execute(select(t)):
                    for col, value in zip(cols, row, strict=True):
                        text = "\n".join(_texts(value))
                        for label, secret in planted.items():
                            if secret in text or secret.encode().hex() in text:
                                found[label].append(f"{name}.{col}")
    finally:
        engine.dispose()
    return found


def scan_text(text: str, planted: dict[str, str]) -> dict[str, int]:
    return {label: text.count(secret) for label, secret in planted.items() if secret in text}
