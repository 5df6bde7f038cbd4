"""The synthetic agentic generator: a spec YAML + seed -> a :class:`Workload`.

An agent session is modelled as one growing token stream (its context):

    [shared prefix: system prompt + tool schemas] [task context]
    turn 0 prompt -> output -> tool result -> turn 1 prompt -> output -> ...

Each turn's prompt is the whole stream so far, so turn k+1's prompt is turn k's
prompt + turn k's output + the tool result. The stream is cut into
``block_size``-token blocks; a block id names the block's content, so a block
keeps its id while it fills up (a turn ending mid-block shares that partial
block's leading tokens with the next turn, which is exactly what
:func:`benchcamp.workload.tokens.prompt_tokens` produces).

Streams fork at block boundaries: a new session starts from the shared prefix,
a subagent from its parent's context after the spawning turn's output. The fork
keeps the parent's full blocks and gives a partial tail block a fresh id,
because what follows in the fork differs from what follows in the parent. Hence
two prompts share exactly the tokens of their common leading block ids.

Block ids are ``salt << 32 | counter``: the counter makes them unique per
content within the workload, the salt (from name and seed) keeps two workloads
from producing the same token ids on one long-running server.

Randomness: session i draws from ``default_rng([seed, 1, i])`` and arrivals
from ``default_rng([seed, 2])``, so the same spec + seed gives the same
workload, byte for byte.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from benchcamp.errors import SpecError  # noqa: F401  (re-exported)
from benchcamp.workload.model import Request, Session, Workload

GENERATOR_VERSION = "agentic-v1"


class _Strict(BaseModel):
    # allow_inf_nan=False: `.inf` / `.nan` are errors naming the field (LogNormal.max defaults to inf)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Constant(_Strict):
    kind: Literal["constant"]
    value: float = Field(ge=0)


class Uniform(_Strict):
    kind: Literal["uniform"]
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high={self.high} is below low={self.low}; swap them")
        return self


class LogNormal(_Strict):
    """exp(N(log median, sigma)), clipped to [min, max]: long-tailed lengths and latencies."""

    kind: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)
    min: float = Field(0.0, ge=0)
    max: float = Field(math.inf, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LogNormal:
        if self.max < self.min:
            raise ValueError(f"max={self.max} is below min={self.min}; swap them")
        return self


def _number_is_constant(v: Any) -> Any:
    # `turns: 3` is shorthand for `{kind: constant, value: 3}`.
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"kind": "constant", "value": v}
    return v


Dist = Annotated[Constant | Uniform | LogNormal, Field(discriminator="kind"), BeforeValidator(_number_is_constant)]


def draw(d: Constant | Uniform | LogNormal, rng: np.random.Generator) -> float:
    if isinstance(d, Constant):
        return d.value
    if isinstance(d, Uniform):
        return float(rng.uniform(d.low, d.high))
    return float(min(max(rng.lognormal(math.log(d.median), d.sigma), d.min), d.max))


def draw_int(d: Constant | Uniform | LogNormal, rng: np.random.Generator, lo: int = 0) -> int:
    return max(lo, int(round(draw(d, rng))))


class SharedPrefix(_Strict):
    system_prompt_tokens: int = Field(ge=0)
    tool_schema_tokens: int = Field(0, ge=0)


class Arrival(_Strict):
    # all_at_start: closed-loop replay (the default campaign); poisson: session
    # arrival offsets for open-loop / trace-time replay.
    kind: Literal["all_at_start", "poisson"] = "all_at_start"
    rate_per_s: float = Field(1.0, gt=0)


class Agent(_Strict):
    task_tokens: Dist
    turns: Dist
    output_tokens: Dist
    tool_result_tokens: Dist
    think_s: Dist
    max_context_tokens: int = Field(
        ge=1, le=10_000_000, description="no further turns once the prompt would exceed this"
    )


class Subagents(_Strict):
    spawn_probability: float = Field(ge=0, le=1, description="per turn that is not the session's last")
    count: Dist
    agent: Agent


class Spec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    seed: int = Field(ge=0, le=2**63 - 1)
    block_size: int = Field(ge=1, le=4096)
    vocab_size: int = Field(ge=2, le=2**31 - 1)
    sessions: int = Field(ge=1, le=1_000_000, description="a million sessions is already gigabytes of prompts")
    arrival: Arrival = Field(default_factory=Arrival)
    shared_prefix: SharedPrefix
    session: Agent
    subagents: Subagents | None = None


def _format(exc: ValidationError, source: str) -> str:
    lines = [f"invalid workload spec {source}:"]
    for err in exc.errors():
        # drop the discriminator tag pydantic inserts into the location (e.g. 'lognormal')
        loc = ".".join(str(p) for p in err["loc"] if p not in ("constant", "uniform", "lognormal"))
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown field; remove it or check the spelling")
        elif err["type"] == "union_tag_invalid":
            lines.append(
                f"  {loc}.kind: {err['input'].get('kind')!r} is not a distribution; use constant, uniform or lognormal"
            )
        elif err["type"] == "union_tag_not_found":
            lines.append(f"  {loc}: a distribution needs `kind` (constant, uniform, lognormal) or a plain number")
        else:
            lines.append(
                f"  {loc or '(top level)'}: {str(err['msg']).removeprefix('Value error, ')} (got {err.get('input')!r})"
            )
    return "\n".join(lines)


def parse_spec(data: Any, source: str = "spec") -> Spec:
    if not isinstance(data, dict):
        raise SpecError(f"invalid workload spec {source}: expected a mapping at the top level")
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format(exc, source)) from None


def load_spec(path: str | Path) -> Spec:
    p = Path(path)
    if not p.exists():
        raise SpecError(
            f"workload spec {p} not found; set workload.spec to a spec file such as workloads/agentic-coding.yaml"
        )
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"workload spec {p}: not valid YAML: {exc}") from None
    return parse_spec(data, str(p))


def spec_sha(spec: Spec) -> str:
    """Identity of what the generator will produce: the canonical spec + generator version."""
    body = spec.model_dump_json(exclude_none=False)
    return hashlib.sha256(f"{GENERATOR_VERSION}\n{body}".encode()).hexdigest()


class _Ids:
    def __init__(self, name: str, seed: int) -> None:
        salt = int.from_bytes(hashlib.sha256(f"{name}|{seed}".encode()).digest()[:4], "big") & 0x7FFFFFFF
        self.base = salt << 32
        self.n = 0

    def next(self) -> int:
        if self.n >= 1 << 32:
            raise SpecError("workload too large: more than 2**32 distinct blocks; reduce sessions or lengths")
        self.n += 1
        return self.base | (self.n - 1)


class _Stream:
    """A growing context: block ids + token length (last block possibly partial)."""

    def __init__(self, ids: _Ids, block_size: int, blocks: list[int] | None = None, length: int = 0):
        self.ids, self.bs = ids, block_size
        self.blocks = blocks or []
        self.length = length

    def append(self, n: int) -> None:
        self.length += n
        need = -(-self.length // self.bs)
        while len(self.blocks) < need:
            self.blocks.append(self.ids.next())

    def fork(self) -> _Stream:
        full = self.length // self.bs
        blocks = self.blocks[:full]
        if self.length % self.bs:
            blocks.append(self.ids.next())  # the fork's tail continues differently
        return _Stream(self.ids, self.bs, blocks, self.length)


def _run_agent(
    sid: str,
    agent: Agent,
    stream: _Stream,
    rng: np.random.Generator,
    sub: Subagents | None,
    arrival_s: float,
    out: list[Session],
    parent: str | None = None,
    parent_turn: int | None = None,
) -> None:
    stream.append(draw_int(agent.task_tokens, rng))
    turns = draw_int(agent.turns, rng, lo=1)
    session = Session(sid, [], arrival_s, parent, parent_turn)
    out.append(session)
    children: list[Session] = []
    for t in range(turns):
        if t > 0 and stream.length > agent.max_context_tokens:
            break
        output = draw_int(agent.output_tokens, rng, lo=1)
        think = 0.0 if t == 0 else round(draw(agent.think_s, rng), 3)
        session.requests.append(Request(t, tuple(stream.blocks), stream.length, output, think))
        stream.append(output)
        last = t == turns - 1
        if sub is not None and not last and rng.random() < sub.spawn_probability:
            for j in range(draw_int(sub.count, rng, lo=1)):
                _run_agent(
                    f"{sid}.t{t}.a{j}",
                    sub.agent,
                    stream.fork(),
                    rng,
                    None,
                    arrival_s,
                    children,
                    parent=sid,
                    parent_turn=t,
                )
        if not last:
            stream.append(draw_int(agent.tool_result_tokens, rng))
    out.extend(children)


def generate(spec: Spec, seed: int | None = None) -> Workload:
    seed = spec.seed if seed is None else seed
    if seed != spec.seed:
        spec = spec.model_copy(update={"seed": seed})
    ids = _Ids(spec.name, seed)
    base = _Stream(ids, spec.block_size)
    base.append(spec.shared_prefix.system_prompt_tokens + spec.shared_prefix.tool_schema_tokens)

    arrivals = [0.0] * spec.sessions
    if spec.arrival.kind == "poisson":
        gaps = np.random.default_rng([seed, 2]).exponential(1.0 / spec.arrival.rate_per_s, spec.sessions)
        arrivals = [round(float(x), 3) for x in np.cumsum(gaps) - gaps[0]]

    sessions: list[Session] = []
    width = max(4, len(str(spec.sessions - 1)))
    for i in range(spec.sessions):
        rng = np.random.default_rng([seed, 1, i])
        _run_agent(f"s{i:0{width}d}", spec.session, base.fork(), rng, spec.subagents, arrivals[i], sessions)
    meta = {
        "generator": GENERATOR_VERSION,
        "seed": seed,
        "spec_sha": spec_sha(spec),
        "spec": spec.model_dump(mode="json"),
        "source": "synthetic",
    }
    return Workload(spec.name, spec.block_size, spec.vocab_size, sessions, meta)
