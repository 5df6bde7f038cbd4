"""Paged KV cache with block-hash prefix caching, counted in blocks of ``block_size`` tokens.

Blocks are free (no content), cached (a full prompt block with a known chained
hash, possibly shared) or private (held by one request: its partial last block,
decode tokens, or a duplicate of a block another request cached first).
Prefix-cache statistics are in tokens, as vLLM counts them: ``queries`` = prompt
tokens looked up, ``hits`` = tokens found cached.

Cached blocks live in a radix tree of hash runs (as SGLang's RadixAttention):
a node holds consecutive chained hashes, its children continue them (keyed by
their first hash), and its ``ref`` counts the requests whose prefix runs through
its end. Taking or dropping a reference costs O(depth of the tree), not
O(blocks): a 30K-token agentic prompt has ~2000 blocks but a path of a few dozen
nodes. Splitting a node when a request holds part of it keeps refs exact.
Matching walks the tree along the prompt: a child per node (one dict lookup),
and inside a node's run a binary search, since hashes are chained: a run and the
prompt agree at block i exactly when they agree on every block up to i. No
per-block index is kept: it cost a dict insert per cached block and a delete per
evicted one, most of a rack-scale simulation's memory traffic.

Eviction: allocation takes free blocks first, then evicts from the tail of the
least recently released unreferenced leaf, so a prefix's later blocks go before
its earlier ones and the cached set stays prefix-closed.
Second tier (CPU offload, ``cpu_blocks`` > 0; vLLM's ``--kv-offloading-size``):
an LRU of block hashes in host memory, exclusive of the GPU tree. Blocks the GPU
evicts go to it (a leaf's blocks deepest first, so a prefix's earlier blocks
are the more recent and outlive its later ones); when it is full its least
recently stored block is dropped. A lookup continues the GPU match into it
(``match_cpu``); the hit blocks are loaded back (``take_cpu``) and become GPU
blocks again, which the scheduler pays for as a host-to-GPU transfer. vLLM's
offloading connector and LMCache store every computed block as it is made
(write-through, a block may sit in both tiers); moving it on eviction instead
holds one more tier's worth of distinct blocks for the same size, and the
difference in hit rate is that double counting.

Differences from vLLM, on purpose: blocks of generated tokens are not hashed
(a later prompt never contains the simulator's synthetic outputs); free empty
blocks are used before cached ones (vLLM keeps one LRU queue for both); LRU
order is per tree node rather than per block.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence


class Node:
    __slots__ = ("hashes", "key", "start", "parent", "children", "ref", "last", "alive")

    def __init__(self, hashes: list[int], parent: Node | None, start: int = 0):
        self.hashes = hashes
        self.key = hashes[0] if hashes else 0  # its entry in parent.children
        self.start = start  # block position of hashes[0] in the prompt
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.ref = 0
        self.last = 0
        self.alive = True


class KVCache:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, cpu_blocks: int = 0):
        if num_blocks < 1:
            raise ValueError(f"KV cache needs at least one block (got {num_blocks})")
        if cpu_blocks < 0:
            raise ValueError(f"the CPU tier cannot hold a negative number of blocks (got {cpu_blocks})")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.root = Node([], None)
        self.root.ref = 1  # never evicted
        self.free = num_blocks  # empty blocks
        self.cached_blocks = 0  # blocks in the tree
        self.evictable_blocks = 0  # blocks in the tree with ref == 0
        self.queries = 0  # tokens looked up
        self.hits = 0  # tokens found cached
        self.evictions = 0  # blocks evicted
        self._tick = 0
        self._leaves: list[tuple[int, int, Node]] = []  # (last, seq, node): evictable leaf candidates
        self._seq = 0
        # second tier: hash -> None, least recently stored first; nothing to offload without prefix caching
        self.cpu_blocks = cpu_blocks if enable_prefix_caching else 0
        self.cpu: OrderedDict[int, None] = OrderedDict()
        self.cpu_queries = 0  # tokens looked up in the CPU tier (the GPU tier missed them)
        self.cpu_hits = 0  # tokens found there
        self.offloaded = 0  # blocks moved GPU -> CPU
        self.loaded = 0  # blocks moved CPU -> GPU
        self.cpu_evictions = 0  # blocks dropped from the CPU tier

    # -- accounting ----------------------------------------------------------
    @property
    def available(self) -> int:
        return self.free + self.evictable_blocks

    @property
    def used(self) -> int:
        return self.num_blocks - self.available

    @property
    def usage(self) -> float:
        return self.used / self.num_blocks

    def record_lookup(self, query_tokens: int, hit_tokens: int, cpu_hit_tokens: int = 0) -> None:
        """A request's first lookup: ``hit_tokens`` from the GPU tier, then ``cpu_hit_tokens``
        from the CPU tier out of the rest (vLLM's prefix-cache and external prefix-cache counters)."""
        self.queries += query_tokens
        self.hits += hit_tokens
        if self.cpu_blocks:
            self.cpu_queries += query_tokens - hit_tokens
            self.cpu_hits += cpu_hit_tokens

    # -- lookup --------------------------------------------------------------
    def match(self, hashes: Sequence[int], max_blocks: int | None = None) -> tuple[Node, int, int]:
        """Longest cached prefix of ``hashes`` (at most ``max_blocks``):
        (deepest node reached, blocks matched inside it, blocks matched in total)."""
        limit = len(hashes) if max_blocks is None else min(len(hashes), max_blocks)
        node, pos = self.root, 0
        if not self.enable_prefix_caching:
            return node, 0, 0
        hs: list[int] = hashes if isinstance(hashes, list) else list(hashes)  # compiled: fast list indexing
        while pos < limit:
            child = node.children.get(hs[pos])
            if child is None:
                break
            run = child.hashes
            m = min(len(run), limit - pos)
            if run[m - 1] != hs[pos + m - 1]:  # they part inside the run: the last block both hold
                lo, hi = 1, m - 1  # run[0] == hs[pos] (its key); run[m - 1] differs
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if run[mid - 1] == hs[pos + mid - 1]:
                        lo = mid
                    else:
                        hi = mid - 1
                return child, lo, pos + lo
            pos += m
            if m < len(run):
                return child, m, pos
            node = child
        return node, (len(node.hashes) if pos else 0), pos

    def match_prefix(self, hashes: Sequence[int], max_blocks: int | None = None) -> int:
        """Blocks of the longest prefix held in either tier."""
        gpu = self.match(hashes, max_blocks)[2]
        return gpu + self.match_cpu(hashes, gpu, max_blocks)

    def match_cpu(self, hashes: Sequence[int], start: int, max_blocks: int | None = None) -> int:
        """How many of ``hashes[start:]`` (at most ``max_blocks`` in all) the CPU tier holds in a row."""
        cpu = self.cpu
        if not cpu:
            return 0
        end = len(hashes) if max_blocks is None else min(len(hashes), max_blocks)
        i = start
        while i < end and hashes[i] in cpu:
            i += 1
        return i - start

    def take_cpu(self, hashes: Sequence[int]) -> None:
        """Load these blocks back: they leave the CPU tier (the caller gives them GPU blocks)."""
        cpu = self.cpu
        for h in hashes:
            del cpu[h]
        self.loaded += len(hashes)

    def _offload(self, hashes: Sequence[int]) -> None:
        """GPU-evicted blocks (in prefix order) enter the CPU tier, deepest first."""
        cpu, cap = self.cpu, self.cpu_blocks
        for h in reversed(hashes):
            if h in cpu:
                cpu.move_to_end(h)
            else:
                cpu[h] = None
        self.offloaded += len(hashes)
        over = len(cpu) - cap
        if over > 0:
            self.cpu_evictions += over
            for _ in range(over):
                cpu.popitem(last=False)

    # -- references ----------------------------------------------------------
    def acquire(self, node: Node, k: int) -> Node:
        """Reference the path root..node[:k]; returns the node that now ends the held path."""
        if k < len(node.hashes):
            node = self._split(node, k)
        n = node
        while n is not self.root:
            if n.ref == 0:
                self.evictable_blocks -= len(n.hashes)
            n.ref += 1
            n = n.parent  # type: ignore[assignment]
        return node

    def release(self, node: Node, private: int) -> None:
        """Drop a request's path reference (from ``node`` up) and free its private blocks."""
        self.free += private
        self._tick += 1
        n = node
        while n is not self.root:
            n.ref -= 1
            if n.ref == 0:
                self.evictable_blocks += len(n.hashes)
                n.last = self._tick
                if not n.children:
                    self._push_leaf(n)
            n = n.parent  # type: ignore[assignment]

    def extend(self, node: Node, hashes: Sequence[int]) -> tuple[Node, int]:
        """Register a request's newly computed full blocks after its held path ``node``.

        Turns that many of its private blocks into cached ones; returns (new end
        of its path, blocks registered). Registration stops at a block some
        other request cached first (it stays private), or when caching is off.
        """
        if not self.enable_prefix_caching or not hashes or hashes[0] in node.children:
            return node, 0
        if node is not self.root and node.ref == 1 and not node.children:
            node.hashes.extend(hashes)  # the path's sole holder: grow it in place
        else:
            child = Node(list(hashes), node, node.start + len(node.hashes))
            child.ref = 1
            node.children[hashes[0]] = child
            node = child
        if self.cpu:  # recomputed behind a gap in the CPU tier: its stale copy there goes
            cpu = self.cpu
            for h in hashes:
                cpu.pop(h, None)
        self.cached_blocks += len(hashes)
        return node, len(hashes)

    # -- allocation ------------------------------------------------------------
    def allocate(self, n: int) -> bool:
        """Take ``n`` blocks: free ones first, then evict LRU unreferenced cached ones."""
        if n <= 0:
            return True
        if n > self.free + self.evictable_blocks:
            return False
        take = min(n, self.free)
        self.free -= take
        n -= take
        while n > 0:
            last, _, leaf = heapq.heappop(self._leaves)
            if not leaf.alive or leaf.ref or leaf.children or leaf.last != last:
                continue  # stale entry
            k = min(n, len(leaf.hashes))
            gone = leaf.hashes[len(leaf.hashes) - k :]
            if self.cpu_blocks:
                self._offload(gone)
            del leaf.hashes[len(leaf.hashes) - k :]
            n -= k
            self.cached_blocks -= k
            self.evictable_blocks -= k
            self.evictions += k
            if leaf.hashes:
                self._push_leaf(leaf)  # partly evicted: still the oldest
            else:
                self._drop(leaf)
        return True

    # -- tree surgery ------------------------------------------------------------
    def _push_leaf(self, n: Node) -> None:
        self._seq += 1
        heapq.heappush(self._leaves, (n.last, self._seq, n))

    def _drop(self, leaf: Node) -> None:
        leaf.alive = False
        parent = leaf.parent
        assert parent is not None
        del parent.children[leaf.key]
        if parent is not self.root and parent.ref == 0 and not parent.children:
            self._push_leaf(parent)

    def _split(self, node: Node, k: int) -> Node:
        """Cut ``node`` after its first k hashes; returns the new upper part (node keeps the rest)."""
        parent = node.parent
        assert parent is not None and 0 < k < len(node.hashes)
        upper = Node(node.hashes[:k], parent, node.start)
        upper.ref, upper.last = node.ref, node.last
        parent.children[upper.key] = upper
        node.hashes = node.hashes[k:]
        node.key = node.hashes[0]
        node.start += k
        node.parent = upper
        upper.children[node.key] = node
        return upper

    # -- introspection (tests) -------------------------------------------------
    def cached(self, h: int) -> bool:
        """Whether some node holds block hash ``h`` (a walk over the whole tree)."""
        todo = [self.root]
        while todo:
            n = todo.pop()
            if h in n.hashes:
                return True
            todo.extend(n.children.values())
        return False

    def in_cpu(self, h: int) -> bool:
        return h in self.cpu
