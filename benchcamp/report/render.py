"""The campaign report: one self-contained HTML page (figures embedded as
base64 PNG, no external JS/CSS), ``metrics.json`` and plot data for DVC.

    reports/<campaign>/index.html     the page (+ figures/*.png, the same images)
    reports/metrics.json              headline + per point (``dvc metrics``)
    reports/plots/*.csv               Pareto, latency CDF, sweep data (``dvc plots``)

Every text that reaches the page is HTML-escaped; the config shown is scrubbed
of secrets.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
import shlex
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

from benchcamp.metrics import COLUMNS, HEADLINE, PRICE_BASIS_SPLIT, Metric, pareto_frontier
from benchcamp.results.table import cell, replica_hit_rates
from benchcamp.secrets.redaction import scrub

if TYPE_CHECKING:
    from benchcamp.config import Config

CARDS = (
    Metric.THROUGHPUT_PER_GPU,
    Metric.P90_USER_RATE,
    Metric.REVENUE_PER_GPU_HOUR,
    Metric.TTFT_P90,
    Metric.ERROR_RATE,
)
CDF_QUANTILES = 101  # rows per point and metric in latency_cdf.csv
_e = html.escape


def _expected_error_html(cfg: Config, headline: dict[str, Any]) -> str:
    """The simulated headline's figures with the validation set's error on the nearest validated configurations
    (``benchcamp.sim.fidelity``), or the phases' errors alone when there is no headline."""
    from benchcamp.sim import fidelity

    errors = fidelity.for_config(cfg)
    if errors is None:
        return ""
    lines = fidelity.headline_lines(headline, errors) or [f"{phase}: {e.words()}" for phase, e in errors.items()]
    return (
        " <b>Expected error</b> (bench/fidelity/replay.py's validation set, never fitted; "
        '<code>benchcamp/data/sim_error.json</code>):<ul class="sim-error">'
        + "".join(f"<li>{_e(line)}</li>" for line in lines)
        + "</ul>"
    )


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _fmt(metric: str, value: Any) -> str:
    v = _num(value)
    if not math.isfinite(v):
        return "-"
    m = COLUMNS.get(metric)
    try:
        return m.fmt.format(v) if m else f"{v:.4g}"
    except (ValueError, TypeError):
        return str(v)


def point_rows(campaign) -> list[dict[str, Any]]:
    """Per point: its summary plus label, level, validity and reasons."""
    return [
        dict(p.summary) | {"point": p.label, "level": p.level, "valid": bool(p.valid), "reasons": list(p.reasons)}
        for p in sorted(campaign.points, key=lambda p: (p.level, p.label))
    ]


def point_samples(campaign) -> dict[str, Any]:
    """label -> per-request samples of the measurement window (points whose records exist)."""
    from benchcamp.metrics import request_samples
    from benchcamp.results.records import read_records

    out = {}
    for p in sorted(campaign.points, key=lambda p: (p.level, p.label)):
        records = read_records(p.records_path)
        if len(records):
            window = tuple(getattr(p, "window", None) or ()) or None
            out[p.label] = request_samples(records, window if window and window[1] > window[0] else None)
    return out


