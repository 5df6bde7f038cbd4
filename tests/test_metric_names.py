"""One spelling of the summary keys (benchcamp.metrics.Metric) and of the capacity tiers'
bounds (benchcamp.planning.capacity.TierField), shared by the writer and every reader, without
changing a byte of what is stored: summary.json, MLflow metric names, YAML."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import yaml

from benchcamp.config import DEFAULT_TIERS, CapacityTier
from benchcamp.metrics import METRICS_WHEN_REPORTED, Metric, power_metrics, summarize
from benchcamp.planning.capacity import Probe, Tier, TierCapacity, TierField
from benchcamp.pricing import PricingProfile
from benchcamp.results.records import empty_record, read_records, write_records

ROOT = Path(__file__).resolve().parents[1]
# the writer and the readers of summaries and capacity results
MODULES = [
    "benchcamp/metrics.py",
    "benchcamp/verdicts/compare.py",
    "benchcamp/planning/capacity.py",
    "benchcamp/results/table.py",
    "benchcamp/report/render.py",
    "benchcamp/report/plots.py",
    "benchcamp/report/capacity.py",
    "benchcamp/commands/plan.py",
    "benchcamp/planning/planner.py",
]


def _request(sent: float, cpu_cached: int | None) -> dict:
    return empty_record(scheduled_s=sent, sent_s=sent, first_token_s=sent + 0.2, last_token_s=sent + 1.2,
                        done_s=sent + 1.2, chunks=11, itl_s=[0.1] * 10, prompt_tokens=1000, cached_tokens=600,
                        cpu_cached_tokens=cpu_cached, completion_tokens=11, status=200)


def _summary(tmp_path: Path, cpu_cached: int | None) -> dict:
    write_records([_request(10.0 + i, cpu_cached) for i in range(8)], tmp_path / "records.parquet")
    return summarize(read_records(tmp_path / "records.parquet"), window=(10.0, 20.0), gpus=2,
                     prices=PricingProfile("hand", cached_input=1.0, uncached_input=2.0, output=10.0),
                     usd_per_gpu_hour=3.0, slo={"ttft_s": 1.0, "tpot_s": 0.2},
                     server_delta={"vllm:prefix_cache_hits_total": 5, "vllm:prefix_cache_queries_total": 10},
                     theoretical_hit_rate=0.5)


def test_summarize_writes_every_metric_and_only_the_reported_ones_may_be_missing(tmp_path):
    assert set(Metric) <= set(_summary(tmp_path, cpu_cached=200))
    # without a CPU KV tier in the server's usage, its share is absent (not 0), and nothing else
    assert set(Metric) - set(_summary(tmp_path, cpu_cached=None)) == METRICS_WHEN_REPORTED


def test_summary_keys_are_plain_strings_so_every_sink_stores_the_same_bytes(tmp_path):
    summary = _summary(tmp_path, cpu_cached=200)
    power = power_metrics(summary, board_power_w=700.0, node_overhead_factor=1.2)
    for doc in (summary, power):
        assert {type(k) for k in doc} == {str}
        assert json.dumps(doc, sort_keys=True) == json.dumps({str(k): v for k, v in doc.items()}, sort_keys=True)
        assert yaml.safe_load(yaml.safe_dump(doc)).keys() == doc.keys()  # PyYAML refuses an enum key
    assert '"ttft_p90_s": ' in json.dumps(summary, indent=2)
    # a summary read back from JSON is found by Metric as the written one is
    loaded = json.loads(json.dumps(summary))
    assert loaded[Metric.TTFT_P90] == summary[Metric.TTFT_P90] == summary["ttft_p90_s"]


def _literals(path: Path) -> list[tuple[int, str]]:
    """String constants (f-string parts included) outside docstrings and outside the enums that define them."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in ("Metric", "TierField"):
            skip |= {id(n) for n in ast.walk(node)}
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            skip.add(id(body[0].value))  # docstring
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


# words shown to people that happen to be a key's spelling
TITLES = {("benchcamp/report/render.py", "requests")}  # the points table's column title


def test_the_writer_and_readers_spell_no_metric_or_tier_bound_as_a_string():
    names = {m.value for m in Metric} | {t.value for t in TierField}
    found = [f"{m}:{line}: {text!r}" for m in MODULES for line, text in _literals(ROOT / m)
             if text in names and (m, text) not in TITLES]
    assert not found, "use benchcamp.metrics.Metric / benchcamp.planning.capacity.TierField:\n" + "\n".join(found)


def test_tier_bounds_and_the_capacity_fields_readers_index_are_spelled_as_the_enums():
    bounds = {t.value for t in TierField}
    assert bounds <= set(CapacityTier.model_fields)
    assert all(bounds <= set(t) for t in DEFAULT_TIERS)
    fields = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
    assert bounds <= fields(Tier) and bounds <= fields(TierCapacity)
    probe = {Metric.P90_USER_RATE, Metric.TTFT_P90, Metric.THROUGHPUT_PER_GPU}
    assert probe <= fields(Probe)
    assert probe | {Metric.REVENUE_PER_GPU_HOUR, Metric.COST_PER_GPU_HOUR, Metric.MARGIN_PER_GPU_HOUR,
                    Metric.COST_PER_MTOK} <= fields(TierCapacity)


def test_campaign_kinds_re_exports_metric_without_loading_the_writer_until_used():
    code = (
        "import sys\n"
        "import benchcamp.campaign, benchcamp.campaign.kinds as kinds\n"
        "assert 'benchcamp.metrics' not in sys.modules and 'pandas' not in sys.modules\n"
        "from benchcamp.campaign import Metric as A\n"
        "from benchcamp.campaign.kinds import Metric as B\n"
        "import benchcamp.metrics\n"
        "assert A is B is benchcamp.metrics.Metric\n"
        "try:\n"
        "    kinds.Metrik\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise AssertionError('kinds.Metrik resolved')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
