"""Workloads: the session model, generators, trace importers, token synthesis, stats."""

from benchcamp.workload.model import Request, Session, Workload, read_workload, write_workload

__all__ = ["Request", "Session", "Workload", "read_workload", "write_workload"]