def metrics_json(campaign, rows: list[dict[str, Any]]) -> dict[str, Any]:
    def numeric(d: dict[str, Any]) -> dict[str, Any]:
        return {
            k: v for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }

    return {
        "campaign": campaign.config.campaign.name,
        "execution_id": campaign.execution_id,
        "fingerprint": campaign.fingerprint,
        "workload_digest": campaign.workload_digest,
        "engine_kind": campaign.config.engine.kind,
        "headline_point": (campaign.headline or {}).get("point"),
        "headline": numeric(campaign.headline or {}),
        "points": {r["point"]: numeric(r) | {"valid": int(r["valid"])} for r in rows},
    }


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def write_plot_data(plots_dir: Path, rows, samples, baselines) -> None:
    X, Y, REV = Metric.P90_USER_RATE, Metric.THROUGHPUT_PER_GPU, Metric.REVENUE_PER_GPU_HOUR
    E2E = Metric.E2E_INTERACTIVITY_P90
    pareto_rows = [
        ["this run", r["point"], r["level"], int(r["valid"]), r.get(X), r.get(Y), r.get(REV), r.get(E2E)] for r in rows
    ]
    for b in baselines:
        for p in b.get("points") or [b.get("summary") or {}]:
            if X in p and Y in p:
                pareto_rows.append(
                    [b["name"], p.get("point", ""), p.get("level", ""), 1, p[X], p[Y], p.get(REV), p.get(E2E)]
                )
    _write_csv(plots_dir / "pareto.csv", ["source", "point", "level", "valid", X, Y, REV, E2E], pareto_rows)
    import numpy as np

    cdf = []
    qs = np.linspace(0, 1, CDF_QUANTILES)
    for label, df in samples.items():
        for col in ("ttft", "tpot"):
            v = df[col].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if v.size:
                cdf += [[label, f"{col}_s", float(x), float(q)] for x, q in zip(np.quantile(v, qs), qs)]
    _write_csv(plots_dir / "latency_cdf.csv", ["point", "metric", "value", "fraction"], cdf)
    keys = [
        Metric.REVENUE_PER_GPU_HOUR,
        Metric.COST_PER_GPU_HOUR,
        Metric.CACHE_HIT_RATE_THEORETICAL,
        Metric.CACHE_HIT_RATE_CLIENT,
        Metric.CACHE_HIT_RATE_SERVER,
        Metric.CACHE_HIT_RATE_CPU_TIER,
    ]
    _write_csv(
        plots_dir / "sweep.csv",
        ["point", "level", "valid", *keys],
        [[r["point"], r["level"], int(r["valid"])] + [r.get(k) for k in keys] for r in rows],
    )


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _cards(headline: dict[str, Any]) -> str:
    out = []
    for m in CARDS:
        meta = HEADLINE.get(m)
        label = f"{meta.label} ({meta.unit})" if meta else m
        out.append(
            f'<div class="card"><div class="v">{_e(_fmt(m, headline.get(m)))}</div>'
            f'<div class="l">{_e(label)}</div></div>'
        )
    return "".join(out)


def _verdict_table(verdicts: list) -> str:
    if not verdicts:
        return "<p>No baselines to compare with.</p>"
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "metric",
            "baseline",
            "current",
            "baseline value",
            "change",
            "confidence interval",
            "verdict",
            "reason",
        )
    )
    rows = []
    by_baseline: dict[str, list] = {}
    for v in verdicts:
        by_baseline.setdefault(str(v.baseline), []).append(v)
    for name, vs in by_baseline.items():
        if len(vs) > 1 and all(v.verdict == "not_comparable" for v in vs) and len({v.reason for v in vs}) == 1:
            # one row, not one per metric, when a whole baseline is out of reach for one reason
            rows.append(
                f'<tr class="not_comparable"><td>all headline metrics</td><td>{_e(name)}</td>'
                f'<td colspan="5"><b>not_comparable</b></td><td>{_e(str(vs[0].reason))}</td></tr>'
            )
            continue
        rows += _verdict_rows(vs)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _verdict_rows(verdicts: list) -> list[str]:
    rows = []
    for v in verdicts:
        pct = lambda x: "-" if not math.isfinite(_num(x)) else f"{_num(x):+.1%}"  # noqa: E731
        ci = "-" if not math.isfinite(_num(v.ci_low)) else f"[{pct(v.ci_low)}, {pct(v.ci_high)}]"
        cls = _e(str(v.verdict))
        rows.append(
            f'<tr class="{cls}"><td>{_e(v.metric + (f" ({v.definition})" if getattr(v, "definition", "") else ""))}'
            f"</td><td>{_e(str(v.baseline))}</td>"
            f'<td class="num">{_e(_fmt(v.metric, v.current))}</td>'
            f'<td class="num">{_e(_fmt(v.metric, v.baseline_value))}</td>'
            f'<td class="num">{_e(pct(v.delta_rel))}</td><td>{_e(ci)}</td>'
            f"<td><b>{_e(str(v.verdict))}</b></td><td>{_e(str(v.reason))}</td></tr>"
        )
    return rows


def _replica_table(rows: list[dict[str, Any]]) -> str:
    """The server's prefix-cache hit rate per DP engine (replica) and point; "" with one engine."""
    per = [(r, replica_hit_rates(r)) for r in rows]
    engines = sorted({e for _, h in per for e in h}, key=lambda e: (0, int(e)) if e.isdigit() else (1, 0))
    if not engines:
        return ""
    server = Metric.CACHE_HIT_RATE_SERVER
    head = "<th>point</th><th>all engines</th>" + "".join(f"<th>engine {_e(e)}</th>" for e in engines)
    body = "".join(
        f"<tr><td>{_e(str(r['point']))}</td><td class=num>{_e(_fmt(server, r.get(server)))}</td>"
        + "".join(f"<td class=num>{_e(_fmt(server, h.get(e)))}</td>" for e in engines)
        + "</tr>"
        for r, h in per
        if h
    )
    return (
        "<p>Per replica (DP engine), from the server's <code>/metrics</code> "
        "(<code>vllm:prefix_cache_hits / vllm:prefix_cache_queries</code> by <code>engine</code> label):</p>"
        f"<table><tr>{head}</tr>{body}</table>"
    )


