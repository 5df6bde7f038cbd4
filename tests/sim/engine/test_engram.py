"""DeepSeek-V4.1's Engram tables under vLLM's --engram-config (sources in profiles/models/deepseek-v4.1-flash.yaml):
with cpu_offload (vLLM's default) they leave the GPU's weights for pinned host memory and each step's lookups cross
the host link, overlapped with the step's work; without it they sit in HBM, one TP-sharded copy per DP rank.
Pure perf-model arithmetic and flag parsing: no engine runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchcamp.config import load_config
from benchcamp.errors import ConfigError
from benchcamp.profiles import load_gpu, load_model
from benchcamp.sim.engine.cli_args import parse_engram_config, parse_serve_args, settings_kwargs
from benchcamp.sim.engine.perfmodel import BatchSummary, PerfModel, perf_model_for
from benchcamp.sim.engine.settings import EngineSettings

GIB = 1024**3
V41 = "deepseek-v4.1-flash"


def _pm(gpu="gb300", tp=1, dp=24, **kw) -> PerfModel:
    return PerfModel(load_gpu(gpu) if isinstance(gpu, str) else gpu, load_model(V41), tp=tp, dp=dp,
                     expert_parallel=True, kv_dtype_bytes=2.0, **kw)


def test_offload_moves_the_tables_off_the_gpu_and_grows_kv_on_gb300():
    # By hand, TP1 x DP24 with EP (the seed's best layout), per GPU:
    #   dense + embedding (8.4 + 1.0)B x 1 byte                      =   9.400e9 bytes
    #   routed experts 384 x 35.33M x 40 layers x 0.53125 B / 24 GPUs =  12.012e9
    #   -> 21.412e9 = 19.94 GiB with cpu_offload
    #   Engram 196.6B x (1 + 1/32) (FP8 + one UE8M0 scale per 32)     = 202.744e9 = 188.82 GiB: in HBM without it
    #   -> 224.156e9 = 208.76 GiB
    # KV (890 elements per token at the 2-byte auto dtype = 1,780 bytes) at 0.9 x 259.8 GiB - weights - 6 GiB:
    #   offload (233.82 - 19.94 - 6) = 207.88 GiB -> 125.4M tokens; in HBM (233.82 - 208.76 - 6) = 19.06 GiB -> 11.5M
    off, hbm = _pm(), _pm(engram_cpu_offload=False)
    assert off.weight_bytes_gpu == pytest.approx(21.412e9, rel=1e-3)
    assert hbm.weight_bytes_gpu == pytest.approx(224.156e9, rel=1e-3)
    assert hbm.weight_bytes_gpu - off.weight_bytes_gpu == pytest.approx(202.744e9, rel=1e-4)
    assert off.engram_host_bytes_gpu / GIB == pytest.approx(188.82, abs=0.01) and hbm.engram_host_bytes_gpu == 0
    assert off.kv_capacity_tokens(0.9) == pytest.approx(125.4e6, rel=2e-3)
    assert hbm.kv_capacity_tokens(0.9) == pytest.approx(11.50e6, rel=2e-3)
    # TP4: each GPU holds (and reads) a quarter of the tables' hash heads
    assert _pm(tp=4, dp=1).engram_host_bytes_gpu / GIB == pytest.approx(188.82 / 4, abs=0.01)
    # the default engine settings take vLLM's default (offload)
    s = EngineSettings(model="deepseek-ai/DeepSeek-V4.1-Flash", gpu="gb300", data_parallel_size=24,
                       enable_expert_parallel=True)
    assert perf_model_for(s).weight_bytes_gpu == off.weight_bytes_gpu


def test_host_memory_must_hold_the_tables():
    small = replace(load_gpu("gb300"), host_memory_gib=100.0)
    with pytest.raises(ValueError) as err:
        _pm(small).kv_capacity_tokens(0.9)  # 188.8 GiB per GPU (one copy per DP rank) > 100
    msg = str(err.value)
    assert "\n" not in msg and "--engram-config" in msg and "dp_shared_memory" in msg and "cpu_offload" in msg
    # one copy per node shared by its 24 DP ranks: 7.9 GiB per GPU
    shared = _pm(small, engram_dp_shared_memory=True)
    assert shared.engram_host_bytes_gpu / GIB == pytest.approx(188.82 / 24, abs=0.01)
    assert shared.kv_capacity_tokens(0.9) > 0
    _pm(small, engram_cpu_offload=False).kv_capacity_tokens(0.95)  # in HBM: no host memory needed
    # a profile without host memory per GPU (B300) is not checked: the host is assumed to hold them
    assert load_gpu("b300").host_memory_gib == 0 and _pm("b300").kv_capacity_tokens(0.9) > 0


def test_lookup_bytes_and_the_per_step_cost_over_the_host_link():
    # 2 Engram layers x 24 hash heads x (256 + 8) bytes = 12,672 bytes per token at TP1; ceil(24 / 8) = 3 at TP8
    assert _pm().engram_bytes_per_token_gpu == 12672
    assert _pm(tp=8, dp=1).engram_bytes_per_token_gpu == 2 * 3 * 264
    # on GB300's NVLink-C2C (225 GB/s) a 8192-token prefill's lookups (0.46 ms) hide behind its work: no stall
    pm = _pm()
    chunk = [BatchSummary(prefill_seqs=1, prefill_tokens=8192, prefill_pairs=8192 * 4096.5, prefill_ctx=8192)] * 24
    assert pm.cost(chunk).duration_s == _pm(engram_cpu_offload=False).cost(chunk).duration_s
    # over a slow link the stall appears and grows in proportion to the step's tokens (no work to hide behind:
    # the stall is all the lookups, 12,672 bytes per token at 1 GB/s)
    slow = _pm(replace(load_gpu("gb300"), host_link_gbps=1.0))
    slow._coefficients()
    assert slow.engram_stall(0.0, 1000) == pytest.approx(1000 * 12672 / 1e9)
    assert slow.engram_stall(0.0, 2000) == pytest.approx(2 * slow.engram_stall(0.0, 1000))
    # layer 1's rows (half the lookups, 12.672 ms for 2000 tokens) are due 1/40 into a 40 ms step (1 ms of work to
    # hide behind), layer 14's (all 25.344 ms) 14/40 into it (14 ms): the step waits max(11.672, 11.344) ms
    assert slow.engram_stall(0.040, 2000) == pytest.approx(max(0.012672 - 0.001, 0.025344 - 0.014))
    in_hbm = _pm(replace(load_gpu("gb300"), host_link_gbps=1.0), engram_cpu_offload=False)
    steps = {n: [BatchSummary(prefill_seqs=1, prefill_tokens=n, prefill_pairs=n * (n + 1) / 2, prefill_ctx=n)] * 24
             for n in (4096, 8192)}
    extra = {n: slow.cost(b).duration_s - in_hbm.cost(b).duration_s for n, b in steps.items()}
    assert 0 < extra[4096] < extra[8192]
    assert in_hbm._c_engram == 0  # tables in HBM: no host-link term (coefficients set by cost above)


def test_other_models_are_unaffected():
    gpu = load_gpu("h200")
    v3 = load_model("deepseek-v3")
    assert v3.engram_params_b == 0
    a = PerfModel(gpu, v3, tp=1, dp=8, expert_parallel=True)
    b = PerfModel(gpu, v3, tp=1, dp=8, expert_parallel=True, engram_cpu_offload=False)
    assert a.weight_bytes_gpu == b.weight_bytes_gpu == pytest.approx(
        (v3.dense_params_b + v3.embedding_params_b) * 1e9 * v3.weight_bytes + v3.routed_params * v3.weight_bytes / 8)
    batch = [BatchSummary(decode_seqs=32, decode_ctx=32 * 4000)] * 8
    assert a.cost(batch) == b.cost(batch) and a.kv_capacity_tokens(0.9) == b.kv_capacity_tokens(0.9)
    assert a.engram_bytes_per_token_gpu == a.engram_host_bytes_gpu == 0


def _serve(*flags: str) -> EngineSettings:
    args = parse_serve_args(["--model", "deepseek-ai/DeepSeek-V4.1-Flash", "--gpu", "gb300", "--num-gpus", "8",
                             "--data-parallel-size", "8", "--enable-expert-parallel", *flags]).args
    return EngineSettings(**settings_kwargs(args)).validate()


def test_engram_config_flag_parses_like_vllms():
    assert _serve().engram_cpu_offload is True  # vLLM's default
    s = _serve("--engram-config", '{"cpu_offload": false}')
    assert (s.engram_cpu_offload, s.engram_dp_shared_memory, s.engram_across_dp) == (False, False, False)
    s = _serve("--engram-config", '{"cpu_offload": true, "dp_shared_memory": true}')
    assert s.engram_dp_shared_memory and perf_model_for(s).engram_host_bytes_gpu == pytest.approx(
        load_model(V41).engram_table_bytes / 8)
    assert parse_engram_config('{"embedding_across_dp": true, "thp_packing": true}') == {
        "cpu_offload": True, "embedding_across_dp": True, "dp_shared_memory": False, "thp_packing": True}


@pytest.mark.parametrize("raw, says", [
    ("{not json", "not JSON"),
    ('{"cpu_offlod": false}', "unknown key(s) cpu_offlod"),
    ('{"cpu_offload": "no"}', "true or false"),
    ('{"cpu_offload": false, "dp_shared_memory": true}', "requires cpu_offload=true"),
    ("[1]", "JSON object"),
])
def test_bad_engram_config_is_one_line_naming_the_flag(raw, says, capsys):
    with pytest.raises(SystemExit):
        _serve("--engram-config", raw)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--engram-config" in err and says in err and "Traceback" not in err


def test_engram_config_from_the_configs_extra_args():
    cfg = load_config(None, {"engine.model": "deepseek-ai/DeepSeek-V4.1-Flash",
                             "engine.extra_args": ["--engram-config", '{"cpu_offload": false}']})
    assert EngineSettings.from_config(cfg).engram_cpu_offload is False
    cfg = load_config(None, {"engine.extra_args": ['--engram-config={"cpu_offload": true}']})
    assert EngineSettings.from_config(cfg).engram_cpu_offload is True
    bad = load_config(None, {"engine.extra_args": ["--engram-config", '{"offload": 1}']})
    with pytest.raises(ConfigError) as err:
        EngineSettings.from_config(bad)
    assert str(err.value).startswith("engine.extra_args: --engram-config: unknown key(s) offload")
    assert "\n" not in str(err.value)
    # dp_shared_memory without DP > 1 is refused at start-up, as vLLM does
    with pytest.raises(ValueError, match="dp_shared_memory requires --data-parallel-size > 1"):
        EngineSettings(engram_dp_shared_memory=True).validate()
