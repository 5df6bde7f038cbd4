"""`benchcamp bench run --endpoint` against servers that are neither benchcamp's nor vLLM's
(tests/fakes/plain_openai_server.py, real HTTP on loopback): the readiness check finds what
they support and the load generator adapts, or stops before measuring with one line."""

from __future__ import annotations

import json

import pytest
from loadgen_support import make_workload
from plain_openai_server import REFUSAL, PlainOpenAIServer

from benchcamp.cli import main
from benchcamp.loadgen import PointSpec, run_point
from benchcamp.loadgen.preflight import probe
from benchcamp.metrics import PRICE_BASIS_UNCACHED
from benchcamp.results.records import read_records
from benchcamp.workload.model import write_workload

MODEL = "plain-model"


def _bench(tmp_path, url: str, *sets: str, quiet: bool = True) -> tuple[int, list[str]]:
    data = tmp_path / "wl.parquet"
    if not data.exists():
        write_workload(make_workload(n_sessions=4, turns=3, output_len=4), data)
    argv = ["bench", "run", "--params", "/dev/null", "--endpoint", url, "--out", str(tmp_path / "out")]
    argv += ["--quiet"] if quiet else []
    for s in ("engine.served_model_name=" + MODEL, "engine.data_parallel_size=1", "hardware.gpu_count=1",
              f"workload.data={data}", f"workload.spec={tmp_path / 'absent.yaml'}", "load.levels=[2]",
              "load.warmup_s=0.2", "load.duration_s=1.0", "load.drain_s=2", "load.workers=1",
              "load.min_requests=5", *sets):
        argv += ["--set", s]
    return main(argv), argv


def _point(tmp_path) -> tuple[dict, dict]:
    out = tmp_path / "out"
    return (json.loads((out / "c2" / "point.json").read_text()),
            json.loads((out / "c2" / "summary.json").read_text()))


def test_a_plain_openai_server_is_measured_with_text_prompts_and_unknown_cached_tokens(tmp_path, capsys):
    with PlainOpenAIServer(model=MODEL) as srv:
        rc, _ = _bench(tmp_path, srv.url)
        log = list(srv.log)
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    point, summary = _point(tmp_path)
    assert summary["valid"] == 1 and summary["error_rate"] == 0 and summary["requests"] >= 5
    spec = point["spec"]
    assert (spec["api"], spec["prompt"], spec["vllm_sampling"], spec["cached_tokens_reported"]) == \
        ("completions", "text", False, False)
    assert any("output lengths not forced" in n and "min_tokens" in n for n in spec["request_notes"])
    caps = spec["capabilities"]
    assert caps["completions"] and caps["chat"] and caps["include_usage"]
    assert not (caps["health"] or caps["metrics"] or caps["token_ids"] or caps["cached_tokens"]
                or caps["vllm_sampling"])
    assert "token arrays are not supported" in caps["refused"]["completions-ids"]
    # measured requests: text prompts, no vLLM fields (only the probes tried ids and min_tokens)
    measured = [e for e in log if e["path"] == "/v1/completions" and e["status"] == 200]
    assert len(measured) >= summary["requests"]
    assert all(e["prompt"] == "text" and "min_tokens" not in e["fields"] for e in measured)
    # refused: 3 probes (ids + min_tokens, ids, text + min_tokens) by the deploy check and by the sweep's preflight
    assert sum(e["status"] == 400 for e in log) == 6
    # cached tokens unknown, not 0; revenue says which price it assumed
    assert read_records(tmp_path / "out" / "c2" / "records.parquet")["cached_tokens"].eq(-1).all()
    assert summary["cache_hit_rate_client"] is None and summary["cached_tokens_reported"] == 0
    assert summary["revenue_price_basis"] == PRICE_BASIS_UNCACHED
    lines = printed.out.splitlines()
    header = next(i for i, line in enumerate(lines) if "cache hit" in line and "point" in line)
    assert "unknown" in lines[header + 2]
    assert PRICE_BASIS_UNCACHED in printed.out     # the headline says it too


def test_the_lines_name_the_endpoint_not_the_simulated_engine(tmp_path, capsys):
    """A foreign server is not benchcamp's simulated engine: the progress and headline lines say
    "endpoint" and the engine.kind the user set (which still decides comparability)."""
    with PlainOpenAIServer(model=MODEL) as srv:
        rc, _ = _bench(tmp_path, srv.url, quiet=False)
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    ready = next(line for line in printed.out.splitlines() if "engine ready at" in line)
    assert ready.startswith(f"[benchcamp] engine ready at {srv.url} (endpoint, engine.kind=simulated); ")
    assert "headline [endpoint, engine.kind=simulated] (point c2)" in printed.out
    assert "(simulated)" not in printed.out and "[simulated engine]" not in printed.out


