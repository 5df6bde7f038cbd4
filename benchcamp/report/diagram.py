"""The deployment a report's points ran on: the topology's roles and GPUs as a small inline SVG and one text line
(``benchcamp.topology.candidates.diagram``). Every point of a campaign runs on the same topology."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from benchcamp.topology.model import Topology

if TYPE_CHECKING:
    from benchcamp.config import Config

_COLORS = {"unified": "#4c72b0", "prefill": "#dd8452", "decode": "#55a868"}
_CELL, _GAP, _PER_ROW = 9, 2, 24  # GPU squares: size, gap (px), squares per row


def svg(topo: Topology) -> str:
    """Roles left to right (prefill -> decode), each a box of its instances with one square per GPU."""
    boxes, x, height = [], 8, 0
    for kind, role in topo.roles():
        per_row = min(_PER_ROW, max(1, role.gpus))
        rows = -(-role.gpus // per_row)
        w = max(150, per_row * (_CELL + _GAP) + 12)
        h = 44 + rows * (_CELL + _GAP)
        height = max(height, h)
        label = f"{kind}: {role.instances}x TP{role.tensor_parallel_size} DP{role.data_parallel_size}" + (
            f" EP{role.expert_parallel_size}" if role.enable_expert_parallel else ""
        )
        extra = f"{role.gpus} GPU" + (
            f", {role.speculative.method}{role.speculative.num_speculative_tokens}"
            if role.speculative and kind != "prefill"
            else ""
        )
        cells = []
        for i in range(role.gpus):
            # a gap between instances: shade alternate instances
            inst = i // max(role.gpus_per_instance, 1)
            cx = x + 6 + (i % per_row) * (_CELL + _GAP)
            cy = 38 + (i // per_row) * (_CELL + _GAP)
            cells.append(
                f'<rect x="{cx}" y="{cy}" width="{_CELL}" height="{_CELL}" fill="{_COLORS[kind]}" '
                f'opacity="{1.0 if inst % 2 == 0 else 0.6}"/>'
            )
        boxes.append(
            f'<rect x="{x}" y="4" width="{w}" height="{h}" rx="4" fill="none" stroke="{_COLORS[kind]}"/>'
            f'<text x="{x + 6}" y="18" font-size="11">{escape(label)}</text>'
            f'<text x="{x + 6}" y="31" font-size="10" fill="#555">{escape(extra)}</text>' + "".join(cells)
        )
        x += w + 36
    arrows = ""
    if topo.disaggregated:  # the KV hand-off between the two boxes
        pw = max(150, min(_PER_ROW, max(1, topo.role("prefill").gpus)) * (_CELL + _GAP) + 12)
        ax = 8 + pw
        arrows = (
            f'<line x1="{ax + 2}" y1="24" x2="{ax + 30}" y2="24" stroke="#333" marker-end="url(#kv)"/>'
            f'<text x="{ax + 4}" y="40" font-size="9">KV</text>'
        )
    return (
        f'<svg class="topology" width="{x}" height="{height + 10}" '
        f'role="img" aria-label="deployment topology">'
        '<defs><marker id="kv" markerWidth="6" markerHeight="6" refX="5" refY="3" orient="auto">'
        '<path d="M0,0 L6,3 L0,6 z" fill="#333"/></marker></defs>' + "".join(boxes) + arrows + "</svg>"
    )


def section(cfg: Config) -> str:
    """The report's topology block (the config's topology, or its single engine as one): the text diagram,
    then the SVG."""
    from benchcamp.config import topology_of
    from benchcamp.topology.candidates import diagram

    topo = topology_of(cfg)
    return (
        f'<p class="topology">Topology (every point): <code>{escape(diagram(topo, cfg.hardware.gpu))}</code></p>'
        + svg(topo)
    )