def _points_table(rows: list[dict[str, Any]], headline_point: str | None) -> str:
    metrics = (
        Metric.THROUGHPUT_PER_GPU,
        Metric.THROUGHPUT_PER_GPU_SPAN,
        Metric.P90_USER_RATE,
        Metric.E2E_INTERACTIVITY_P90,
        Metric.REVENUE_PER_GPU_HOUR,
        Metric.TTFT_P90,
        Metric.TPOT_P90,
        Metric.CACHE_HIT_RATE_CLIENT,
        Metric.ERROR_RATE,
        Metric.REQUESTS,
    )
    cols = [("point", "point"), ("level", "level"), *((m, COLUMNS[m].label) for m in metrics)]
    head = "".join(f"<th>{_e(h)}</th>" for _, h in cols) + "<th>validity</th>"
    body = []
    for r in rows:
        cells = []
        for k, _ in cols:
            text = (
                str(r.get(k, ""))
                if k in ("point", "level", Metric.REQUESTS)
                else cell(r, k, COLUMNS[k].fmt)
                if k == Metric.CACHE_HIT_RATE_CLIENT
                else _fmt(k, r.get(k))
            )
            if k == "point" and r["point"] == headline_point:
                text += " (headline)"
            cells.append(f"<td{' class=num' if k not in ('point',) else ''}>{_e(text)}</td>")
        valid = (
            '<span class="ok">valid</span>'
            if r["valid"]
            else '<span class="bad">invalid</span>: ' + _e("; ".join(map(str, r["reasons"])) or "no reason given")
        )
        if r.get("steady") is not None:  # the window's halves (benchcamp.metrics.steadiness)
            valid += (
                '<br>steady: <span class="ok">yes</span>'
                if r["steady"]
                else '<br>steady: <span class="bad">no</span>: ' + _e(str(r.get("steady_reasons") or ""))
            )
        if r.get("replay_note"):
            valid += "<br>" + _e(str(r["replay_note"]))
        if "agentx_submission_valid" in r:  # AgentX's own verdict, beside benchcamp's checks
            scen = _e(str(r.get("agentx_scenario") or "agentx"))
            if r.get("agentx_prompt"):  # how the turns went on the wire: chat_recorded, chat_live or token_ids
                scen += ", " + _e(str(r["agentx_prompt"]))
            valid += (
                f'<br>AgentX submission ({scen}): <span class="ok">valid</span>'
                if r["agentx_submission_valid"]
                else f'<br>AgentX submission ({scen}): <span class="bad">invalid</span>: '
                + _e(str(r.get("agentx_submission_reasons") or ""))
            )
            if r.get("agentx_overrides"):  # the settings away from the scenario's, each named
                valid += "<br>AgentX overrides: " + _e(str(r["agentx_overrides"]))
        body.append(f"<tr>{''.join(cells)}<td>{valid}</td></tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _trials_html(points: list, clock: str) -> str:
    """The points measured in trials (load.trials > 1): per headline figure the mean, its interval, the median,
    the standard deviation and every trial's value; "" when no point has trials."""
    from benchcamp.results.table import TRIAL_COLUMNS

    pts = [p for p in points if getattr(p, "trials", None) is not None]
    if not pts:
        return ""
    t = pts[0].trials
    head = "".join(
        f"<th>{_e(h)}</th>"
        for h in ("point", "figure", "mean", f"{t.confidence:.0%} interval", "median", "std", "per trial")
    )
    body = []
    for p in pts:
        for key, title, _ in TRIAL_COLUMNS:
            f = p.trials.figures.get(key)
            if f is None:
                continue
            interval = "-" if f.ci_low is None else f"[{_fmt(key, f.ci_low)}, {_fmt(key, f.ci_high)}]"
            values = ", ".join("-" if v is None else _fmt(key, v) for v in f.values)
            cells = [f"{p.label} ({p.trials.measured}/{p.trials.asked})", title, _fmt(key, f.mean), interval]
            cells += [_fmt(key, f.median), "-" if f.std is None else _fmt(key, f.std), values]
            body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    state = (
        "each trial runs on a fresh simulated engine core with the same requests: the virtual clock is "
        "deterministic, so trials agree exactly"
        if clock == "virtual"
        else "the trials share the deployed engine; each trial sends its own prompt salt, so none finds another's "
        "prompts in the prefix cache"
    )
    return (
        f"<h3>Trials</h3><p>Each point measured {t.asked} times, interleaved across points; the point's figure is "
        f"the {_e(t.statistic)} over its trials, with a {t.confidence:.0%} interval ({_e(t.interval)}). "
        f"{_e(state)}.</p><table><tr>{head}</tr>{''.join(body)}</table>"
    )


def run_overrides(cfg: Config) -> list[str]:
    """``--set k=v`` for every value that differs from the embedded defaults (secrets masked)."""
    from benchcamp.config import Config, flatten

    mine = flatten(scrub(cfg.to_dict()))
    defaults = Config().flat()
    return [
        f"{k}={v if not isinstance(v, bool) else str(v).lower()}"
        for k, v in mine.items()
        if defaults.get(k) != v and k.split(".")[0] not in ("tracking", "results")
    ]


def _recipe(campaign, run_id: str | None) -> str:
    cfg = campaign.config
    facts = [
        ("execution id", campaign.execution_id),
        ("MLflow run", run_id or "(not logged)"),
        ("config fingerprint", campaign.fingerprint),
        ("workload", f"{cfg.workload.name} ({cfg.workload.data})"),
        ("workload digest", campaign.workload_digest),
        ("engine", f"{cfg.engine.kind} {cfg.engine.version}"),
        ("model", cfg.engine.model),
        ("hardware", f"{cfg.hardware.gpu_count} x {cfg.hardware.gpu}"),
        ("topology", _topology_line(cfg)),
        ("provider", cfg.provider.kind),
        ("clock", cfg.load.clock),
        ("started / finished", f"{campaign.started_at} / {campaign.finished_at}"),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(str(v))}</dd>" for k, v in facts)
    run_cmd = "benchcamp run" + "".join(f" \\\n  --set {shlex.quote(o)}" for o in run_overrides(cfg))
    cmds = (
        f"# from the MLflow run (same config, refuses another workload digest)\n"
        f"benchcamp reproduce {shlex.quote(run_id) if run_id else 'RUN_ID'}\n\n# or from the parameters\n{run_cmd}"
    )
    return f"<dl>{dl}</dl><pre>{_e(cmds)}</pre>"


def _topology_line(cfg: Config) -> str:
    from benchcamp.config import topology_of
    from benchcamp.topology.candidates import diagram

    return diagram(topology_of(cfg), cfg.hardware.gpu)


def _topology_html(cfg: Config) -> str:
    from benchcamp.report import diagram

    return diagram.section(cfg)


def render(
    campaign,
    verdicts: list | None = None,
    baselines: list[dict] | None = None,
    out_dir: str | Path = "reports",
    run_id: str | None = None,
) -> Path:
    """Write the report files for ``campaign`` (a CampaignResult); returns the index.html path.

    ``baselines``: compare's baseline dicts (published / historical / marked); a
    historical one may carry ``points`` (its sweep's summaries) for the Pareto plot.
    """
    from benchcamp.report import plots

    verdicts, baselines = list(verdicts or []), list(baselines or [])
    cfg = campaign.config
    out_dir = Path(out_dir)
    page_dir = out_dir / cfg.campaign.name
    fig_dir = page_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)

    rows = point_rows(campaign)
    samples = point_samples(campaign)
    headline = campaign.headline or {}
    (out_dir / "metrics.json").write_text(json.dumps(metrics_json(campaign, rows), indent=2, sort_keys=True))
    write_plot_data(out_dir / "plots", rows, samples, baselines)

    figures = {
        "pareto": plots.pareto(
            rows,
            list(pareto_frontier(rows)),
            baselines,
            f"{cfg.engine.kind} {cfg.engine.model} on {cfg.hardware.gpu_count} x {cfg.hardware.gpu}",
        ),
        # InferenceX's other x-axis: the E2E-normalized interactivity (the prefill wait included)
        "pareto_e2e_normalized": plots.pareto(
            rows,
            list(pareto_frontier(rows, Metric.E2E_INTERACTIVITY_P90)),
            baselines,
            f"{cfg.engine.kind} {cfg.engine.model} on {cfg.hardware.gpu_count} x {cfg.hardware.gpu}",
            x=Metric.E2E_INTERACTIVITY_P90,
        ),
        "latency_cdf": plots.latency_cdfs(samples),
        "revenue": plots.revenue(rows),
        "cache_hit_rates": plots.cache_hit_rates(rows),
    }
    images = {}
    for name, fig in figures.items():
        data = plots.png(fig)
        (fig_dir / f"{name}.png").write_bytes(data)
        images[name] = _img(data, name.replace("_", " "))

    banners = []
    if cfg.engine.kind == "simulated":
        banners.append(
            '<div class="banner"><b>Simulated engine.</b> These figures come from benchcamp\'s '
            "simulated vLLM engine (a performance model), not from real GPUs; they are never compared "
            "with real-hardware baselines."
            + _expected_error_html(cfg, getattr(campaign, "headline", None) or {})
            + "</div>"
        )
    if campaign.error:
        banners.append(f'<div class="banner err"><b>The campaign failed:</b> {_e(str(campaign.error))}</div>')
    if not any(r["valid"] for r in rows):
        banners.append('<div class="banner err"><b>No valid sweep point:</b> see the reasons below.</div>')
    unpriced = sorted(
        {
            str(r[Metric.REVENUE_PRICE_BASIS])
            for r in rows
            if r.get(Metric.REVENUE_PRICE_BASIS) not in (None, PRICE_BASIS_SPLIT)
        }
    )
    if unpriced:
        banners.append(
            f'<div class="banner"><b>Cached tokens unknown:</b> the server did not report '
            f"<code>usage.prompt_tokens_details.cached_tokens</code>, so the client cache hit rate is "
            f'"unknown" (drawn as 0 in the cache plot) and revenue assumes {_e("; ".join(unpriced))}.</div>'
        )
    regressed = [v for v in verdicts if v.verdict == "regressed"]
    if regressed:
        banners.append(
            f'<div class="banner err"><b>Regression:</b> {_e(", ".join(sorted({v.metric for v in regressed})))}</div>'
        )

    if cfg.load.clock == "virtual":
        banners.append(
            '<div class="banner"><b>Virtual clock.</b> Every point was run by the simulator in virtual '
            "time (no HTTP, no client): records are exact for the model, not measurements.</div>"
        )
    from benchcamp.report import capacity as capacity_report

    capacity_html = capacity_report.section(
        getattr(campaign, "capacity", None),
        _img,
        fig_dir,
        out_dir / "plots",
        _write_csv,
        f"{cfg.engine.model} on {cfg.hardware.gpu_count} x {cfg.hardware.gpu}",
    )
    from benchcamp.metrics import THROUGHPUT_DEFINITION_WORDS, THROUGHPUT_HEADLINE

    banners.append(
        f'<div class="banner"><b>Throughput definitions.</b> Headline tokens/s/GPU: '
        f"{_e(THROUGHPUT_DEFINITION_WORDS[THROUGHPUT_HEADLINE])}. Beside it, "
        f"{_e(THROUGHPUT_DEFINITION_WORDS['span'])}; a baseline published with the span definition is "
        "compared with the span figure.</div>"
    )
    from benchcamp.metrics import INTERACTIVITY_DEFINITION_WORDS

    banners.append(
        f'<div class="banner"><b>Per-user rate definitions.</b> {_e(INTERACTIVITY_DEFINITION_WORDS["tpot"])}; '
        f"beside it, {_e(INTERACTIVITY_DEFINITION_WORDS['e2e_normalized'])}. A published baseline states which "
        "one its figure is and is compared with the run's figure of that definition.</div>"
    )
    point = headline.get("point")
    subtitle = (
        f"execution {_e(campaign.execution_id)} &middot; {_e(cfg.engine.kind)} {_e(cfg.engine.model)} &middot; "
        f"{cfg.hardware.gpu_count} x {_e(cfg.hardware.gpu)} &middot; workload {_e(cfg.workload.name)} "
        f"&middot; {_e(cfg.load.clock)} clock &middot; headline point {_e(str(point or '-'))}"
        + (f" ({_e(str(headline.get('headline_rule')))})" if headline.get("headline_rule") else "")
    )
    page = Template((Path(__file__).parent / "template.html").read_text()).substitute(
        title=_e(f"benchcamp report: {cfg.campaign.name}"),
        subtitle=subtitle,
        banners="".join(banners),
        cards=_cards(headline),
        pareto=images["pareto"] + images["pareto_e2e_normalized"],
        verdicts=_verdict_table(verdicts),
        points=_topology_html(cfg) + _points_table(rows, point) + _trials_html(campaign.points, cfg.load.clock),
        cdf=images["latency_cdf"],
        revenue=images["revenue"],
        cache=images["cache_hit_rates"] + _replica_table(rows),
        recipe=_recipe(campaign, run_id),
        capacity=capacity_html,
    )
    index = page_dir / "index.html"
    index.write_text(page)
    return index
