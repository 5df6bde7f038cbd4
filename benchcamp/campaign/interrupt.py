"""SIGTERM as Ctrl-C: the one interruption path of `benchcamp run` and of a sweep step under Airflow."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (timeout, docker stop, Kubernetes, an Airflow task kill) raises KeyboardInterrupt, as
    SIGINT does, so the point in progress stops, keeps its records and says "interrupted".

    Airflow's task runner answers SIGTERM by calling the operator's on_kill (a no-op for @task)
    and SIGKILLs the task 5 s later; without this, a killed sweep ran on until that SIGKILL and
    left only its workers' unmerged files."""
    try:
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
