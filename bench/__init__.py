"""benchcamp's benchmarks of itself: programs over one small library, ``bench.common``.

Run a script as a module from the repository root, so it finds ``bench.common``:

    uv run --frozen python -m bench.<script> [options]       # e.g. -m bench.engine_speed --repeats 1
    uv run --frozen python -m bench.fidelity.replay          # the corpus replay, beside its corpus

No script imports another script (tests/bench/test_layout.py checks it); what two scripts share
is in ``bench/common/``. Outputs that README.md and docs/ quote live under ``bench/results/<script>/``,
where each script writes by default.
"""
