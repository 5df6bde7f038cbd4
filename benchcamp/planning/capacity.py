"""Capacity at service tiers: the largest closed-loop concurrency (concurrent agents)
whose measured point meets a tier {P90 per-user rate >= X tokens/s, P90 TTFT <= Y s}.

Pure logic: the caller passes ``measure(level, attempt) -> outcome`` (a
``benchcamp.campaign.PointOutcome`` or anything with ``valid``, ``summary``,
``reasons`` and ``label``), which runs one point in wall or virtual time.

Search, per tier, over the probes measured so far (one probe serves every tier):

1. bracket: with nothing known, probe ``start``; while every probe meets the tier,
   double the highest level that meets it (capped at ``max``); while the lowest
   probe fails, the bisection below brackets downwards (halving towards 0);
2. bisect: ``lo`` = the highest level that meets the tier, ``hi`` = the lowest level
   above it that fails; probe ``(lo + hi) // 2`` until
   ``hi - lo <= max(resolution_sessions, resolution_rel * lo)``.

Meeting a tier is assumed monotone in the level (more agents never make each one
faster); with noisy measurements the answer is the boundary the probes saw.

Validity: a probe counts only when valid (``benchcamp.metrics.validity``), with one
exception that can only fail a tier: a probe whose requests were still running when
the drain ended carries ``ttft_p90_floor_s`` (``benchcamp.metrics.ttft_p90_floor``), a
lower bound on the P90 TTFT its window would show with an endless drain; when that
floor is above a tier's TTFT, the probe fails that tier whatever the drain would
have shown, and no retry is run for it. Otherwise an invalid probe is re-run up to
``retries`` times (``attempt`` = 1, 2, ...: the measure may lengthen the window, the
fix validity names for too few requests in the window); when still undecided it is
reported and the search of every tier that needs that level stops there, with
the bound proven so far and ``status = "invalid_probe"``. Invalid probes decide
nothing else.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from benchcamp.metrics import TTFT_P90_FLOOR, Metric, agents_per_mw, watts_per_gpu

STATUS_TEXT = {
    "ok": "boundary found within the resolution",
    "at_max": "every level up to load.capacity.max meets the tier; raise load.capacity.max",
    "none": "not even 1 agent meets the tier",
    "invalid_probe": "a probe stayed invalid after its retries; the bound is what the valid probes proved",
}


class TierField(enum.StrEnum):
    """A tier's bounds as spelled in ``load.tiers`` (config), in :class:`Tier` and in each tier
    of a capacity result (``tiers`` of :meth:`CapacityResult.to_dict`)."""

    RATE = "p90_user_tok_s"  # P90 per-user rate >= this, tokens/s
    TTFT = "p90_ttft_s"  # P90 TTFT <= this, s


class Outcome(Protocol):
    label: str
    valid: bool
    summary: Mapping[str, Any]
    reasons: list[str]


@dataclass(frozen=True)
class Tier:
    name: str
    p90_user_tok_s: float
    p90_ttft_s: float

    @classmethod
    def of(cls, t: Any) -> Tier:
        get = (lambda k: t[k]) if isinstance(t, Mapping) else (lambda k: getattr(t, k))
        return cls(str(get("name")), float(get(TierField.RATE)), float(get(TierField.TTFT)))

    def meets(self, summary: Mapping[str, Any]) -> bool:
        rate, ttft = _num(summary.get(Metric.P90_USER_RATE)), _num(summary.get(Metric.TTFT_P90))
        return rate >= self.p90_user_tok_s and ttft <= self.p90_ttft_s

    def surely_fails(self, summary: Mapping[str, Any]) -> bool:
        """Whatever a longer drain would show: the P90 TTFT's lower bound (cut-off requests counted at the time
        they had waited) is already over this tier's TTFT."""
        return _num(summary.get(TTFT_P90_FLOOR)) > self.p90_ttft_s


@dataclass(frozen=True)
class SearchSettings:
    start: int = 8
    max: int = 4096
    resolution_sessions: int = 1
    resolution_rel: float = 0.0
    retries: int = 1

    @classmethod
    def of(cls, c: Any) -> SearchSettings:
        return cls(int(c.start), int(c.max), int(c.resolution_sessions), float(c.resolution_rel), int(c.retries))

    def __post_init__(self) -> None:
        if not 1 <= self.start <= self.max:
            raise ValueError(f"load.capacity: need 1 <= start ({self.start}) <= max ({self.max})")
        if self.resolution_sessions < 1 or not 0 <= self.resolution_rel < 1:
            raise ValueError("load.capacity: resolution_sessions >= 1 and 0 <= resolution_rel < 1")

    def narrow_enough(self, lo: int, hi: int) -> bool:
        return hi - lo <= max(self.resolution_sessions, math.floor(self.resolution_rel * lo))


