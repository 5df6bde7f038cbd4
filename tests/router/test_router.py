"""The router (benchcamp.router) in front of real simulated engines over loopback HTTP.

Prefill/decode: two `benchcamp engine serve` processes with the simulated disk-backed KV connector
(vLLM's ExampleConnector rules, benchcamp.sim.engine.kv_connector) sharing one folder, the router
sending each request to the prefill (max_tokens 1) and streaming the decode's answer. Unified: two
replicas, round robin, or session affinity by the X-Session-ID header.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchcamp.router import router_argv
from benchcamp.router.server import merge_expositions
from benchcamp.sim.engine.kv_connector import lookup_blocks, parse_kv_transfer_config, stored_blocks
from benchcamp.sim.engine.prom import parse_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))

from simulated_engine import simulated_engine  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def router(**pools) -> Iterator[str]:
    proc = subprocess.Popen(router_argv("127.0.0.1", 0, **pools), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            if m := re.search(r"router serving on (http://\S+)", line):
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(30) and found, "router did not start"
        yield found[0]
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[list[dict], dict | None]:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and "[DONE]" not in line]
    usage = next((e["usage"] for e in events if e.get("usage")), None)
    return events, usage


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def _body(n: int, max_tokens: int = 5, start: int = 1000) -> dict:
    return {"model": "m", "prompt": list(range(start, start + n)), "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "min_tokens": max_tokens, "ignore_eos": True}


def test_connector_alignment_is_example_connectors():
    # stores the whole blocks of len-1 tokens, looks up those of len-2 (align_to_block_size(len-1))
    assert (stored_blocks(600, 16), lookup_blocks(600, 16)) == (37, 37)
    assert (stored_blocks(577, 16), lookup_blocks(577, 16)) == (36, 35)  # 16k+1 tokens: never a hit
    with pytest.raises(ValueError, match="shared_storage_path"):
        parse_kv_transfer_config('{"kv_connector":"NixlConnector","kv_role":"kv_both"}')
    with pytest.raises(ValueError, match="kv_role='kv_sideways'"):
        parse_kv_transfer_config('{"kv_connector":"ExampleConnector","kv_role":"kv_sideways"}')


@pytest.mark.slow
def test_prefill_then_decode_through_the_router(tmp_path):
    kv = json.dumps({"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                     "kv_connector_extra_config": {"shared_storage_path": str(tmp_path / "kv")}})
    flags = ("--block-size", "16", "--kv-transfer-config", kv, "--kv-link-gbps", "25", "--kv-link-latency-us", "50")
    with simulated_engine("m", *flags) as p, simulated_engine("m", *flags) as d, router(prefill=[p], decode=[d]) as r:
        assert _get(r + "/health") == ""
        events, usage = _post(r, _body(600))
        assert sum(len(e["choices"][0]["text"]) > 0 for e in events if e.get("choices")) == 5  # the decode's stream
        assert usage["completion_tokens"] == 5
        assert usage["prompt_tokens_details"]["cached_tokens"] == 592  # 37 whole blocks came from the prefill
        _, miss = _post(r, _body(577, start=5000))  # 16k+1 tokens: the decode's lookup aligns one block short of the store
        assert miss["prompt_tokens_details"]["cached_tokens"] == 0
        dm, pm = parse_text(_get(d + "/metrics")), parse_text(_get(p + "/metrics"))
        lab = 'engine="0",model_name="m"'
        assert dm[f"vllm:external_prefix_cache_hits_total{{{lab}}}"] == 592
        assert dm[f'vllm:prompt_tokens_by_source_total{{{lab},source="external_kv_transfer"}}'] == 592
        assert pm[f"vllm:generation_tokens_total{{{lab}}}"] == 2  # one token per prefill
        assert pm[f"vllm:external_prefix_cache_hits_total{{{lab}}}"] == 0
        rm = parse_text(_get(r + "/metrics"))
        assert rm[f'vllm:generation_tokens_total{{role="decode",instance="0",{lab}}}'] == 10
        assert rm['benchcamp_router_requests_total{role="prefill",instance="0"}'] == 2
    assert len(list((tmp_path / "kv").iterdir())) >= 2  # the prefixes stored (deploy removes the folder)


@pytest.mark.slow
def test_unified_replicas_round_robin_and_session_affinity():
    with simulated_engine("m") as a, simulated_engine("m") as b, router(unified=[a, b], policy="session_affinity") as r:
        def sent() -> list[float]:
            rm = parse_text(_get(r + "/metrics"))
            return [rm[f'benchcamp_router_requests_total{{role="unified",instance="{i}"}}'] for i in "01"]

        for _ in range(4):
            _post(r, _body(40, 2))  # no session header: round robin
        assert sent() == [2, 2]
        for s in ("s1", "s1", "s1", "s2", "s2", "s2"):
            _post(r, _body(40, 2), {"X-Session-ID": s})
        assert sorted(n - 2 for n in sent()) in ([0, 6], [3, 3])  # each session's turns all on one replica


def test_merged_metrics_keep_each_family_together():
    a = "# HELP x_total X.\n# TYPE x_total counter\nx_total{engine=\"0\"} 1\n# TYPE y gauge\ny 2\n"
    text = merge_expositions([('role="prefill",instance="0"', a), ('role="decode",instance="0"', a)])
    assert text.count("# TYPE x_total counter") == 1
    lines = text.splitlines()
    assert lines[2:4] == ['x_total{role="prefill",instance="0",engine="0"} 1', 'x_total{role="decode",instance="0",engine="0"} 1']
    assert 'y{role="decode",instance="0"} 2' in lines
