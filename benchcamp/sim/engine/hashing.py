"""Prefix-cache block hashes, chained over the token ids of each full block.

``h_i = hash((h_{i-1}, tokens of block i))`` with Python's built-in hash of a
tuple of ints, deterministic across processes (only str/bytes hashing is
salted). Two prompts share ``h_i`` exactly when their first ``i+1`` blocks of
token ids are equal, as in vLLM. A partial last block has no hash.

- ``block_hashes_from_tokens`` is the HTTP server's path (it receives token ids);
- ``block_hashes_from_workload`` gives the *identical* values for a workload
  prompt (the token ids ``benchcamp.workload.tokens`` synthesises), without
  materialising whole prompts;
- ``WorkloadHasher(exact=False)`` is the simulator's fast path: it chains over
  (workload block id, sub-block index) instead of token ids. The values differ
  from the token hashes but the equality structure is the same, which is all a
  cache can observe: two prompts of one workload have equal token prefixes of
  i engine blocks iff their first i (block id, sub-index) keys are equal,
  because tokens are a deterministic function of the block id (so equal keys
  give equal tokens) and distinct block ids give distinct token blocks
  (distinct hash seeds, then block_size pseudo-random ids from a vocabulary of
  tens of thousands: a collision has probability ~ V^-block_size).
  ``tests/sim/engine/test_kvcache.py`` checks the equivalence on sampled prompts.
  It skips synthesising and hashing the tokens, and it reuses the hashes of
  the previous turn of the same session (``base``), so a turn costs O(new blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

from benchcamp.workload.tokens import block_tokens, prompt_tokens

ROOT_HASH = 0x6265_6E63_6863_616D  # "benchcam": the parent of a prompt's first block
DEFAULT_VOCAB = 32000
_MEMO_LIMIT = 1_000_000  # memoised (previous hash, workload block) steps per hasher


def block_hashes_from_tokens(token_ids: Sequence[int], block_size: int) -> list[int]:
    out: list[int] = []
    prev = ROOT_HASH
    ids = tuple(int(t) for t in token_ids)
    for start in range(0, len(ids) - block_size + 1, block_size):
        prev = hash((prev, ids[start : start + block_size]))
        out.append(prev)
    return out


class WorkloadHasher:
    """Engine block hashes of workload prompts (``exact``: the token-id hashes themselves)."""

    def __init__(
        self, workload_block_size: int, engine_block_size: int, vocab_size: int = DEFAULT_VOCAB, exact: bool = False
    ):
        self.wbs, self.ebs, self.vocab, self.exact = workload_block_size, engine_block_size, vocab_size, exact
        self.aligned = workload_block_size % engine_block_size == 0
        self.per = workload_block_size // engine_block_size if self.aligned else 0
        # an engine block of `group` whole workload blocks (vLLM's V4 recipes: 256-token blocks over 64-token ones)
        self.group = engine_block_size // workload_block_size if engine_block_size % workload_block_size == 0 else 0
        self._memo: dict[tuple[int, int], tuple[int, ...]] = {}

    def hashes(
        self, blocks: Sequence[int], prompt_len: int, base: tuple[Sequence[int], int, list[int]] | None = None
    ) -> list[int]:
        """Hashes of the full engine blocks of the prompt; ``base`` = (blocks, prompt_len,
        hashes) of an earlier prompt, reused when this one extends it."""
        ebs = self.ebs
        n_full = prompt_len // ebs
        if not self.aligned:
            if prompt_len > len(blocks) * self.wbs:
                raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {self.wbs} tokens")
            if self.exact:
                return block_hashes_from_tokens(prompt_tokens(blocks, prompt_len, self.wbs, self.vocab), ebs)
            if self.group:  # key each engine block by its workload block ids
                out = self._reused(blocks, prompt_len, base, n_full)
                g, prev = self.group, out[-1] if out else ROOT_HASH
                for i in range(len(out), n_full):
                    prev = hash((prev, tuple(blocks[i * g : (i + 1) * g])))
                    out.append(prev)
                return out
            # Not aligned: key each engine block by its (block id, offset) pieces.
            return self._piece_keys(blocks, n_full)
        out = self._reused(blocks, prompt_len, base, n_full)
        prev = out[-1] if out else ROOT_HASH
        per, memo = self.per, self._memo
        j = len(out) // per  # first workload block not covered by `out`
        skip = len(out) - j * per  # its sub-blocks already in `out`
        need = -(-n_full // per)  # workload blocks holding the full engine blocks
        if skip:
            prev = out[j * per - 1] if j else ROOT_HASH
            del out[j * per :]
        if per == 1 and not self.exact:  # one engine block per workload block: nothing to memoise
            for bid in blocks[j:need]:
                prev = hash((prev, int(bid), 0))
                out.append(prev)
            return out
        while j < need:
            bid = int(blocks[j])
            subs = memo.get((prev, bid))
            if subs is None:
                subs = self._subs(prev, bid)
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                memo[(prev, bid)] = subs
            out.extend(subs)
            prev = subs[-1]
            j += 1
        del out[n_full:]
        return out

    @staticmethod
    def _reused(blocks: Sequence[int], prompt_len: int, base: tuple | None, n_full: int) -> list[int]:
        """The hashes of ``base`` (an earlier prompt's blocks, length, hashes) that this prompt shares: all of its
        full blocks' when this prompt extends it, else none."""
        if base is not None:
            b_blocks, b_len, b_hashes = base
            nb = len(b_blocks)
            if prompt_len >= b_len and len(blocks) >= nb and tuple(blocks[:nb]) == tuple(b_blocks):
                return list(b_hashes[:n_full])
        return []

    def _subs(self, prev: int, bid: int) -> tuple[int, ...]:
        """The chained hashes of one workload block's engine sub-blocks, after ``prev``."""
        out = []
        if self.exact:
            toks, ebs = block_tokens(bid, self.wbs, self.vocab), self.ebs
            for s in range(self.per):
                prev = hash((prev, toks[s * ebs : (s + 1) * ebs]))
                out.append(prev)
        else:
            for s in range(self.per):
                prev = hash((prev, bid, s))
                out.append(prev)
        return tuple(out)

    def _piece_keys(self, blocks: Sequence[int], n_full: int) -> list[int]:
        out, prev, wbs, ebs = [], ROOT_HASH, self.wbs, self.ebs
        for i in range(n_full):
            a, b = i * ebs, (i + 1) * ebs
            pieces = tuple(
                (int(blocks[t // wbs]), t % wbs, min(b, (t // wbs + 1) * wbs) - t) for t in _starts(a, b, wbs)
            )
            prev = hash((prev, pieces))
            out.append(prev)
        return out


def _starts(a: int, b: int, wbs: int) -> list[int]:
    out, t = [], a
    while t < b:
        out.append(t)
        t = (t // wbs + 1) * wbs
    return out


def block_hashes_from_workload(
    blocks: Sequence[int],
    prompt_len: int,
    workload_block_size: int,
    engine_block_size: int,
    vocab_size: int = DEFAULT_VOCAB,
) -> list[int]:
    """``block_hashes_from_tokens(prompt_tokens(blocks, prompt_len, ...), engine_block_size)``, faster.

    ``vocab_size`` must be the workload's (``Workload.vocab_size``): token ids depend on it.
    """
    if prompt_len > len(blocks) * workload_block_size:
        raise ValueError(f"prompt_len={prompt_len} exceeds {len(blocks)} blocks x {workload_block_size} tokens")
    return WorkloadHasher(workload_block_size, engine_block_size, vocab_size, exact=True).hashes(blocks, prompt_len)
