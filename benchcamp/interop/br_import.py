"""A Benchmark Report, or a peer's native output that ``llmd-benchmark-report`` converts, as benchcamp's figures.

Which file is which (its own keys): a Benchmark Report has ``version`` 0.2 / 0.2.1 and ``results``; AIPerf's
``profile_export_aiperf.json`` has ``input_config`` and ``time_to_first_token``; GuideLLM's JSON has
``benchmarks``; ``vllm bench serve --save-result`` has ``num_prompts`` and ``mean_ttft_ms``; inference-perf's
``load_summary`` and ``successes``. The library converts each to a Benchmark Report v0.2.1 (GuideLLM: one per
benchmark of the file, each a point); benchcamp reads its figures from that report, under its own metric names,
each with the definition the tool used (``DEFINITIONS``):

- ``p90_user_tokens_per_s`` = 1 / P90 of the per-request decode time per token, (e2e - ttft) / (out - 1): the
  report's ``time_per_output_token`` (vLLM, benchcamp), else its ``inter_token_latency`` where the tool's ITL is
  that per-request figure (AIPerf's ``inter_token_latency``, GuideLLM's ``inter_token_latency_ms``).
- ``e2e_normalized_interactivity_p90`` = 1 / P90(e2e / out): AIPerf's own ``e2e_normalized_interactivity_p90``
  when its file has it; GuideLLM's ``time_per_output_token_ms`` is that per-request ratio (the report's
  ``normalized_time_per_output_token``); a benchcamp report carries its own.
- ``total_tokens_per_s_per_gpu``: the report's ``total_token_rate`` over the accelerators it (or the user)
  states; what the rate is depends on the tool (``DEFINITIONS``).
- ``ttft_p50_s``, ``ttft_p90_s``, ``tpot_p90_s``, ``e2e_p90_s``, ``requests``, ``error_rate``
  (failures / requests), ``requests_per_s``.

The comparability key (benchcamp.verdicts.compare.KEY_FIELDS) comes from what the file states: model, GPU type
and count and engine from the report's ``inference_engine`` components (or the tool's own model field), the
workload as ``<tool>:<the report's load cfg_id>`` (a benchcamp report: its workload digest). A field the file does
not state can be given by the user (``stated``); one neither gives leaves the run not comparable, with the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchcamp.errors import ConfigError
from benchcamp.metrics import Metric
from benchcamp.results.jsonsafe import dumps, strict_json

FORMATS = ("llmd-br", "aiperf", "guidellm", "vllm-bench-serve", "inference-perf")
# per tool: how its total_token_rate was computed, and which report latency is its per-request TPOT
DEFINITIONS: dict[str, dict[str, str]] = {
    "vllm-benchmark": {
        Metric.THROUGHPUT_PER_GPU: "vllm bench serve's total_token_throughput: (input + output tokens of the "
        "completed requests) / benchmark duration (first request sent to last answer), over the stated GPUs",
        Metric.P90_USER_RATE: "1 / P90 of vllm bench serve's per-request TPOT, (e2e - ttft) / (out - 1)",
    },
    "aiperf": {
        Metric.THROUGHPUT_PER_GPU: "AIPerf's total_token_throughput: (input + output tokens) / (last answer's end "
        "- first request's start), over the stated GPUs",
        Metric.P90_USER_RATE: "1 / P90 of AIPerf's per-request inter_token_latency, (e2e - ttft) / (out - 1)",
        Metric.E2E_INTERACTIVITY_P90: "AIPerf's e2e_normalized_interactivity_p90, 1 / P90(e2e / out)",
    },
    "guidellm": {
        Metric.THROUGHPUT_PER_GPU: "GuideLLM's total tokens per second (input + output) over the benchmark's "
        "duration, over the stated GPUs",
        Metric.P90_USER_RATE: "1 / P90 of GuideLLM's per-request inter_token_latency_ms, (last token - first "
        "token) / (out - 1)",
        Metric.E2E_INTERACTIVITY_P90: "1 / P90 of GuideLLM's per-request time_per_output_token_ms, (last token "
        "- request start) / out",
    },
    "inference-perf": {
        Metric.THROUGHPUT_PER_GPU: "inference-perf's total tokens per second over the stage, over the stated GPUs",
        Metric.P90_USER_RATE: "1 / P90 of inference-perf's per-request time per output token",
    },
}
# tools whose total_token_rate is benchcamp's span rule (tokens over first request's start to last answer's end):
# compared with a run's span figure (benchcamp.verdicts.compare); any other tool's is its own definition
SPAN_TOOLS = frozenset({"vllm-benchmark", "aiperf"})
# tools whose report inter_token_latency is the per-request (e2e - ttft) / (out - 1)
ITL_IS_PER_REQUEST_TPOT = frozenset({"aiperf", "guidellm"})
ENGINE_OF_TOOL = {"vllm": "vllm", "benchcamp-simulated-vllm": "simulated"}
_STATED_WORDS = {"model": "model (--model)", "gpu": "GPU type (--gpu)", "gpu_count": "GPU count (--gpus)",
                 "engine_kind": "engine (--engine vllm|simulated)", "workload_digest": "workload"}  # fmt: skip


@dataclass(frozen=True)
class ImportedPoint:
    label: str
    level: float
    summary: dict[str, Any]
    report: dict[str, Any]  # the Benchmark Report v0.2.1, strict JSON


@dataclass
class Imported:
    """One imported file: its points, what it is, and whether it can be compared with benchcamp's runs."""

    path: Path
    sha256: str
    source_format: str
    tool: str
    tool_version: str
    points: list[ImportedPoint]
    key: dict[str, Any]
    stated_by: dict[str, str]  # key field -> "file" or "user"
    definitions: dict[str, str]
    comparable: bool
    reason: str
    ended_at: str = ""
    engine_version: str = "-"
    throughput_definition: str = ""  # window | span (benchcamp's words), else the tool's name
    native: Any = field(default=None, repr=False)


