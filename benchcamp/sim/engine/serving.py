"""What the virtual clock drives: the interface that one engine of data-parallel ranks (``core.Router``) and a whole
topology of instances (``benchcamp.sim.clock.fleet.Fleet``) share.

``sim.clock.simulate`` runs either through this interface alone: it sends requests (``check``, ``add_request``,
``abort``), starts the steps due at an instant (``start_steps``, ``next_free``) and reads what they served
(``where``, ``generation_tokens``, ``counters``). A third kind of deployment is simulated by implementing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from benchcamp.sim.engine.core import EngineCore, StepResult


@runtime_checkable
class ServingEngine(Protocol):
    many_clocks: bool  # True: each rank or instance steps on its own clock (start_steps / next_free)
    keep_timelines: bool

    @property
    def where(self) -> dict[str, EngineCore]:
        """Request id -> the engine core that holds it now."""
        ...

    def check(self, prompt_len: int, max_tokens: int, min_tokens: int = 0) -> int:
        """The request's length checked against the served model's limit (an OpenAIError as vLLM answers)."""
        ...

    def add_request(
        self, req_id: str, block_hashes: list[int], prompt_len: int, max_tokens: int, now: float
    ) -> None: ...

    def abort(self, req_id: str) -> bool: ...

    def has_work(self) -> bool: ...

    def start_steps(self, now: float, hot: float = ..., deadline: float = ...) -> list[tuple[StepResult, int]]:
        """Start a step on every idle rank or instance with work at ``now`` -> (result, streamed tokens) each."""
        ...

    def next_free(self, now: float) -> float:
        """When the next busy rank or instance ends its step (inf when none is busy)."""
        ...

    def generation_tokens(self) -> int: ...

    def counters(self) -> dict[str, float]:
        """vLLM's counters summed over the engine cores (prefix-cache queries and hits, preemptions, ...)."""
        ...
