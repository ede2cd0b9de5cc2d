#!/usr/bin/env bash
# Sets up the project (scripts/setup.sh, with the Airflow 2.11 virtualenv) and runs the whole test suite,
# the end-to-end DAG tests on Airflow 3 and 2.11 included.
# PostgreSQL tests run when CDC_TEST_POSTGRES_URL is set (and skip with a reason otherwise); when it is
# unset and a server answers on 127.0.0.1:5432 as user postgres, that server is used.
# Extra arguments go to pytest, e.g. scripts/test.sh -k metastore
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --airflow2
if [ -z "${CDC_TEST_POSTGRES_URL:-}" ] && command -v pg_isready >/dev/null 2>&1 &&
   pg_isready -q -h 127.0.0.1 -p 5432 -U postgres 2>/dev/null; then
  export CDC_TEST_POSTGRES_URL="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
fi
echo "[test] PostgreSQL tests: ${CDC_TEST_POSTGRES_URL:-skipped (CDC_TEST_POSTGRES_URL not set)}" >&2
# The Airflow 3 end-to-end DAG tests (tests/test_example_dag.py) run here; a bare `pytest` skips them
# unless CDC_E2E_TESTS=1. CDC_E2E_TESTS=0 scripts/test.sh leaves them out.
export CDC_E2E_TESTS="${CDC_E2E_TESTS:-1}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$(pwd)/.cache/airflow-test-home}"
mkdir -p "$AIRFLOW_HOME"
.venv/bin/ruff check --quiet .
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
# pytest exits 5 when a -k/-m selection matched nothing: that is not a failure of the suite
[ "$status" -eq 5 ] && { echo "[test] no tests selected" >&2; exit 0; }
exit "$status"