def detect(doc: Any) -> str:
    if not isinstance(doc, dict):
        return ""
    if str(doc.get("version")) in ("0.2", "0.2.1") and "results" in doc:
        return "llmd-br"
    if "input_config" in doc and "time_to_first_token" in doc:
        return "aiperf"
    if isinstance(doc.get("benchmarks"), list):
        return "guidellm"
    if "num_prompts" in doc and "mean_ttft_ms" in doc:
        return "vllm-bench-serve"
    if "load_summary" in doc and "successes" in doc:
        return "inference-perf"
    return ""


def _reports(path: Path, fmt: str, doc: dict[str, Any]) -> list[Any]:
    from llmd_benchmark_report import load_benchmark_report
    from llmd_benchmark_report import native_to_br0_2 as native

    # the library warns on stderr about llm-d's experiment ids, which a file from elsewhere never has
    with contextlib.redirect_stderr(io.StringIO()):
        if fmt == "llmd-br":
            return [load_benchmark_report(doc)]
        if fmt == "guidellm":
            return list(native.import_guidellm_all(str(path)))
        convert = {"aiperf": native.import_aiperf, "vllm-bench-serve": native.import_vllm_benchmark,
                   "inference-perf": native.import_inference_perf}[fmt]  # fmt: skip
        return [convert(str(path))]


