"""What an execution concludes: summarize (the CampaignResult and its headline), track (MLflow), evaluate
(verdicts and report) and judge (the exit code)."""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchcamp.campaign import kinds
from benchcamp.campaign.execution import (
    BEFORE_SUMMARY,
    fetch_execution,
    point_labels,
    recorded,
    recorded_errors,
    workdir,
    workload_file,
)
from benchcamp.campaign.handoff import Evaluation, Judgement, Summary, WorkloadRef
from benchcamp.campaign.kinds import Status, Step
from benchcamp.campaign.layout import StoreLayout
from benchcamp.campaign.result import (
    CampaignResult,
    point_summary_doc,
    summarize_point,
    utcnow,
    write_campaign_files,
)
from benchcamp.config import Config
from benchcamp.errors import ExitCode
from benchcamp.results import atomic
from benchcamp.results.jsonsafe import dumps, strict_json
from benchcamp.results.outcome import PointOutcome
from benchcamp.results.store import ResultsStore
from benchcamp.secrets import redaction

if TYPE_CHECKING:
    from benchcamp.verdicts.compare import Verdict

log = logging.getLogger(__name__)


def summarize(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    workload: WorkloadRef | None,
    started_at: str,
    interrupted: bool = False,
    endpoint: str = "",
) -> Summary:
    """THE place that assembles the CampaignResult and picks the headline: every point in the
    store (measured before any failure included), recorded step errors, points not measured,
    and the status. Writes campaign.json and summary.json; points ``latest`` at this execution."""
    from benchcamp.metrics import pick_headline

    stats = workload.stats if workload is not None else {}
    with workdir("summary") as tmp:
        if cfg.load.shards > 1:
            merge_shards(cfg, store, layout, tmp / "shards")
        here = fetch_execution(cfg, store, layout, tmp)
        labels = point_labels(cfg, store, layout)
        capacity = json.loads(store.get_text(layout.capacity)) if store.exists(layout.capacity) else None
        if cfg.load.mode == "capacity" and capacity is None and not recorded_errors(store, layout, BEFORE_SUMMARY):
            labels = ["capacity search"]  # reported as not measured
        theoretical = workload.theoretical_hit_rate if workload is not None else None
        outcomes, missing = _point_outcomes(cfg, here, labels, theoretical)
        recorded = recorded_errors(store, layout, BEFORE_SUMMARY)
        aborted = [f"point {p.label}: {p.aborted}" for p in outcomes if p.aborted]
        errors = recorded + [a for a in aborted if not any(a.split(": ", 1)[-1] in r for r in recorded)]
        if missing:
            errors.append(f"not measured: {', '.join(missing)}")
        headline = (
            pick_headline([p.summary | {"valid": p.valid, "point": p.label} for p in outcomes], cfg.slo)
            if outcomes
            else {}
        )
        if interrupted:
            status = Status.INTERRUPTED
        elif errors:
            status = Status.FAILED
        elif not any(p.valid for p in outcomes):
            status = Status.NO_VALID_POINT
            errors.append("no valid point: " + "; ".join(f"{p.label}: {', '.join(p.reasons)}" for p in outcomes))
        else:
            status = Status.OK
        engine_log = here / "engine.log"
        result = CampaignResult(
            execution_id=layout.execution_id,
            config=cfg,
            fingerprint=cfg.fingerprint(),
            workload_path=Path(workload.path if workload is not None and workload.path else cfg.workload.data),
            workload_digest=workload.digest if workload is not None else "",
            points=outcomes,
            results_dir=here,
            headline=headline,
            started_at=started_at,
            finished_at=utcnow(),
            engine_log=engine_log if engine_log.exists() else None,
            workload_stats=stats,
            error="; ".join(errors) or None,
            endpoint=endpoint,
            status=status.value,
            interrupted=interrupted,
            missing_points=missing,
            capacity=capacity,
        )
        write_campaign_files(result)
        if store.local_path(layout.execution) is None:
            store.put_file(here / "campaign.json", layout.campaign_json)
            store.put_file(here / "summary.json", layout.summary_json)
            for p in outcomes:
                store.put_file(p.folder / "summary.json", f"{layout.point(p.label)}/summary.json")
                for t in p.trials.trials if p.trials is not None else ():
                    store.put_file(
                        p.folder / t.folder / "summary.json", f"{layout.point(p.label)}/{t.folder}/summary.json"
                    )
        if layout.latest:
            store.put_text(layout.latest, layout.execution.rsplit("/", 1)[-1])
    return Summary(
        status=status,
        error=result.error,
        headline=result.headline,
        points=tuple(p.label for p in outcomes),
        missing_points=tuple(missing),
        interrupted=interrupted,
    )


