"""One engine of data-parallel ranks and a whole topology are driven through the same interface
(``benchcamp.sim.engine.serving.ServingEngine``): each has every member, with the parameters the clock passes."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from benchcamp.sim.clock.fleet import Fleet
from benchcamp.sim.engine.core import Router
from benchcamp.sim.engine.serving import ServingEngine
from benchcamp.sim.native import source_path

METHODS = [n for n, v in vars(ServingEngine).items() if inspect.isfunction(v) and not n.startswith("_")]


def test_the_protocol_names_what_the_clock_calls():
    assert set(METHODS) == {"check", "add_request", "abort", "has_work", "start_steps", "next_free",
                            "generation_tokens", "counters"}


def _parameters(module: str, cls: str, method: str) -> tuple[list[str], int]:
    """(parameter names, how many have defaults) of a method, read from the source: compiled (mypyc) methods
    may carry no signature Python can read."""
    tree = ast.parse(Path(source_path(module)).read_text())
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == method)
    return [a.arg for a in fn.args.args[1:]], len(fn.args.defaults)


@pytest.mark.parametrize("module, cls", [("benchcamp.sim.engine.core", "Router"), ("benchcamp.sim.clock.fleet", "Fleet")],
                         ids=["dp-router", "topology-fleet"])
@pytest.mark.parametrize("method", METHODS)
def test_each_kind_takes_the_protocols_parameters(module, cls, method):
    want, _ = _parameters("benchcamp.sim.engine.serving", "ServingEngine", method)
    got, defaults = _parameters(module, cls, method)
    assert got[: len(want)] == want
    assert len(got) - len(want) <= defaults, f"{cls}.{method}: parameters beyond the protocol's must be optional"


def test_a_dp_engine_is_a_serving_engine():
    from benchcamp.sim.engine.settings import EngineSettings

    router = Router(EngineSettings(model="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", data_parallel_size=2))
    assert isinstance(router, ServingEngine)
    assert hasattr(Fleet, "where") and hasattr(Fleet, "many_clocks")