# Probe and TierCapacity: the fields that restate a summary key are named by its Metric value,
# so readers of the result dicts index them by Metric too.
@dataclass
class Probe:
    level: int
    attempt: int  # 0 = first run of this level, 1.. = retries
    label: str
    valid: bool
    reasons: list[str]
    p90_user_tokens_per_s: float
    ttft_p90_s: float
    total_tokens_per_s_per_gpu: float
    # tier name -> met: every tier for a valid probe; for an invalid one, the tiers its TTFT floor fails
    meets: dict[str, bool] = field(default_factory=dict)
    ttft_p90_floor_s: float = math.nan  # metrics.TTFT_P90_FLOOR where requests were cut off at the drain's end


@dataclass
class TierCapacity:
    tier: str
    p90_user_tok_s: float
    p90_ttft_s: float
    max_agents: int  # highest level that met the tier (0: none)
    failed_above: int | None  # lowest level above it that failed (None: none probed)
    status: str  # ok | at_max | none | invalid_probe
    note: str
    point: str | None  # label of the probe at max_agents
    agents_per_gpu: float
    agents_per_mw: float
    total_tokens_per_s_per_gpu: float
    p90_user_tokens_per_s: float
    ttft_p90_s: float
    revenue_per_gpu_hour: float
    cost_per_gpu_hour: float
    margin_per_gpu_hour: float
    cost_per_mtok: float
    probes_used: int = 0