def read(path: str | Path, stated: dict[str, Any] | None = None) -> Imported:
    """``path`` as an :class:`Imported`; ``stated``: key fields the user gives (model, gpu, gpu_count,
    engine_kind) where the file states none. Bad input: ConfigError naming the file and the fix."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such file; give a Benchmark Report or a peer's result file")
    raw = p.read_bytes()
    try:
        doc = yaml.safe_load(raw)  # JSON is YAML; a Benchmark Report may be either
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: neither JSON nor YAML ({str(exc).splitlines()[0]})") from None
    fmt = detect(doc)
    if not fmt:
        raise ConfigError(
            f"{p}: not a Benchmark Report v0.2 / v0.2.1 nor a result file of {', '.join(FORMATS[1:])} "
            "(AIPerf: profile_export_aiperf.json; GuideLLM: --output kind=json; vllm bench serve: --save-result)"
        )
    try:
        reports = [r.dump() for r in _reports(p, fmt, doc)]
    except Exception as exc:  # the library's validation: the file is not what its keys say
        raise ConfigError(f"{p}: the {fmt} file does not convert to a Benchmark Report: {exc}") from None
    if not reports:
        raise ConfigError(f"{p}: the {fmt} file holds no benchmark")
    reports = [strict_json(r) for r in reports]
    load = reports[0].get("scenario", {}).get("load", {})
    tool = str(load.get("standardized", {}).get("tool") or fmt)
    bench = _benchcamp_block(reports[0])
    key, by = _key(reports[0], fmt, doc, tool, bench, stated or {})
    missing = [f for f, v in key.items() if v in (None, "")]
    reason = "; ".join(f"the file does not state its {_STATED_WORDS[f]}" for f in missing)
    gpus = key.get("gpu_count") if isinstance(key.get("gpu_count"), int) else None
    points = [_point(r, i, tool, doc if fmt == "aiperf" else None, gpus) for i, r in enumerate(reports)]
    return Imported(
        path=p,
        sha256=hashlib.sha256(raw).hexdigest(),
        source_format=fmt,
        tool=tool,
        tool_version=str(load.get("standardized", {}).get("tool_version") or _native_version(fmt, doc) or "-"),
        points=points,
        key=key,
        stated_by=by,
        definitions=_definitions(tool, bench),
        comparable=not missing,
        reason=reason,
        ended_at=str(reports[0].get("run", {}).get("time", {}).get("end") or ""),
        throughput_definition=str(
            (bench or {}).get("throughput_definition") or ("span" if tool in SPAN_TOOLS else tool)
        ),
        engine_version=next((str(e["tool_version"]) for e in _engines(reports[0]) if e.get("tool_version")), "-"),
        native=doc,
    )


def _native_version(fmt: str, doc: dict[str, Any]) -> str:
    if fmt == "aiperf":
        return str(doc.get("aiperf_version") or "")
    if fmt == "guidellm":
        return str((doc.get("metadata") or {}).get("guidellm_version") or "")
    return ""


def _definitions(tool: str, bench: dict[str, Any] | None) -> dict[str, str]:
    if bench is not None:
        words = bench.get("throughput_definitions", {}).get(bench.get("throughput_definition"), "")
        rate = bench.get("interactivity_definitions", {})
        return {Metric.THROUGHPUT_PER_GPU: f"benchcamp's {words}", Metric.P90_USER_RATE: str(rate.get("tpot", "")),
                Metric.E2E_INTERACTIVITY_P90: str(rate.get("e2e_normalized", ""))}  # fmt: skip
    return {str(k): v for k, v in DEFINITIONS.get(tool, {}).items()}


def _benchcamp_block(report: dict[str, Any]) -> dict[str, Any] | None:
    config = report.get("scenario", {}).get("load", {}).get("native", {}).get("config")
    return config.get("benchcamp") if isinstance(config, dict) and isinstance(config.get("benchcamp"), dict) else None


def _engines(report: dict[str, Any]) -> list[dict[str, Any]]:
    stack = report.get("scenario", {}).get("stack") or []
    return [c["standardized"] for c in stack if c.get("standardized", {}).get("kind") == "inference_engine"]


def _native_model(fmt: str, doc: dict[str, Any], report: dict[str, Any]) -> str | None:
    if fmt == "vllm-bench-serve":
        return doc.get("model_id")
    if fmt == "aiperf":  # AIPerf 0.13 names its models under input_config.models.items, earlier ones endpoint
        config = doc.get("input_config") or {}
        names = (config.get("endpoint") or {}).get("model_names") or [
            m.get("name") for m in (config.get("models") or {}).get("items") or [] if isinstance(m, dict)
        ]
        return names[0] if names else None
    config = report.get("scenario", {}).get("load", {}).get("native", {}).get("config") or {}
    if fmt == "guidellm" and isinstance(config, dict):
        return ((config.get("spec") or {}).get("backend") or {}).get("model")
    return None


def _key(
    report: dict[str, Any], fmt: str, doc: dict[str, Any], tool: str, bench: dict[str, Any] | None,
    stated: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:  # fmt: skip
    engines = _engines(report)
    from_file: dict[str, Any] = {}
    if engines:
        models = {e.get("model", {}).get("name") for e in engines}
        accels = {e.get("accelerator", {}).get("model") for e in engines}
        count = sum(int(e.get("accelerator", {}).get("count") or 0) for e in engines)
        kinds = {ENGINE_OF_TOOL.get(str(e.get("tool")), str(e.get("tool") or "")) for e in engines}
        from_file = {
            "model": models.pop() if len(models) == 1 else None,
            "gpu": accels.pop() if len(accels) == 1 else None,
            "gpu_count": count or None,
            "engine_kind": kinds.pop() if len(kinds) == 1 else None,
        }
    if not from_file.get("model"):
        from_file["model"] = _native_model(fmt, doc, report)
    cfg_id = report.get("scenario", {}).get("load", {}).get("metadata", {}).get("cfg_id")
    from_file["workload_digest"] = (bench or {}).get("workload_digest") or (f"{tool}:{cfg_id[:16]}" if cfg_id else None)
    key: dict[str, Any] = {}
    by: dict[str, str] = {}
    for f in ("workload_digest", "model", "gpu", "gpu_count", "engine_kind"):
        if from_file.get(f) not in (None, ""):
            key[f], by[f] = from_file[f], "file"
        elif stated.get(f) not in (None, ""):
            key[f], by[f] = stated[f], "user"
        else:
            key[f] = None
    if key.get("gpu_count") is not None:
        key["gpu_count"] = int(key["gpu_count"])
    return key, by


def _seconds(stat: dict[str, Any] | None, q: str) -> float | None:
    """A latency statistic in seconds (per token for the per-token ones), whatever unit the report used."""
    if not stat or stat.get(q) is None:
        return None
    scale = 1e-3 if str(stat.get("units", "")).startswith("ms") else 1.0
    return float(stat[q]) * scale


def _inv(x: float | None) -> float | None:
    return 1.0 / x if x is not None and x > 0 else None


def _point(report: dict[str, Any], i: int, tool: str, aiperf: dict[str, Any] | None, gpus: int | None) -> ImportedPoint:
    agg = report.get("results", {}).get("request_performance", {}).get("aggregate", {}) or {}
    lat, thr, req = agg.get("latency") or {}, agg.get("throughput") or {}, agg.get("requests") or {}
    tpot = lat.get("time_per_output_token")
    if tpot is None and tool in ITL_IS_PER_REQUEST_TPOT:
        tpot = lat.get("inter_token_latency")
    bench = _benchcamp_block(report)
    total = (thr.get("total_token_rate") or {}).get("mean")
    output = (thr.get("output_token_rate") or {}).get("mean")
    n = req.get("total")
    s: dict[str, Any] = {
        Metric.REQUESTS: n,
        Metric.ERROR_RATE: (req.get("failures") or 0) / n if n else None,
        "requests_per_s": (thr.get("request_rate") or {}).get("mean"),
        Metric.TTFT_P50: _seconds(lat.get("time_to_first_token"), "p50"),
        Metric.TTFT_P90: _seconds(lat.get("time_to_first_token"), "p90"),
        Metric.TPOT_P90: _seconds(tpot, "p90"),
        Metric.P90_USER_RATE: _inv(_seconds(tpot, "p90")),
        "e2e_p90_s": _seconds(lat.get("request_latency"), "p90"),
        "total_tokens_per_s": total,
        "gpus": gpus,
        Metric.THROUGHPUT_PER_GPU: total / gpus if total is not None and gpus else None,
        Metric.OUTPUT_THROUGHPUT_PER_GPU: output / gpus if output is not None and gpus else None,
    }
    if tool in SPAN_TOOLS:
        s[Metric.THROUGHPUT_PER_GPU_SPAN] = s[Metric.THROUGHPUT_PER_GPU]
    if tool == "guidellm":
        s[Metric.E2E_INTERACTIVITY_P90] = _inv(_seconds(lat.get("normalized_time_per_output_token"), "p90"))
    if aiperf is not None and isinstance(aiperf.get("e2e_normalized_interactivity_p90"), dict):
        s[Metric.E2E_INTERACTIVITY_P90] = aiperf["e2e_normalized_interactivity_p90"].get("avg")
    if bench is not None:  # benchcamp's own figures, by its own definitions
        s.update({k: v for k, v in (bench.get("headline") or {}).items() if v is not None})
    load = report.get("scenario", {}).get("load", {}).get("standardized", {})
    conc, rate = load.get("concurrency"), load.get("rate_qps")
    if conc is None and aiperf is not None:  # AIPerf 0.13 states it per phase, where the library does not look
        phases = (aiperf.get("input_config") or {}).get("phases") or []
        conc = next((ph.get("concurrency") for ph in phases if ph.get("kind") == "profiling"), None)
    if bench is not None:
        label, level = str(bench.get("point")), float(bench.get("level") or 0)
    elif isinstance(conc, (int, float)) and math.isfinite(conc):
        label, level = f"c{conc:g}", float(conc)
    elif isinstance(rate, (int, float)) and math.isfinite(rate):
        label, level = f"r{rate:g}", float(rate)
    else:
        label, level = f"p{i}", float(i)
    return ImportedPoint(label, level, {str(k): v for k, v in s.items() if v is not None}, report)


def to_json(doc: Any) -> str:
    return dumps(doc, indent=2, sort_keys=True)
