#!/usr/bin/env bash
# Starts Airflow 3's UI (`airflow api-server`) on the demo's Airflow home and metastore, so that the pipeline
# pages show what scripts/demo.sh ran: Browse → CDC pipelines, http://localhost:8080/plugin/cdc-pipelines.
# The demo's metastore is the default one, $AIRFLOW_HOME/cdc_metastore.db (cdc_metastore_default is not
# defined). Everyone is an admin here (a local demo: [core] simple_auth_manager_all_admins); Ctrl+C stops it.
# Usage: scripts/ui.sh [AIRFLOW_HOME]   (default .demo/airflow; CDC_UI_PORT sets the port, default 8080)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export AIRFLOW_HOME="${1:-$root/.demo/airflow}"
if [ ! -f "$AIRFLOW_HOME/airflow.db" ]; then
  echo "[ui] no Airflow home with a database at $AIRFLOW_HOME: run scripts/demo.sh first" >&2
  exit 1
fi
bash scripts/setup.sh
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$root/example_dags"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True
export PATH="$root/.venv/bin:$PATH"
port=${CDC_UI_PORT:-8080}
echo "[ui] the pipelines of $AIRFLOW_HOME: http://localhost:$port/plugin/cdc-pipelines (Browse → CDC pipelines)" >&2
exec airflow api-server --port "$port"
