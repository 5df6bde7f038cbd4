"""The one table printer of bench/: rows of cells as aligned text or Markdown, and the side-by-side
comparison (one row per figure, a column per client, the ratio of the second to the first)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any


def ratio(a: Any, b: Any) -> float | None:
    """b / a when both are finite numbers and a is not 0; else None."""
    ok = (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and a != 0
          and math.isfinite(a) and math.isfinite(b))
    return b / a if ok else None


def number(v: Any, spec: str = ",.1f") -> str:
    """A cell: ``-`` for None or NaN, strings as they are, numbers by ``spec`` (a format spec)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, str):
        return v
    return format(v, spec)


def figure(result: dict, key: str | None, done: str = "completed") -> Any:
    """A side-by-side row's value from a client's result: key None is "done/sent" (``done`` counts what finished),
    ``cache_hit`` the server's /metrics hit rate (``result["cache"]["hit_rate"]``), else ``result[key]``."""
    if key is None:
        return f"{result.get(done, '-')}/{result.get('sent', '-')}"
    if key == "cache_hit":
        return (result.get("cache") or {}).get("hit_rate")
    return result.get(key)


def figure_format(spec: str = ",.1f") -> Callable[[Any, Any], str]:
    """Cells of a side-by-side table: hit rates (keys ``cache_hit*``) as percentages, other numbers by ``spec``."""

    def fmt(v: Any, key: Any) -> str:
        return number(v, ".1%" if isinstance(key, str) and key.startswith("cache_hit") else spec)

    return fmt


def render(head: Sequence[str], rows: Sequence[Sequence[Any]], widths: Sequence[int] | None = None,
           align: str | None = None, rule: bool = False, markdown: bool = False) -> str:
    """Rows of cells under ``head`` (none: no head line): text columns padded to ``widths`` (default: the widest
    cell, two spaces apart), ``align`` one of ``<`` / ``>`` per column (default: the first left, the rest right), a
    dashed ``rule`` under the head; or, with ``markdown``, a pipe table (its own alignment row)."""
    n = max([len(head), *(len(r) for r in rows)])

    def pad(r: Sequence[Any]) -> list[str]:
        return [str(c) for c in r] + [""] * (n - len(r))

    cells = ([pad(head)] if head else []) + [pad(r) for r in rows]
    align = align or "<" + ">" * (n - 1)
    if markdown:
        sep = ["---:" if a == ">" else ":---" for a in align]
        return "\n".join("| " + " | ".join(r) + " |" for r in [cells[0], sep, *cells[1:]])
    w = list(widths) if widths else [max(len(r[i]) for r in cells) for i in range(n)]
    gap = "" if widths else "  "
    lines = [gap.join(f"{c:{a}{wi}}" for c, a, wi in zip(r, align, w)) for r in cells]
    if rule and head:
        lines.insert(1, gap.join("-" * wi for wi in w))
    return "\n".join(line.rstrip() for line in lines)


def compare(rows: Sequence[tuple[str, Any]], results: Sequence[dict], names: Sequence[str],
            value: Callable[[dict, Any], Any] = lambda r, k: r.get(k),
            fmt: Callable[[Any, Any], str] = lambda v, k: number(v), ratio_of: tuple[int, int] | None = (0, 1),
            ratio_spec: str = ".3f", label_width: int = 0, width: int = 14, ratio_width: int = 9,
            after: Sequence[tuple[str, dict]] = (), after_width: int = 16, markdown: bool = False) -> str:
    """Side by side: for each (label, key) of ``rows``, ``value(result, key)`` of every result formatted by
    ``fmt(value, key)``, the ratio of results[j] to results[i] (``ratio_of = (i, j)``) when both are numbers, then
    the ``after`` columns ((name, result) each: a reference beside the pair)."""
    head = ["", *names, *(["ratio"] if ratio_of else []), *(name for name, _ in after)]
    body = []
    for label, key in rows:
        vals = [value(r, key) for r in results]
        cells = [label, *(fmt(v, key) for v in vals)]
        if ratio_of:
            rt = ratio(vals[ratio_of[0]], vals[ratio_of[1]])
            cells.append(format(rt, ratio_spec) if rt is not None else "")
        cells += [fmt(value(r, key), key) for _, r in after]
        body.append(cells)
    if markdown:
        return render(head, body, markdown=True)
    lw = label_width or max(len(r[0]) for r in body)
    widths = [lw, *[width] * len(names), *([ratio_width] if ratio_of else []), *[after_width] * len(after)]
    return render(head, body, widths=widths)
