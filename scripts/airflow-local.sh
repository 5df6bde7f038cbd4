#!/usr/bin/env bash
# Start Airflow (standalone: api-server + scheduler + dag-processor + triggerer) on
# loopback with benchcamp's DAGs, then open http://127.0.0.1:PORT and trigger
# "benchcamp_campaign" from its form.
#
#   scripts/airflow-local.sh [PORT]          (default 8080)
#
# Login: user "admin", password in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated
# (or BENCHCAMP_AIRFLOW_NO_LOGIN=1 to make every visitor admin: loopback only!).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PORT=${1:-${BENCHCAMP_AIRFLOW_PORT:-8080}}
export AIRFLOW_HOME=${AIRFLOW_HOME:-$HOME/.benchcamp-airflow}
export AIRFLOW__CORE__DAGS_FOLDER=$ROOT/dags
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT=$PORT
# Task logs open wrapped: the sweep and verdict tables and one-line errors stay on screen ([api] default_wrap).
export AIRFLOW__API__DEFAULT_WRAP=${AIRFLOW__API__DEFAULT_WRAP:-True}
# Tasks reach the API server here; without it every task fails with "connection refused" off port 8080.
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$PORT/execution/
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}
if [[ "${BENCHCAMP_AIRFLOW_NO_LOGIN:-0}" == 1 ]]; then
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True
fi
export BENCHCAMP_PROJECT_DIR=$ROOT
# standalone starts its parts as `airflow ...`: the venv's bin/ must be on PATH.
export PATH=$ROOT/.venv/bin:$PATH
mkdir -p "$AIRFLOW_HOME"
cd "$ROOT"
airflow db migrate >/dev/null
# The campaign's GPU tasks run in this pool (size = GPU nodes you allow at once).
airflow pools set gpu_nodes "${BENCHCAMP_GPU_NODES:-2}" "GPU nodes held by benchcamp campaigns" >/dev/null
# Sweeps run in this one (size = machines that drive a load generator: this one).
airflow pools set loadgen_hosts 1 "load-generator hosts: one sweep each at a time" >/dev/null
echo "benchcamp: Airflow UI on http://127.0.0.1:$PORT (AIRFLOW_HOME=$AIRFLOW_HOME)"
echo "benchcamp: login admin, password in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
exec airflow standalone
