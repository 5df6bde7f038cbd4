"""Execution ids and the store layout: every location of an execution has one name."""

from __future__ import annotations

import datetime as dt
import re

from benchcamp.campaign import Step, StoreLayout, new_execution_id


def test_execution_ids_are_unique_within_one_microsecond_and_say_when():
    now = dt.datetime(2026, 11, 30, 6, 15, 2, 123456, tzinfo=dt.UTC)
    ids = {new_execution_id("smoke", now) for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"smoke-20261130T061502\.123456Z-[0-9a-f]{6}", i) for i in ids)


def test_layout_names_every_location_of_an_execution():
    lay = StoreLayout.for_execution("smoke", "smoke-1")
    assert (lay.execution, lay.campaign_json, lay.summary_json, lay.engine_log) == (
        "smoke/smoke-1", "smoke/smoke-1/campaign.json", "smoke/smoke-1/summary.json", "smoke/smoke-1/engine.log")
    assert lay.point("c8") == "smoke/smoke-1/c8" and lay.records("c8") == "smoke/smoke-1/c8/records.parquet"
    assert lay.point_json("c8") == "smoke/smoke-1/c8/point.json" and lay.error(Step.SWEEP) == "smoke/smoke-1/errors/sweep.json"
    assert lay.verdicts == "smoke/smoke-1/report/verdicts.json" and lay.latest == "smoke/latest"
    assert StoreLayout.workload("abc") == "workloads/abc.parquet"
    assert StoreLayout.from_dict(lay.to_dict()) == lay
    here = StoreLayout("smoke", "smoke-1")  # bench run --out DIR: the execution is the store's root
    assert here.summary_json == "summary.json" and here.point("c8") == "c8" and here.latest is None
