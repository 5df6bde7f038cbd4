"""Fault injection (`--fault KEY=VALUE`) against a real server subprocess on loopback."""

from __future__ import annotations

import random
import time

import httpx
import pytest

from benchcamp.sim.engine.faults import FaultError, FaultState, parse_faults

MODEL = "meta-llama/Llama-3.1-8B-Instruct"   # as in conftest.py


def _complete(url: str, max_tokens: int = 3, stream: bool = False, timeout: float = 30) -> httpx.Response:
    return httpx.post(url + "/v1/completions", timeout=timeout,
                      json={"model": MODEL, "prompt": [1001, 1002, 1003], "max_tokens": max_tokens, "stream": stream})


@pytest.fixture(scope="module")
def faulty(eh):
    """One server per fault, started together (start-up is mostly imports: overlap them)."""
    base_args = eh.base_args
    procs = eh.start_many({
        "crash": (base_args("--fault", "crash-after-requests=3"), None),
        "crash-on-probe": (base_args("--fault", "crash-after-requests=1"), None),
        "error": (base_args("--fault", "error-rate=0.3", "--fault", "seed=7"), None),
        "stall": (base_args("--fault", "stall-after-seconds=0.3"), None),
        "drop": (base_args("--fault", "drop-stream-after-tokens=4"), None),
    })
    yield procs
    for p in procs.values():
        p.stop()


def test_crash_after_requests_exits_abruptly(faulty):
    srv = faulty["crash"]
    assert _complete(srv.url).status_code == 200
    assert _complete(srv.url).status_code == 200
    with pytest.raises(httpx.TransportError):
        _complete(srv.url)
    assert srv.proc.wait(10) == 3
    assert "crash-after-requests=3" in srv.output


def test_an_engine_that_dies_during_the_probes_is_called_dead_not_misconfigured(faulty):
    """Found by the soak (bench/soak.py): an engine that crashed on the probe requests was reported as one
    that "refused every probe request", with advice to check the model name and the endpoint URL."""
    from benchcamp.errors import EndpointError
    from benchcamp.loadgen.preflight import probe

    with pytest.raises(EndpointError) as err:
        probe(faulty["crash-on-probe"].url, None, MODEL, timeout=10)
    assert "stopped answering during the probe requests" in str(err.value) and "engine died?" in str(err.value)
    assert "served_model_name" not in str(err.value)


def test_error_rate_fails_a_seeded_fraction_with_openai_errors(faulty):
    srv = faulty["error"]
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        codes = [c.post("/v1/completions", json={"model": MODEL, "prompt": [1001], "max_tokens": 1})
                 for _ in range(30)]
    rng = random.Random(7)
    expected = [500 if rng.random() < 0.3 else 200 for _ in range(30)]
    assert [r.status_code for r in codes] == expected
    assert 0 < expected.count(500) < 30
    err = next(r for r in codes if r.status_code == 500).json()["error"]
    assert err["code"] == 500 and err["type"] == "InternalServerError" and "param" in err


def test_stall_after_seconds_keeps_connections_open_without_tokens(faulty, eh):
    srv = faulty["stall"]
    time.sleep(0.4)
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream("POST", srv.url + "/v1/completions", timeout=httpx.Timeout(5, read=1.5),
                          json={"model": MODEL, "prompt": [1001, 1002], "max_tokens": 5, "stream": True}) as r:
            assert r.status_code == 200          # accepted and headers sent, then silence
            for _ in r.iter_bytes():
                pass
    assert eh.http_get(srv.url + "/health")[0] == 200
    assert srv.proc.poll() is None


def test_slow_start_refuses_with_503_then_serves(start_server, eh):
    srv = start_server(*eh.base_args("--fault", "slow-start-seconds=1.5"))
    assert eh.http_get(srv.url + "/health")[0] == 503
    r = _complete(srv.url)
    assert r.status_code == 503 and r.json()["error"]["code"] == 503
    assert eh.wait_until(lambda: eh.http_get(srv.url + "/health")[0] == 200, timeout=10)
    assert _complete(srv.url).status_code == 200


def test_drop_stream_after_tokens_cuts_the_stream_without_done(faulty):
    srv = faulty["drop"]
    events: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", srv.url + "/v1/completions", timeout=10,
                          json={"model": MODEL, "prompt": [1001, 1002], "max_tokens": 50, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line.encode())
    assert len(events) == 4 and b"[DONE]" not in b"".join(events)
    assert _complete(srv.url, max_tokens=3).status_code == 200     # later requests still served (3 < 4)


def test_parse_faults_rejects_bad_values_naming_the_key():
    f = parse_faults(["error-rate=0.05", "crash-after-requests=10", "seed=3"])
    assert f.error_rate == 0.05 and f.crash_after_requests == 10 and f.active()["seed"] == 3
    for bad, word in (("error-rate=1.5", "error-rate"), ("nope=1", "KEY=VALUE"), ("stall-after-seconds=x", "float"),
                      ("crash-after-requests=0", ">= 1"), ("slow-start-seconds", "KEY=VALUE")):
        with pytest.raises(FaultError, match=word):
            parse_faults([bad])


def test_fault_state_is_deterministic():
    a = FaultState(parse_faults(["error-rate=0.5", "seed=1"]))
    b = FaultState(parse_faults(["error-rate=0.5", "seed=1"]))
    assert [a.accept() for _ in range(20)] == [b.accept() for _ in range(20)]
    s = FaultState(parse_faults(["crash-after-requests=2", "slow-start-seconds=1", "stall-after-seconds=5"]))
    assert s.accept() == (False, False) and s.accept()[0] is True
    assert s.starting(0.5) and not s.starting(1.0) and s.stalled(5.0) and not s.stalled(4.9)
