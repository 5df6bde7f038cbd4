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
