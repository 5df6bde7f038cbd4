"""AgentX turns as chat messages, as SemiAnalysis' harness builds them (``load.agentx.context``, ``load.api: chat``).

Source: agentx-harness 1.0.12 (read 2026-12-02 from its wheel), aiperf/dataset/loader/weka_synth_buf.py
``ConversationReconstructor``, weka_trace.py ``_reconstruct_serial`` and workers/session_manager.py:

- turn 0: one ``system`` message of the tool + system prefix's blocks (benchcamp: the session's ``fixed_blocks``),
  then one ``user`` message of the rest, its partial last block included;
- turn k: the conversation is cut at the longest common block prefix of turns k-1 and k (a compaction cuts
  inside it; a partial last block is dropped), then the new blocks are split: the first
  ``ceil(out_{k-1} / block_size)`` (the recorded answer of turn k-1, never more than the new blocks, none when
  the cut left no user message) are an ``assistant`` message, the rest and the partial tail a ``user`` message;
  when the answer would take every new block and no tail is left, its last block goes back to the user, so
  every request ends with a user message;
- a subagent or sidecar is a conversation of its own from its own turn 0 (the harness's children are ``SPAWN``
  branches, each with its own reconstructor: weka_trace.py; a ``FORK`` would inherit the parent's messages);
- the harness's loader fixes the context mode of AgentX traces to ``DELTAS_WITH_RESPONSES``
  (weka_trace.py ``_resolved_context_mode``): each turn carries the *recorded* answers and the live ones are
  discarded (session_manager.py ``should_store_response`` is true only for ``DELTAS_WITHOUT_RESPONSES``).
  That is ``context: recorded``, the default and the only valid submission. The prefix is then byte-identical
  from turn to turn and play to play of a tree, whatever the server answered.

``context: live`` is benchcamp's own (the harness's ``DELTAS_WITHOUT_RESPONSES``, which it uses for ordinary
multi-turn chat datasets, never for AgentX traces): each assistant message carries the text the server streamed
for that turn in this play, in place of the recorded blocks; a turn this play did not send (before its start
t*) keeps its recorded answer, and a compaction that cuts inside a live answer keeps the recorded blocks up to
the cut (the trace rewrote that history). It makes the run an unsafe override. What it changes: the answer's
length (a warm-up at ``max_tokens=1`` leaves a 1-token answer in every later context) and, on a server whose
prefix cache keeps the full blocks it generated (vLLM's does) and whose tokenizer reads the answer back as it
wrote it, a cache hit on the answer where ``recorded`` prefills it.

In virtual time there is no text: ``live`` means the answer's generated token count (the ``max_tokens`` sent:
``ignore_eos`` and ``min_tokens`` force it) replaces the recorded answer's blocks in the next turn's context,
and the blocks from the first live answer on are new ids chained on the content before them
(``live_prompt``), exactly the tokens the simulated engine sees on the wall clock (its answer text is one word
per token): both clocks get the same prompt lengths and the same prefix structure. Neither simulator caches
generated blocks, so the answer itself is a miss in both.

Kept differences from the harness: benchcamp's bust changes the token ids after the tool + system prefix
instead of inserting a ``[rid:...]`` marker; the harness's two-pass cap on assistant blocks for block-aligned
pull-backs (``compute_asst_block_caps``) is not applied; the request's tail is benchcamp's (``max_tokens``,
``min_tokens`` and ``ignore_eos``; the harness sends ``max_completion_tokens`` and ``ignore_eos``); the system
message is the session's ``fixed_blocks`` (the prefix in whole blocks, rounded down; the harness rounds up); the
cut never goes past the blocks the conversation holds (the harness's planner clamps the same way). The simulated
engine counts chat made of benchcamp's words word for word (no chat-template tokens), so there ``recorded`` chat
and token ids are the same tokens and cache hits (its front end's cost per request still differs).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from benchcamp.loadgen.body import _model_json, _prompt_bytes, _tail
from benchcamp.workload.model import Request, Session

_MASK63 = (1 << 63) - 1
CONTEXTS = ("recorded", "live")


@dataclass(frozen=True)
class Segment:
    """One message on the recorded block grid: ``blocks`` full blocks from ``start``, then ``tail`` tokens of the
    next block (the trailing user message only). ``answer``: the turn whose answer an assistant message is."""

    role: str
    start: int
    blocks: int
    tail: int = 0
    answer: int | None = None


def seg_tokens(s: Segment, block_size: int) -> int:
    return s.blocks * block_size + s.tail


def _lcp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _cut(segs: list[Segment], target: int) -> list[Segment]:
    """The conversation cut back to ``target`` full blocks (weka_synth_buf.py ``truncate_synth_buf_at_block``):
    a partial tail at the cut goes; a segment cut inside keeps its leading blocks, and an answer cut inside is
    no longer the answer it was (its recorded blocks stand)."""
    if target <= 0:
        return []
    out: list[Segment] = []
    cursor = 0
    for s in segs:
        if cursor + s.blocks < target:
            out.append(s)
            cursor += s.blocks
            continue
        if cursor + s.blocks == target:
            out.append(s if not s.tail else Segment(s.role, s.start, s.blocks, 0, s.answer))
        elif cursor < target:
            out.append(Segment(s.role, s.start, target - cursor))
        return out
    return out


def _answer_caps(requests: list[Request], bs: int) -> list[int | None]:
    """The most blocks each turn's answer may take (weka_synth_buf.py ``compute_asst_block_caps``, the harness's
    first pass): a later turn that only cuts back (no new token) must end on a user block, so the turn that
    created that block keeps it out of its answer. None: no bound."""
    caps: list[int | None] = [None] * len(requests)
    tile: list[int] = []  # the turn that created each block of the conversation
    cut_at = [0] * len(requests)
    for k, r in enumerate(requests):
        covered = min(len(r.blocks), int(r.prompt_len) // bs)
        if k == 0:
            tile = [0] * covered
            continue
        lcp = min(_lcp(requests[k - 1].blocks, r.blocks), len(tile))
        cut_at[k] = lcp
        new = max(0, covered - lcp)
        if new == 0 and int(r.prompt_len) - covered * bs == 0 and lcp >= 1:
            owner = tile[lcp - 1]
            bound = (lcp - 1) - cut_at[owner]
            had = caps[owner]
            if owner != 0 and bound >= 0:
                caps[owner] = bound if had is None else min(had, bound)
        del tile[lcp:]
        tile.extend([k] * new)
    return caps


def conversation(session: Session, block_size: int) -> dict[int, tuple[Segment, ...]]:
    """Each recorded turn of ``session`` as the harness's messages (turn number -> segments), from its recorded
    requests: the bust of a play XORs block ids one to one, so the cuts are the same for every play."""
    bs = int(block_size)
    out: dict[int, tuple[Segment, ...]] = {}
    segs: list[Segment] = []
    prev: Request | None = None
    caps = _answer_caps(session.requests, bs)
    for k, r in enumerate(session.requests):
        full = int(r.prompt_len) // bs
        covered = min(len(r.blocks), full)
        tail = int(r.prompt_len) - covered * bs
        if prev is None:
            fixed = min(int(session.fixed_blocks or 0), covered)
            segs = [Segment("system", 0, fixed)] if fixed > 0 else []
            if covered - fixed > 0 or tail or not segs:
                segs.append(Segment("user", fixed, covered - fixed, tail))
        else:
            lcp = min(_lcp(prev.blocks, r.blocks), sum(s.blocks for s in segs), covered)
            segs = _cut(segs, lcp)
            new = max(0, covered - lcp)
            asst = math.ceil(prev.output_len / bs) if prev.output_len > 0 else 0
            if not any(s.role == "user" for s in segs):
                asst = 0  # the cut left no user message: the conversation resumes at one
            cap = caps[k]
            asst = min(asst, new, new if cap is None else cap)
            if tail == 0 and asst == new and asst > 0:
                asst -= 1  # every request ends with a user message
            if asst:
                segs.append(Segment("assistant", lcp, asst, 0, int(prev.turn)))
            if new - asst or tail:
                segs.append(Segment("user", lcp + asst, new - asst, tail))
        out[int(r.turn)] = tuple(segs)
        prev = r
    return out


def chat_messages_body(
    model: str,
    segs: tuple[Segment, ...],
    request: Request,
    block_size: int,
    vocab_size: int,
    salt: int,
    answers: Mapping[int, str] | None = None,
    vllm_sampling: bool = True,
) -> bytes:
    """The streamed chat request of one turn: each segment's words from the played request's blocks (its bust
    applied), or, under ``context: live``, an assistant message's streamed text from ``answers`` (turn -> text)."""
    bs = int(block_size)
    parts = []
    for s in segs:
        live = answers.get(s.answer) if answers and s.answer is not None else None
        if live is not None:
            content = json.dumps(live).encode()
        else:
            n = seg_tokens(s, bs)
            blocks = request.blocks[s.start : s.start + s.blocks + (1 if s.tail else 0)]
            content = b'"' + (_prompt_bytes("text", blocks, n, bs, vocab_size, salt) if n else b"") + b'"'
        parts.append(b'{"role":"' + s.role.encode() + b'","content":' + content + b"}")
    return b"".join(
        (
            b'{"model":',
            _model_json(model),
            b',"messages":[',
            b",".join(parts),
            b"]",
            _tail(request.output_len, vllm_sampling),
        )
    )


