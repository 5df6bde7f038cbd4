"""benchcamp's benchmarks of itself: programs over one small library, ``bench.common``.

    uv run --frozen python bench/<script>.py [options]       # e.g. bench/engine_speed.py --repeats 1
    uv run --frozen python bench/fidelity/replay.py          # the corpus replay, beside its corpus

A script finds ``bench.common`` (and ``benchcamp``) because the project's editable install (``uv sync``) puts the
repository root on ``sys.path``; ``uv run python -m bench.<script>`` from the root works as well. No script imports
another script (tests/bench/test_bench_scripts.py checks it): what two scripts share is in ``bench/common/``. Outputs that
docs/benchmarks/ quotes live under ``bench/results/<script>/``, where each script writes by default.
"""
