"""Where the served model's tokenizer is local, the simulated engine counts chat prompts with it:
benchcamp.workload.tokencount's HF path (tokenizer.json + the chat template, rendered with jinja2) gives
exactly transformers' ``apply_chat_template`` ids on AA-AgentPerf's recorded turns (messages and
tools). The project's venv has no ``tokenizers``, so this runs in the real-engine venv (which has
transformers) on its tiny model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import benchcamp.workload.tokencount

SCRIPT = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("tc", sys.argv[1]); tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)
from transformers import AutoTokenizer
model, traces = sys.argv[2], json.loads(sys.argv[3])
counter = tc.counter_for(model)
assert type(counter).__name__ == "HFChatTokenizer", type(counter)
tok = AutoTokenizer.from_pretrained(model)
n = bad = 0
for path in traces:
    for line in open(path):
        d = json.loads(line)
        ours = counter.chat_ids(d["messages"], d.get("tools"), 1 << 62)
        ref = tok.apply_chat_template(d["messages"], tools=d.get("tools") or None, add_generation_prompt=True,
                                      tokenize=True)
        ref = list(ref["input_ids"] if hasattr(ref, "keys") else ref)
        n += 1
        bad += ours != ref
print(json.dumps({"turns": n, "different": bad}))
"""


@pytest.mark.slow  # ~10 s on a quiet box: transformers' import in the real-engine venv
def test_local_tokenizer_counts_exactly_as_transformers_chat_template(vllm_install, agentperf_replays):
    python = Path(vllm_install.executable).parent / "python"
    model = vllm_install.model_path("benchcamp/tiny-llama")
    traces = agentperf_replays / "agentperf-default-v1" / "traces"
    files = [str(traces / n) for n in ("task_skill_search.jsonl", "task_k8s_debugging.jsonl")]
    out = subprocess.run([str(python), "-c", SCRIPT, benchcamp.workload.tokencount.__file__, model, json.dumps(files)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"turns": 10, "different": 0}