@dataclass
class CapacityResult:
    tiers: list[TierCapacity]
    probes: list[Probe]
    settings: dict[str, Any]
    gpus: int
    watts_per_gpu: float | None
    clock: str = "wall"
    # every outcome measure() returned, retries included, in order: the campaign's points
    # (child runs, points table); not part of to_dict()
    outcomes: list[Any] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The ``capacity`` dict a campaign result carries (strict-JSON-able after benchcamp.campaign.strict_json)."""
        return {
            "tiers": [asdict(t) for t in self.tiers],
            "probes": [asdict(p) for p in self.probes],
            "settings": dict(self.settings),
            "gpus": self.gpus,
            "watts_per_gpu": self.watts_per_gpu,
            "clock": self.clock,
        }


def search_capacity(
    measure: Callable[[int, int], Outcome],
    tiers: Iterable[Any],
    settings: SearchSettings,
    gpus: int,
    board_power_w: float | None = None,
    node_overhead_factor: float = 1.0,
    clock: str = "wall",
    on_probe: Callable[[Probe], None] | None = None,
) -> CapacityResult:
    """Max concurrent agents per tier (see the module doc). ``board_power_w`` and
    ``node_overhead_factor`` (the GPU profile's) give agents per MW; None leaves it NaN."""
    tiers = [Tier.of(t) for t in tiers]
    if not tiers:
        raise ValueError("load.tiers: give at least one tier {name, p90_user_tok_s, p90_ttft_s}")
    probes: list[Probe] = []
    valid: dict[int, Outcome] = {}  # level -> the valid outcome (a tier's capacity is read from one)
    known: dict[int, dict[str, bool]] = {}  # level -> tier name -> met, for the tiers a probe decided
    outcomes: list[Any] = []

    def probe(level: int) -> None:
        """Measure ``level``, retrying while a run is invalid and leaves a tier undecided."""
        for attempt in range(settings.retries + 1):
            out = measure(level, attempt)
            outcomes.append(out)
            s = out.summary or {}
            p = Probe(
                level,
                attempt,
                str(out.label),
                bool(out.valid),
                list(out.reasons or []),
                _num(s.get(Metric.P90_USER_RATE)),
                _num(s.get(Metric.TTFT_P90)),
                _num(s.get(Metric.THROUGHPUT_PER_GPU)),
                ttft_p90_floor_s=_num(s.get(TTFT_P90_FLOOR)),
            )
            if out.valid:
                p.meets = {t.name: t.meets(s) for t in tiers}
                valid[level] = out
            else:
                p.meets = {t.name: False for t in tiers if t.surely_fails(s)}
            known.setdefault(level, {}).update(p.meets)
            probes.append(p)
            if on_probe is not None:
                on_probe(p)
            if len(known[level]) == len(tiers):
                return

    results = []
    for tier in tiers:
        status = _search_tier(tier, settings, known, probe)
        results.append(_tier_result(tier, status, settings, valid, known, gpus, board_power_w, node_overhead_factor))
    wpg = watts_per_gpu(board_power_w, node_overhead_factor) if board_power_w else None
    return CapacityResult(results, probes, asdict(settings), int(gpus), wpg, clock, outcomes)


def _bounds(tier: Tier, known: Mapping[int, Mapping[str, bool]]) -> tuple[int, int | None]:
    lo = max((lv for lv, m in known.items() if m.get(tier.name) is True), default=0)
    hi = min((lv for lv, m in known.items() if lv > lo and m.get(tier.name) is False), default=None)
    return lo, hi


def _search_tier(
    tier: Tier, st: SearchSettings, known: dict[int, dict[str, bool]], probe: Callable[[int], None]
) -> str:
    while True:
        lo, hi = _bounds(tier, known)
        if hi is None:
            if lo >= st.max:
                return "at_max"
            nxt = st.start if lo == 0 else min(st.max, lo * 2)
        elif hi - lo <= 1 or (lo > 0 and st.narrow_enough(lo, hi)):
            return "ok" if lo > 0 else "none"
        else:
            nxt = (lo + hi) // 2
        if nxt not in known:
            probe(nxt)
        if tier.name not in known[nxt]:  # measured, its retries spent, and still undecided for this tier
            return "invalid_probe"


def _tier_result(
    tier: Tier,
    status: str,
    st: SearchSettings,
    valid: Mapping[int, Outcome],
    known: Mapping[int, Mapping[str, bool]],
    gpus: int,
    board_power_w: float | None,
    overhead: float,
) -> TierCapacity:
    lo, hi = _bounds(tier, known)
    s = dict(valid[lo].summary) if lo in valid else {}
    note = STATUS_TEXT[status]
    if status == "ok" and hi is not None:
        note = f"{lo} meets the tier, {hi} does not (resolution {max(st.resolution_sessions, math.floor(st.resolution_rel * lo))})"
        if hi not in valid:
            note += f"; at {hi} the TTFT P90 floor of the requests cut off at the drain's end is over the tier"
    return TierCapacity(
        tier=tier.name,
        p90_user_tok_s=tier.p90_user_tok_s,
        p90_ttft_s=tier.p90_ttft_s,
        max_agents=lo,
        failed_above=hi,
        status=status,
        note=note,
        point=str(valid[lo].label) if lo in valid else None,
        agents_per_gpu=lo / gpus,
        agents_per_mw=agents_per_mw(lo, gpus, board_power_w, overhead),
        total_tokens_per_s_per_gpu=_num(s.get(Metric.THROUGHPUT_PER_GPU)),
        p90_user_tokens_per_s=_num(s.get(Metric.P90_USER_RATE)),
        ttft_p90_s=_num(s.get(Metric.TTFT_P90)),
        revenue_per_gpu_hour=_num(s.get(Metric.REVENUE_PER_GPU_HOUR)),
        cost_per_gpu_hour=_num(s.get(Metric.COST_PER_GPU_HOUR)),
        margin_per_gpu_hour=_num(s.get(Metric.MARGIN_PER_GPU_HOUR)),
        cost_per_mtok=_num(s.get(Metric.COST_PER_MTOK)),
        probes_used=len(valid),
    )


def format_capacity(result: CapacityResult | Mapping[str, Any]) -> str:
    """One line per tier: max agents total / per GPU / per MW, and the point's economics."""
    d = result.to_dict() if isinstance(result, CapacityResult) else result
    lines = [f"capacity ({d.get('clock', 'wall')} clock, {len(d['probes'])} probes, {d['gpus']} GPUs):"]
    for t in d["tiers"]:
        mw = t["agents_per_mw"]
        lines.append(
            f"  {t['tier']:<18} >= {t[TierField.RATE]:g} tok/s, TTFT <= {t[TierField.TTFT]:g} s: "
            f"{t['max_agents']} agents ({t['agents_per_gpu']:.2f}/GPU, "
            f"{'-' if not _finite(mw) else f'{mw:,.0f}'}/MW), "
            f"{_fmt(t[Metric.THROUGHPUT_PER_GPU], '{:,.0f}')} tok/s/GPU, "
            f"revenue {_fmt(t[Metric.REVENUE_PER_GPU_HOUR], '${:.2f}')}/GPU-h, "
            f"cost {_fmt(t[Metric.COST_PER_GPU_HOUR], '${:.2f}')}/GPU-h [{t['status']}: {t['note']}]"
        )
    return "\n".join(lines)


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _fmt(x: Any, pattern: str) -> str:
    return pattern.format(x) if _finite(x) else "-"


def agents_speed_front(points: Iterable[Mapping[str, Any]], x: str = "agents", y: str = "rate") -> list[dict[str, Any]]:
    """Points not dominated in (agents ``x``, per-agent speed ``y``), both maximised; in
    order of rising agents (falling speed)."""
    cands = sorted((dict(p) for p in points if _finite(p.get(x)) and _finite(p.get(y))), key=lambda p: (-p[x], -p[y]))
    front, best = [], -math.inf
    for p in cands:  # most agents first: on the front when faster than every point with more agents
        if p[y] > best:
            front.append(p)
            best = p[y]
    return list(reversed(front))
