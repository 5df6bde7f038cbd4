"""Synthetic campaigns for the tracking and report tests: real records files,
real summaries (benchcamp.metrics.summarize), a real workload file. Only the
measurements are synthetic (a seeded latency model), not the code under test."""

from __future__ import annotations

import datetime as dt
import itertools
import math
from pathlib import Path

import numpy as np

from benchcamp.campaign import CampaignResult, PointOutcome, write_campaign_files
from benchcamp.config import Config, load_config
from benchcamp.metrics import pick_headline, summarize, validity
from benchcamp.pricing import prices_for
from benchcamp.results.records import empty_record, write_records
from benchcamp.workload.model import Request, Session, Workload, write_workload

_clock = itertools.count()


def migrated_template(root: Path) -> Path:
    """An empty MLflow SQLite store with its schema in ``root``, made once per test run and
    copied by each test: creating the schema runs every alembic migration (tens of
    seconds on a busy machine). A copy is exactly the store a fresh `mlflow` makes."""
    from benchcamp.tracking.store import client

    db = root / "mlflow.db"
    client(f"sqlite:///{db}").search_experiments()
    return db


def make_workload(path: Path, name: str = "agentic-coding", sessions: int = 6, seed: int = 1) -> str:
    rng = np.random.default_rng(seed)
    ss = []
    for i in range(sessions):
        reqs = [Request(t, tuple(range(i * 100, i * 100 + 4 + t)), 64 + 16 * t, int(rng.integers(20, 60)), 0.5)
                for t in range(3)]
        ss.append(Session(f"s{i}", reqs))
    return write_workload(Workload(name, 16, 32000, ss, {"seed": seed}), path)


def point_records(label: str, level: float, n: int, rng, tpot_scale: float = 1.0, errors: int = 0):
    recs = []
    for i in range(n):
        sent = 1.0 + 30.0 * i / n
        ttft = float(rng.gamma(4, 0.05)) * (1 + level / 32)
        tpot = float(rng.gamma(9, 0.002)) * (1 + level / 16) * tpot_scale
        out = int(rng.integers(50, 200))
        failed = i < errors
        first = sent + ttft
        recs.append(empty_record(
            point=label, session_id=f"s{i % 8}", turn=i // 8, scheduled_s=sent, sent_s=sent,
            first_token_s=math.nan if failed else first,
            last_token_s=math.nan if failed else first + tpot * (out - 1),
            done_s=first + tpot * out, chunks=0 if failed else out, itl_s=[] if failed else [tpot] * 4,
            prompt_tokens=-1 if failed else 2000, cached_tokens=0 if failed else 1500,
            completion_tokens=-1 if failed else out, expected_prompt_tokens=2000, expected_output_tokens=out,
            status=500 if failed else 200, error="boom" if failed else None))
    return recs


def make_campaign(tmp: Path, cfg: Config | None = None, execution_id: str = "exec-1",
                  levels=(8, 32), seed: int = 0, tpot_scale: float = 1.0, error: str | None = None,
                  invalid_point: str | None = None, engine_log_text: str | None = None) -> CampaignResult:
    cfg = cfg or load_config(None, {"load.levels": list(levels), "load.min_requests": 5,
                                    "tracking.mlflow_uri": f"sqlite:///{tmp}/mlflow.db"})
    rng = np.random.default_rng(seed)
    wl = tmp / "workload.parquet"
    digest = make_workload(wl) if not wl.exists() else None
    if digest is None:
        from benchcamp.workload.model import read_workload
        digest = read_workload(wl).digest
    results = tmp / "results" / execution_id
    points = []
    for lv in levels:
        label = f"c{int(lv)}"
        path = results / label / "records.parquet"
        write_records(point_records(label, lv, 60, rng, tpot_scale), path)
        from benchcamp.results.records import read_records
        summary = summarize(read_records(path), (0.5, 32.0), cfg.hardware.gpu_count, prices_for(cfg.pricing),
                            cfg.hardware.usd_per_gpu_hour, cfg.slo, theoretical_hit_rate=0.8,
                            server_delta={"vllm:prefix_cache_queries": 1000.0, "vllm:prefix_cache_hits": 700.0})
        v = validity(summary, {}, cfg.load)
        valid = bool(v["valid"]) and label != invalid_point
        reasons = list(v["reasons"]) + (["client CPU saturated (synthetic)"] if label == invalid_point else [])
        points.append(PointOutcome(label, float(lv), summary, path, valid, reasons, window=(0.5, 32.0)))
    engine_log = None
    if engine_log_text is not None:
        engine_log = results / "engine.log"
        engine_log.write_text(engine_log_text)
    # every campaign starts a minute after the previous one: "latest" is well defined
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=next(_clock))
    headline = pick_headline([p.summary | {"valid": p.valid, "point": p.label} for p in points], cfg.slo)
    result = CampaignResult(execution_id, cfg, cfg.fingerprint(), wl, digest, points, results, headline,
                            start.isoformat(), (start + dt.timedelta(seconds=50)).isoformat(), engine_log,
                            {"sessions": 6, "theoretical_hit_rate": 0.8}, error)
    write_campaign_files(result)
    return result