def _point_outcomes(
    cfg: Config, here: Path, labels: list[str], theoretical_hit_rate: float | None
) -> tuple[list[PointOutcome], list[str]]:
    """The measured points under ``here`` and what was not measured (a point, or with load.trials > 1 a trial:
    ``c8/trial-3``). A point of trials is their combination (benchcamp.results.outcome.combine_trials); each
    trial's own summary.json goes beside its records first."""
    from benchcamp.loadgen import PointResult
    from benchcamp.results.outcome import combine_trials
    from benchcamp.results.trials import trial_name

    outcomes: list[PointOutcome] = []
    missing: list[str] = []
    for lb in labels:
        if cfg.load.trials <= 1:
            if (here / lb / "point.json").exists():
                outcomes.append(summarize_point(cfg, PointResult.load(here / lb), theoretical_hit_rate))
            else:
                missing.append(lb)
            continue
        trials = []
        for k in range(1, cfg.load.trials + 1):
            folder = here / lb / trial_name(k)
            if not (folder / "point.json").exists():
                missing.append(f"{lb}/{trial_name(k)}")
                continue
            trial = summarize_point(cfg, PointResult.load(folder), theoretical_hit_rate)
            atomic.write_json(folder / "summary.json", strict_json(point_summary_doc(trial)))
            trials.append((k, trial))
        if trials:
            outcomes.append(combine_trials(trials, cfg.load.trials, cfg.regression.confidence))
    return outcomes, missing


def merge_shards(cfg: Config, store: ResultsStore, layout: StoreLayout, tmp: Path) -> list[str]:
    """Every point its load-generator shards measured, merged into the point's records.parquet and point.json
    (benchcamp.loadgen.shards.merge_shard_points); a point merged already is left as it is. Returns the labels
    merged. A shard that wrote no result makes its point incomplete; its flushed records are merged all the same."""
    from benchcamp.loadgen import PointSpec, point_label
    from benchcamp.loadgen.shards import merge_shard_points

    merged = []
    for level in cfg.load.levels:
        label = point_label(cfg.load.mode, level)
        shards = [layout.shard(label, k) for k in range(cfg.load.shards)]
        if store.exists(layout.point_json(label)) or not any(store.exists(k) for k in shards):
            continue
        local = store.local_path(layout.point(label))
        folder = local if local is not None else store.get_dir(layout.point(label), tmp / label)
        spec = PointSpec.from_load(cfg.load, level, layout.execution_id)
        doc = merge_shard_points(
            [folder / f"shard-{k}" for k in range(cfg.load.shards)],
            folder,
            label,
            spec.level,
            (spec.warmup_s, spec.window_end_s),
        )
        if local is None:
            store.put_file(folder / "records.parquet", layout.records(label))
            store.put_file(folder / "point.json", layout.point_json(label))
        log.info(
            "point %s: %d shards merged, %d records%s",
            label,
            cfg.load.shards,
            doc["requests"],
            f" ({doc['aborted']})" if doc["aborted"] else "",
        )
        merged.append(label)
    return merged


def load_campaign(cfg: Config, store: ResultsStore, layout: StoreLayout, tmp: Path) -> CampaignResult:
    """The CampaignResult written by :func:`summarize`, with its files on this machine (under ``tmp``)."""
    here = fetch_execution(cfg, store, layout, tmp)
    return CampaignResult.load(here)


def track(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    airflow: dict[str, str] | None = None,
    last_attempt: bool = False,
) -> str | None:
    """MLflow: a parent run per execution, a child run per point (idempotent per execution id).

    A failure is recorded in the store; on the ``last_attempt`` it is not raised (None): evaluate
    still renders the report against the published baselines and the verdict fails naming it,
    as `benchcamp run` does. An Airflow task raises on earlier attempts, to be retried."""
    try:
        return _track(cfg, store, layout, airflow)
    except Exception as exc:
        if not last_attempt:
            raise
        log.error("not tracked: %s", redaction.redact(str(exc)))
        return None


