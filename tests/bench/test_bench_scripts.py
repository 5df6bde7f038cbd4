"""bench/ as programs over one library: no script imports another script (nor edits sys.path to reach one), and
bench.common's table printer and plot writer do what the scripts rely on. Pure: no server, a second or two."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from bench.common import plots, stats, tables

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(
    p for p in BENCH.rglob("*.py") if "common" not in p.relative_to(BENCH).parts[:1] and p.name != "__init__.py"
)
LIBRARY = sorted((BENCH / "common").glob("*.py"))


def _imports(path: Path) -> list[str]:
    """Every module an import statement of ``path`` names (in functions too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import reaches a neighbour: always a script or a package of bench/
                names.append("." * node.level + (node.module or ""))
            elif node.module == "bench":  # from bench import x
                names += [f"bench.{a.name}" for a in node.names]
            elif node.module:
                names.append(node.module)
    return names


def _offending(path: Path) -> list[str]:
    """Imports of ``path`` that reach a bench script: a bench module outside bench.common, a relative import, or a
    top-level name that is a script of bench/ (what a sys.path line to bench/ makes importable)."""
    script_names = {p.stem for p in SCRIPTS} | {"fidelity", "peers", "common"}
    bad = []
    for name in _imports(path):
        top = name.split(".")[0]
        if name.startswith("."):
            bad.append(name)
        elif top == "bench" and name != "bench.common" and not name.startswith("bench.common."):
            bad.append(name)
        elif top in script_names:
            bad.append(name)
    return bad


def test_the_scan_finds_the_scripts_and_the_library() -> None:
    names = {p.relative_to(BENCH).as_posix() for p in SCRIPTS}
    assert {"peers_side_by_side.py", "agentperf_side_by_side.py", "fidelity/replay.py", "fidelity/fit.py"} <= names
    assert {p.name for p in LIBRARY} >= {"servers.py", "runs.py", "tables.py", "plots.py", "paths.py"}


@pytest.mark.parametrize("path", SCRIPTS + LIBRARY, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_no_bench_file_imports_a_script(path: Path) -> None:
    assert _offending(path) == [], f"{path.relative_to(BENCH)} imports a script; move what it shares to bench/common"
    assert "sys.path.insert" not in path.read_text(), f"{path.relative_to(BENCH)}: bench.common needs no sys.path line"


def test_the_scan_catches_a_script_importing_a_script(tmp_path: Path) -> None:
    for text in (
        "from bench import peers_side_by_side\n",
        "import bench.fidelity.replay\n",
        "from bench.agentx_side_by_side import fmt\n",
        "def f():\n    from peers_side_by_side import stats\n",
        "from . import replay\n",
    ):
        f = tmp_path / "x.py"
        f.write_text(text)
        assert _offending(f), text
    f.write_text("from bench.common import tables\nfrom bench.common.servers import engine\nimport benchcamp.metrics\n")
    assert _offending(f) == []


def test_render_aligns_text_and_writes_markdown() -> None:
    text = tables.render(["name", "value"], [["a", "1.0"], ["long name", "12.5"]], rule=True)
    assert text.splitlines() == ["name       value", "---------  -----", "a            1.0", "long name   12.5"]
    fixed = tables.render([], [["x", "1"]], widths=[4, 3])  # no head line with no head
    assert fixed == "x     1"
    md = tables.render(["name", "value"], [["a", "1.0"]], markdown=True)
    assert md.splitlines() == ["| name | value |", "| :--- | ---: |", "| a | 1.0 |"]


def test_compare_puts_the_ratio_of_the_second_to_the_first() -> None:
    rows = [("TTFT p50 (ms)", "ttft"), ("hit", "cache_hit"), ("done", None), ("missing", "nope")]
    a = {"ttft": 10.0, "cache": {"hit_rate": 0.5}, "completed": 3, "sent": 4}
    b = {"ttft": 12.5, "cache": {"hit_rate": 0.25}, "completed": 4, "sent": 4}
    text = tables.compare(
        rows, [a, b], ["peer", "benchcamp"], tables.figure, tables.figure_format(",.1f"), label_width=14, width=10
    )
    lines = text.splitlines()
    assert lines[0].split() == ["peer", "benchcamp", "ratio"]
    assert lines[1].split()[-3:] == ["10.0", "12.5", "1.250"]
    assert lines[2].split()[-3:] == ["50.0%", "25.0%", "0.500"]
    assert lines[3].split()[-2:] == ["3/4", "4/4"]  # strings: no ratio
    assert lines[4].split()[-2:] == ["-", "-"]  # absent on both sides
    md = tables.compare(rows[:1], [a, b], ["peer", "benchcamp"], markdown=True)
    assert md.splitlines()[-1] == "| TTFT p50 (ms) | 10.0 | 12.5 | 1.250 |"


def test_ratio_and_number_refuse_what_is_not_a_finite_figure() -> None:
    assert tables.ratio(2.0, 3.0) == 1.5
    for a, b in ((0, 1.0), (None, 1.0), (1.0, math.nan), ("1", 2.0), (math.inf, 1.0)):
        assert tables.ratio(a, b) is None, (a, b)
    assert tables.number(None) == "-" and tables.number(math.nan) == "-" and tables.number("n/a") == "n/a"
    assert tables.number(1234.567) == "1,234.6" and tables.number(0.25, ".1%") == "25.0%"


def test_a_request_without_a_first_token_stamp_leaves_the_figures_finite() -> None:
    """A successful streamed answer whose one token decodes to no text has no content chunk, so neither a first- nor
    a last-token stamp (as the real engine's agentx seed 1 of bench/agentx_side_by_side.py gave: it must not turn
    the TTFT percentiles and the span into NaN). The figures are the other requests'; the request still counts as completed."""
    nan = math.nan
    ttft, tpot, e2e = [0.1, 0.2, nan, 0.4], [0.01, 0.02, nan, 0.03], [1.0, 2.0, 0.5, 3.0]
    start, end = [0.0, 1.0, 2.0, 3.0], [1.0, 3.0, nan, 6.0]
    r = stats.request_stats(ttft, tpot, e2e, [100] * 4, [10, 10, 1, 10], start, end, 4)
    assert r["completed"] == 4 and r["span_s"] == 6.0 and r["total_tok_s_span"] == (31 + 400) / 6.0
    assert r["ttft_p50_ms"] == 200.0 and r["ttft_p90_ms"] == pytest.approx(360.0) and r["tpot_p50_ms"] == 20.0
    assert math.isnan(stats.pct([nan, nan], 50)) and math.isnan(stats.pct([], 50))


def test_plot_writer_draws_every_kind_of_panel(tmp_path: Path) -> None:
    ratios = plots.Ratios(["TTFT", "TPOT", "no value"], [1.02, 0.9, math.nan])
    grouped = plots.Panel(
        ["c1*", "c2"],
        [
            plots.Series([5.0, -10.0], "base", offset=-0.2, width=0.4),
            plots.Series([1.0, 2.0], "calibrated", offset=0.2, width=0.4, color=["tab:blue", "tab:red"]),
        ],
        [plots.Line(-15, 15, color="green", alpha=0.1)],
        title="errors",
        rotation=45,
    )
    stacked = plots.Panel(
        ["0", "64"],
        [plots.Series([0.2, 0.2], "GPU"), plots.Series([0.0, 0.1], "CPU", bottom=[0.2, 0.2])],
        [plots.Line(0.4, style="--", label="theory")],
        limits=(0, 0.5),
        grid=True,
    )
    points = plots.Panel(["a", "b"], [plots.Series([[0.9, 1.1], [1.0]], "per round", "points")], log=True)
    png = plots.write(
        tmp_path / "sub" / "x.png", [ratios.panel("b / a", "title"), grouped, stacked, points], size=(8, 8), columns=2
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_ratio_axis_holds_every_finite_value() -> None:
    assert plots.finite_limits([1.0, math.nan]) == (0.8, 1.2)
    low, high = plots.finite_limits([0.5, 1.6])
    assert low <= 0.45 and high >= 1.7
