"""The simulated engine's --speculative-config: parsed as vLLM's JSON, a forced (synthetic) acceptance length or
the model profile's draft acceptance rate, and decode faster per token as the perf model says (virtual time)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchcamp.metrics import request_samples
from benchcamp.sim.clock.simulate import SimLoad, simulate
from benchcamp.sim.engine.cli_args import parse_serve_args, settings_kwargs
from benchcamp.sim.engine.settings import EngineSettings
from benchcamp.workload.model import Request, Session, Workload

SYNTHETIC = '{"method":"mtp","num_speculative_tokens":3,"rejection_sample_method":"synthetic","synthetic_acceptance_length":2.5}'


def _settings(*flags: str) -> EngineSettings:
    args = parse_serve_args(["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--num-gpus", "8",
                             "--data-parallel-size", "8", "--enable-expert-parallel", *flags]).args
    return EngineSettings(**settings_kwargs(args)).validate()


def test_synthetic_acceptance_is_forced_and_real_comes_from_the_profile():
    s = _settings("--speculative-config", SYNTHETIC)
    assert (s.speculative_tokens, s.acceptance_length) == (3, 2.5)
    real = _settings("--speculative-config", '{"method":"mtp","num_speculative_tokens":2}')
    rate = real.model_spec().draft_acceptance_rate
    assert rate > 0 and real.acceptance_length == pytest.approx(1 + rate + rate**2)
    assumed = _settings("--speculative-config", '{"method":"ngram","num_speculative_tokens":3}',
                        "--speculative-acceptance-length", "2")
    assert assumed.acceptance_length == 2.0  # what a topology's acceptance=real + acceptance_length assumes
    off = _settings()
    assert off.speculative_tokens == 0


@pytest.mark.parametrize("raw, says", [
    ("{not json", "not JSON"),
    ('{"method":"mtp"}', "num_speculative_tokens"),
    ('{"method":"mtp","num_speculative_tokens":2,"rejection_sample_method":"synthetic",'
     '"synthetic_acceptance_length":4}', "1..K+1 = 3"),
])
def test_bad_speculative_config_is_one_line_naming_the_flag(raw, says, capsys):
    with pytest.raises(SystemExit):
        _settings("--speculative-config", raw)
    err = capsys.readouterr().err
    assert "--speculative-config" in err and says in err and "Traceback" not in err


def test_speculative_decoding_lowers_tpot_in_virtual_time():
    wl = Workload("spec", 16, 32000, [Session(f"s{i}", [Request(0, tuple(range(i * 100, i * 100 + 8)), 128, 256)])
                                      for i in range(16)])
    base = _settings()
    tpots = {}
    for name, s in {"off": base, "on": replace(base, speculative_tokens=3, acceptance_length=2.5).validate()}.items():
        df = simulate(wl, s, SimLoad(mode="closed", level=16, warmup_s=0, duration_s=30, drain_s=30))
        tpots[name] = request_samples(df)["tpot"].median()
    # 2.5 tokens per step for one 3-draft pass + a 4-position verify: well under the plain step per token
    assert tpots["on"] < 0.7 * tpots["off"], tpots