def _track(cfg: Config, store: ResultsStore, layout: StoreLayout, airflow: dict[str, str] | None) -> str:
    from benchcamp.tracking import log_campaign

    with recorded(store, layout, Step.TRACK), workdir("track") as tmp:
        campaign = load_campaign(cfg, store, layout, tmp)
        workload = None
        key = layout.workload(campaign.workload_digest) if campaign.workload_digest else None
        if not Path(campaign.workload_path).is_file() and key and store.exists(key):
            # built on another worker: the dataset comes from the store's copy, named by its URL
            workload = (workload_file(store, key, "", tmp), store.url(key))
        run_id = str(log_campaign(campaign.config, campaign, airflow=airflow, workload=workload))
        if cfg.tracking.benchmark_report:
            export_benchmark_reports(campaign, store, layout, tmp / "benchmark_report", run_id)
    log.info("%s", mlflow_location(cfg, run_id))
    return run_id


def mlflow_location(cfg: Config, run_id: str) -> str:
    """Where the campaign's MLflow run is, one line: run id, experiment, tracking URI (no password), and the
    run's page: a link where the URI is a server, else the `mlflow ui` command that serves the store."""
    from benchcamp.tracking.store import client, describe_uri

    uri = cfg.tracking.mlflow_uri
    try:
        exp = client(uri).get_run(run_id).info.experiment_id
    except Exception as exc:  # noqa: BLE001  (the line is a pointer; the run exists, tracking said so)
        return (
            f"MLflow: run {run_id} in experiment {cfg.experiment_name!r} at {describe_uri(uri)} ({type(exc).__name__})"
        )
    page = f"#/experiments/{exp}/runs/{run_id}"
    where = (
        f"open {describe_uri(uri).rstrip('/')}/{page}"
        if uri.startswith(("http://", "https://"))
        else f"see it with `mlflow ui --backend-store-uri {describe_uri(uri)}`, then {page}"
    )
    return f"MLflow: run {run_id} in experiment {cfg.experiment_name!r} (id {exp}) at {describe_uri(uri)}; {where}"


def export_benchmark_reports(
    campaign: CampaignResult, store: ResultsStore, layout: StoreLayout, out: Path, run_id: str | None
) -> list[Path]:
    """Each point as llm-d's Benchmark Report v0.2.1 (benchcamp.interop.br_export) into the execution's
    ``benchmark_report/`` in the store and, when tracked, the campaign run's artifacts."""
    from benchcamp.interop.br_export import RunPointer, execution_of, write_reports

    uri = campaign.config.tracking.mlflow_uri
    files = write_reports(
        campaign.config, execution_of(campaign), campaign.points, out, RunPointer(uri, run_id) if run_id else None
    )
    if files:
        store.put_dir(out, layout.benchmark_reports)
    if run_id and files:
        from benchcamp.tracking.store import client

        client(uri).log_artifacts(run_id, str(out), "benchmark_report")
    return files


def evaluate(
    cfg: Config,
    store: ResultsStore,
    layout: StoreLayout,
    run_id: str | None,
    reports: str | Path | None = None,
    track: bool = True,
) -> Evaluation:
    """Compare with the baselines and render the report (benchcamp.report.flow.finish) into the
    execution's report folder in the store (each execution owns its report), verdicts.json next
    to it; ``reports``: also publish it there (the latest rendered: `benchcamp run --reports`)."""
    from benchcamp.report.flow import TREND_PAGE, finish

    with workdir("evaluate") as tmp:
        campaign = load_campaign(cfg, store, layout, tmp)
        out = tmp / "report"
        outcome = finish(campaign.config, campaign, out, run_id=run_id, track=track and run_id is not None)
        store.put_dir(out, layout.report)
        assert outcome.report is not None  # finish always renders
        page = outcome.report.relative_to(out)
        if reports:
            publish_report(out, Path(reports))
        report = str(Path(reports) / page) if reports else store.url(f"{layout.report}/{page.as_posix()}")
        doc = {
            kinds.VERDICTS: [v.to_dict() for v in outcome.verdicts],
            kinds.REGRESSED: outcome.regressed,
            "notes": outcome.notes,
            "report": report,
        }
        trend = page.parent / TREND_PAGE
        if (out / trend).is_file():  # the nightly series' page (benchcamp.report.trend), beside the report
            doc["trend"] = str(Path(reports) / trend) if reports else store.url(f"{layout.report}/{trend.as_posix()}")
        store.put_text(layout.verdicts, dumps(doc, indent=2))
    return Evaluation(
        regressed=outcome.regressed,
        verdict_count=len(outcome.verdicts),
        notes=tuple(outcome.notes),
        report=report,
        mlflow_run_id=run_id,
    )