def _runs(segs: tuple[Segment, ...], answers: Mapping[int, int], bs: int) -> list[tuple[str, int, int]]:
    """The prompt as runs of tokens: ("r", first, end) on the recorded grid, ("a", turn, n) a live answer."""
    runs: list[tuple[str, int, int]] = []
    for s in segs:
        n = answers.get(s.answer) if s.answer is not None else None
        if n is not None:
            runs.append(("a", s.answer, int(n)))  # type: ignore[arg-type]
        else:
            runs.append(("r", s.start * bs, s.start * bs + seg_tokens(s, bs)))
    return runs


class LivePrompts:
    """One play's prompts under ``context: live`` in token terms (virtual time, and the wall clock's expected
    prompt lengths): ``prompt`` gives a turn's (blocks, prompt_len) with the answers' token counts in place of
    the recorded ones. Until the first live answer the blocks are the played blocks; from it on, each block's id
    is a digest of the block before it and of its content (recorded tokens by block id and offset, answer tokens
    by count: the simulated engine's answer is one same word per token), so a turn shares exactly the blocks
    whose tokens it shares with the turn before. Blocks are reused from the previous turn up to where its
    runs differ, so a turn costs its new tokens only."""

    def __init__(self, block_size: int) -> None:
        self.bs = int(block_size)
        self._runs: list[tuple[str, int, int]] = []
        self._blocks: list[int] = []

    def prompt(
        self, segs: tuple[Segment, ...], request: Request, answers: Mapping[int, int]
    ) -> tuple[tuple[int, ...], int]:
        bs = self.bs
        runs = _runs(segs, answers, bs)
        total = sum(e - a if k == "r" else e for k, a, e in runs)
        # tokens shared with the previous turn's prompt, from the start
        same = 0
        for old, new in zip(self._runs, runs):
            if old == new:
                same += old[2] - old[1] if old[0] == "r" else old[2]
                continue
            if old[0] == new[0] == "r" and old[1] == new[1]:
                same += min(old[2], new[2]) - old[1]
            break
        keep = min(same // bs, len(self._blocks))
        blocks = self._blocks[:keep]
        # the token stream from block ``keep`` on, as pieces (kind, key, n)
        pos = 0
        pieces: list[tuple[str, int, int, int]] = []  # (kind, start offset or turn, from, to) per run
        for k, a, e in runs:
            n = e - a if k == "r" else e
            pieces.append((k, a, pos, pos + n))
            pos += n
        live_seen = False
        i = 0
        for b in range(keep, (total + bs - 1) // bs):
            lo, hi = b * bs, min((b + 1) * bs, total)
            while pieces[i][3] <= lo:
                live_seen = live_seen or pieces[i][0] == "a"
                i += 1
            if not live_seen and pieces[i][0] == "r" and pieces[i][1] - pieces[i][2] == 0:
                # still on the recorded grid (no live answer before): the played block itself
                blocks.append(int(request.blocks[(pieces[i][1] + lo - pieces[i][2]) // bs]))
                continue
            content = []
            j = i
            while j < len(pieces) and pieces[j][2] < hi:
                k, key, p0, p1 = pieces[j]
                a, z = max(lo, p0), min(hi, p1)
                j += 1
                if z <= a:
                    continue
                if k == "r":
                    t0 = key + a - p0  # recorded token offset
                    content.append(f"r{int(request.blocks[t0 // bs])}:{t0 % bs}:{z - a}")
                else:
                    content.append(f"a{z - a}")
            prev = blocks[-1] if blocks else 0
            d = hashlib.blake2b(f"{prev}|{'|'.join(content)}".encode(), digest_size=8).digest()
            blocks.append((int.from_bytes(d, "big") & _MASK63) or 1)
        self._runs, self._blocks = runs, blocks
        return tuple(blocks), total


def live_requests(
    session: Session, played: list[Request], block_size: int, convo: Mapping[int, tuple[Segment, ...]] | None = None
) -> list[Request]:
    """One play's requests under ``context: live`` in virtual time: each turn's context with the answers this
    play generated before it (their ``output_len``, forced by ``ignore_eos`` and ``min_tokens``) in place of
    the recorded ones (``LivePrompts``). ``convo``: ``conversation(session)``, when the caller keeps it."""
    from dataclasses import replace

    convo = convo if convo is not None else conversation(session, block_size)
    prompts = LivePrompts(block_size)
    answers: dict[int, int] = {}
    out = []
    for r in played:
        blocks, n = prompts.prompt(convo[int(r.turn)], r, answers)
        out.append(r if (blocks, n) == (r.blocks, r.prompt_len) else replace(r, blocks=blocks, prompt_len=n))
        answers[int(r.turn)] = int(r.output_len)
    return out
