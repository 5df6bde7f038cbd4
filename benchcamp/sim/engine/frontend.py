"""The serving front end in virtual time: one CPU process in front of the engine core, as a FIFO server.

vLLM's OpenAI server runs in one API-server process unless ``--api-server-count``
> 1 ("Single API server (this process)": vllm/entrypoints/cli/serve.py, v0.10-0.12,
https://docs.vllm.ai/en/v0.11.0/api/vllm/entrypoints/cli/serve.html, read 2026-11-30;
since V1 the engine core is another process). Its single asyncio loop parses each
request, renders the chat template and tokenizes the prompt before handing it to
the engine core, and for every engine step detokenizes the new tokens and writes
one SSE chunk per running stream (vllm/v1/engine/output_processor.py,
vllm/entrypoints/openai/serving_chat.py). SGLang's TokenizerManager does the same
in its HTTP process (python/sglang/srt/managers/tokenizer_manager.py). One loop,
in arrival order: a burst of requests queues behind the others' tokenization,
and a step's tokens reach the clients only after the work queued before them,
so TTFT in a burst of N requests grows with N even when the GPU is idle.

Costs (engine profile), measured on the real CPU vLLM by bench/frontend_costs.py (the profiles' comments hold the
figures): ``frontend_request_us`` + a per-prompt-token cost of serial loop work per request, by what the client
sends (``prompt``): token ids (``frontend_us_per_token``: JSON parsing of the id list, validation, the hand-off; no
tokenizer), text to /v1/completions (``frontend_text_us_per_token``) or chat messages
(``frontend_chat_us_per_token``, the chat template rendered); text and chat are then tokenized off the loop, by
vLLM's one renderer thread (``renderer_num_workers`` 1, vllm/renderers/base.py, 0.32), a second FIFO in series
(``frontend_tokenize_us_per_token``, ``frontend_chat_tokenize_us_per_token``). Then ``frontend_step_us`` per
engine step that streams tokens (the output handler's wake-up, decoding the step's outputs) and
``frontend_chunk_us`` per streamed token (detokenize, one SSE chunk), and ``frontend_ms`` of latency that does not
occupy the loop (HTTP, the hand-off to the engine core, the first chunk's trip back). A request's work and
latency carry one seeded log-normal jitter (sigma ``frontend_jitter_sigma``, mean
1) drawn from a hash of the run's seed and the request id: TTFT's tail, with
virtual time still deterministic. A step's tokens reach their clients, on
average, halfway through the loop's work on that step.

Virtual time only: behind the HTTP server the real front end takes its place.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

from benchcamp.profiles import EngineProfile

_NORMAL = NormalDist()


PROMPT_KINDS = ("ids", "text", "chat")  # what the client sends: token ids, a text prompt, chat messages


def prompt_kind(api: str, prompt: str = "ids") -> str:
    """The front end's prompt kind of a load point (``load.api``, the request plan's prompt form)."""
    return "chat" if api == "chat" else ("text" if prompt == "text" else "ids")


class FrontEnd:
    def __init__(self, engine: EngineProfile, seed: int = 0, servers: int = 1, prompt: str = "ids"):
        # ``servers`` API-server processes (vLLM --api-server-count, or one per engine behind a router) share the
        # work evenly: one FIFO at 1/servers of the cost per item (a fluid approximation of N loops)
        if prompt not in PROMPT_KINDS:
            raise ValueError(f"prompt={prompt!r}: use one of {', '.join(PROMPT_KINDS)}")
        loop_us = {
            "ids": engine.frontend_us_per_token,
            "text": engine.frontend_text_us_per_token,
            "chat": engine.frontend_chat_us_per_token,
        }[prompt]
        render_us = {
            "ids": 0.0,  # token ids skip the tokenizer
            "text": engine.frontend_tokenize_us_per_token,
            "chat": engine.frontend_chat_tokenize_us_per_token,
        }[prompt]
        self.prompt = prompt
        self.latency_s = engine.frontend_ms * 1e-3
        self.request_s = engine.frontend_request_us * 1e-6 / servers
        self.token_s = loop_us * 1e-6 / servers
        self.render_s = render_us * 1e-6 / servers
        self.chunk_s = engine.frontend_chunk_us * 1e-6 / servers
        # every API server with a stream on that engine wakes for its step: not shared out
        self.step_s = engine.frontend_step_us * 1e-6
        self.sigma = engine.frontend_jitter_sigma
        self.seed = seed
        self.free_at = 0.0  # when the loop has done all the work queued so far
        self.render_free_at = 0.0  # when the renderer thread (tokenizer) has
        self.busy_s = 0.0  # total loop work done (statistics)
        self.render_busy_s = 0.0

    def jitter(self, key: str) -> float:
        """Mean-1 log-normal factor of request ``key``, a pure function of (seed, key)."""
        if not self.sigma:
            return 1.0
        # blake2b, not crc32: CRC is linear, so ids that differ in one digit (q0:0 ... q9:0) drew nearly the same
        # factor (1.07-1.12) and a short run had no tail at all
        digest = hashlib.blake2b(f"{self.seed}:{key}".encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / 2**64
        return math.exp(self.sigma * _NORMAL.inv_cdf(u) - self.sigma**2 / 2)

    def admit(self, sent_s: float, prompt_len: int, key: str) -> float:
        """A request sent at ``sent_s``: when the engine core receives it."""
        j = self.jitter(key)
        work = (self.request_s + self.token_s * prompt_len) * j
        start = sent_s if sent_s > self.free_at else self.free_at
        self.free_at = start + work
        self.busy_s += work
        ready = self.free_at
        if self.render_s:  # then the renderer thread tokenizes it, in arrival order too
            render = self.render_s * prompt_len * j
            start = ready if ready > self.render_free_at else self.render_free_at
            self.render_free_at = ready = start + render
            self.render_busy_s += render
        return ready + self.latency_s * j

    def deliver(self, end_s: float, tokens: int) -> float:
        """A step that ended at ``end_s`` produced ``tokens`` streamed tokens: when their clients see them."""
        start = end_s if end_s > self.free_at else self.free_at
        work = (self.step_s + tokens * self.chunk_s) if tokens else 0.0
        self.free_at = start + work
        self.busy_s += work
        return start + work / 2


__all__ = ["PROMPT_KINDS", "FrontEnd", "prompt_kind"]