def test_a_chat_only_server_is_measured_through_chat(tmp_path, capsys):
    with PlainOpenAIServer(model=MODEL, chat_only=True) as srv:
        rc, _ = _bench(tmp_path, srv.url)
        measured = [e for e in srv.log if e["status"] == 200]
    assert rc == 0, capsys.readouterr().err
    point, summary = _point(tmp_path)
    assert point["spec"]["api"] == "chat" and summary["valid"] == 1 and summary["error_rate"] == 0
    assert any("load.api=completions is not served" in n and "set load.api=chat" in n
               for n in point["spec"]["request_notes"])
    assert measured and all(e["path"] == "/v1/chat/completions" for e in measured)


def test_a_server_that_refuses_everything_stops_before_measuring_with_its_message(tmp_path, capsys):
    with PlainOpenAIServer(model=MODEL, refuse_all=True) as srv:
        rc, _ = _bench(tmp_path, srv.url)
        posts = len(srv.log)
    err = capsys.readouterr().err
    assert rc != 0
    assert REFUSAL in err and "engine.served_model_name" in err and "OpenAI-compatible" in err
    lines = [ln for ln in err.strip().splitlines() if "engine.kind=simulated (the default)" not in ln]
    assert "Traceback" not in err and len(lines) == 1   # one line, besides the note on engine.kind
    assert posts <= 5                      # the probes, no sweep
    assert not (tmp_path / "out" / "c2" / "records.parquet").exists()


def test_a_point_whose_first_requests_are_refused_stops_with_the_servers_message(tmp_path):
    """Requests the probes could not foresee (here: prompts over the model's context) are
    refused: the point stops at once and says why, instead of measuring 100% errors."""
    with PlainOpenAIServer(model=MODEL, max_context=70) as srv:
        plan = probe(srv.url, None, MODEL).request_plan("completions")  # the short probes pass: text prompts
        spec = PointSpec(label="c2", mode="closed", level=2, warmup_s=0.2, duration_s=30, drain_s=2, workers=1,
                         api=plan.api, prompt=plan.prompt, vllm_sampling=plan.vllm_sampling,
                         cached_tokens_reported=plan.cached_tokens_reported)
        res = run_point(srv.url, None, MODEL, make_workload(n_sessions=4, turns=2, prompt_len=80), spec, tmp_path)
    errors = res.client_health["worker_errors"]
    assert len(errors) == 1 and errors[0].startswith(
        "the server refused the first 3 requests of worker 0 (HTTP 400: This model's maximum context length is 70 "
        "tokens; your prompt has ")
    assert errors[0].endswith("the point stopped: change what the server's message names")
    assert "refused the first 3 requests" in errors[0]
    assert res.window[1] < spec.window_end_s / 2   # stopped at the refusals, not after 30 s of them

    from benchcamp.config import Config
    from benchcamp.metrics import validity
    verdict = validity({"requests": 0}, res.client_health, Config().load)
    assert not verdict["valid"] and "maximum context length" in verdict["reasons"][0]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_request_plan_of_a_full_vllm_like_server_changes_nothing(api):
    from benchcamp.loadgen.readiness import Capabilities
    caps = Capabilities(models=("m",), health=True, metrics=True, completions=True, token_ids=True, chat=True,
                        include_usage=True, cached_tokens=True, vllm_sampling=True)
    plan = caps.request_plan(api)
    assert (plan.api, plan.prompt, plan.vllm_sampling, plan.cached_tokens_reported, plan.notes) == \
        (api, "ids" if api == "completions" else "text", True, True, ())
    assert Capabilities.from_dict(json.loads(json.dumps(caps.to_dict()))) == caps


def test_the_simulated_engine_supports_everything_and_keeps_token_id_prompts():
    from simulated_engine import simulated_engine

    from benchcamp.deploy import Deployment, wait_ready
    from benchcamp.loadgen.readiness import Capabilities, check

    with simulated_engine("m") as url:
        dep = Deployment(endpoint=url, api_key=None, log_path=None, model="m", handle={"kind": "endpoint"})
        wait_ready(dep, timeout=10)
        caps = check(url, None, "m")
    assert Capabilities.from_dict(dep.handle["capabilities"]) == caps
    assert caps == Capabilities(models=("m",), health=True, metrics=True, completions=True, token_ids=True,
                                chat=True, include_usage=True, cached_tokens=True, vllm_sampling=True)
    plan = caps.request_plan("completions")
    assert (plan.api, plan.prompt, plan.vllm_sampling, plan.cached_tokens_reported, plan.notes) == \
        ("completions", "ids", True, True, ())
