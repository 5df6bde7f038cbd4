"""dag.test() of the campaign DAG with the trigger form's Trials per point = 3: the sweep task measures every
point 3 times, interleaved, each trial in its own folder of the results store; summarize, track and the
report carry the point's interval over its trials. Real engine subprocess over loopback HTTP, SQLite MLflow."""

from __future__ import annotations

import json

import pytest
from test_campaign_dag import _run_dir, _states, tiny_conf

from benchcamp.metrics import Metric

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_dag_measures_three_interleaved_trials_per_point(dagbag, tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    conf = tiny_conf(tmp_path) | {"trials": 3, "levels": [2, 3], "duration_s": 2.0}
    dr = dagbag.dags["benchcamp_campaign"].test(run_conf=conf)
    states = _states(dr)
    assert dr.state == "success", states

    run = _run_dir(tmp_path)
    names = [f"{lb}/trial-{k}" for k in (1, 2, 3) for lb in ("c2", "c3")]
    metas = {n: json.loads((run / n / "point.json").read_text()) for n in names}
    assert sorted(names, key=lambda n: metas[n]["epoch_monotonic"]) == names  # c2 c3 c2 c3 c2 c3
    assert all((run / n / "records.parquet").is_file() and (run / n / "summary.json").is_file() for n in names)
    summary = json.loads((run / "summary.json").read_text())
    for doc in summary["points"]:
        block = doc["trials"]
        trial_values = [
            json.loads((run / doc["point"] / t["folder"] / "summary.json").read_text())[Metric.THROUGHPUT_PER_GPU]
            for t in block["trials"]
        ]
        assert block["figures"][Metric.THROUGHPUT_PER_GPU]["values"] == trial_values
        assert doc[Metric.THROUGHPUT_PER_GPU] == pytest.approx(sum(trial_values) / 3)

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    children = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
                if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["benchcamp.point"] for r in children) == ["c2", "c3"]
    for r in children:
        steps = client.get_metric_history(r.info.run_id, f"trial/{Metric.P90_USER_RATE}")
        assert sorted(m.step for m in steps) == [1, 2, 3]
        assert f"ci_high/{Metric.TTFT_P90}" in r.data.metrics
    assert "<h3>Trials</h3>" in (run / "report" / "dagtest" / "index.html").read_text()