def publish_report(rendered: Path, reports: Path) -> None:
    """Copy a rendered report over ``reports`` whole, one run at a time (a lock file there): two
    runs at once never leave one's page with the other's data; the last to finish is shown."""
    import fcntl

    reports.mkdir(parents=True, exist_ok=True)
    with open(reports / ".benchcamp-publish.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.copytree(rendered, reports, dirs_exist_ok=True)


def judge(
    summary: Summary,
    verdicts: Sequence[Verdict] | None,
    fail_on_regression: bool = True,
    need_verdicts: bool = False,
    trend: str | None = None,
) -> tuple[ExitCode, list[str]]:
    """One outcome table for the CLI and the DAG: (exit code, problems). ``verdicts``: the comparison's (None:
    not evaluated); ``trend``: the nightly series' page, named beside a regression."""
    problems: list[str] = []
    status = summary.status
    if summary.error:
        problems.append(summary.error)
    elif status is not Status.OK:
        problems.append(status.value)
    if status is not Status.OK:
        return status.exit_code, problems
    # a regression the nightly guard alarmed on an earlier night is not failed on again (said once)
    regressed = [v for v in verdicts or () if v.verdict == "regressed" and v.alarm != "open"]
    if regressed and fail_on_regression:
        problems.append("REGRESSION in " + ", ".join(_regression_words(v) for v in regressed))
        if trend:
            problems.append(f"trend: {trend}")
        return ExitCode.REGRESSION, problems
    if need_verdicts and verdicts is None:
        problems.append("not evaluated (see the evaluate step's log)")
        return ExitCode.FAILED, problems
    return ExitCode.OK, problems


def _regression_words(v: Verdict) -> str:
    """metric, size, interval, the night it began and the diff across it (what the notification says)."""
    delta = v.delta_rel
    words = f"{v.metric} {delta:+.1%}" if isinstance(delta, float) and math.isfinite(delta) else str(v.metric)
    lo, hi = v.ci_low, v.ci_high
    if isinstance(lo, float) and isinstance(hi, float) and math.isfinite(lo) and math.isfinite(hi):
        words += f" [95% CI {lo:+.1%}, {hi:+.1%}]"
    words += f" vs {v.baseline}"
    if v.began:
        diff = "; ".join(f"{k} {a or '-'} -> {b or '-'}" for k, (a, b) in (v.diff or {}).items())
        words += f", began on night {v.began} ({diff or 'no configuration change across it'})"
    return words


def judge_stored(store: ResultsStore, layout: StoreLayout) -> tuple[list[str], Judgement]:
    """:func:`judge` of an execution from what the store holds (the DAG's verdict): (problems, judgement)."""
    from benchcamp.verdicts.compare import Verdict

    if not store.exists(layout.summary_json):
        return [f"no results at {store.url(layout.summary_json)}"], Judgement(ExitCode.FAILED)
    summary = Summary.from_dict(json.loads(store.get_text(layout.summary_json)))
    stored = json.loads(store.get_text(layout.verdicts)) if store.exists(layout.verdicts) else None
    verdicts = None if stored is None else [Verdict.from_dict(v) for v in stored.get(kinds.VERDICTS) or []]
    trend = None if stored is None else stored.get("trend")
    code, problems = judge(summary, verdicts, need_verdicts=True, trend=trend)
    untracked = recorded_errors(store, layout, only=(Step.TRACK,))
    if untracked:
        problems.insert(0, f"{untracked[0]} (results kept at {store.url(layout.execution)}: rerun the track task)")
        code = code if code != ExitCode.OK else ExitCode.FAILED
    return problems, Judgement(code, status=summary.status.value, headline=summary.headline)


def verdict_lines(store: ResultsStore, layout: StoreLayout) -> list[str]:
    """The execution's verdicts as a readable table, its notes and the report's location (the DAG's
    verdict task logs them); empty when evaluate stored none."""
    from benchcamp.verdicts.compare import Verdict, format_table

    if not store.exists(layout.verdicts):
        return []
    doc = json.loads(store.get_text(layout.verdicts))
    lines = [f"note: {n}" for n in doc.get("notes") or []]
    if doc.get(kinds.VERDICTS):
        lines += format_table([Verdict.from_dict(v) for v in doc[kinds.VERDICTS]]).splitlines()
    if doc.get("report"):
        lines.append(f"report: {doc['report']}")
    if doc.get("trend"):
        lines.append(f"trend: {doc['trend']}")
    return lines
