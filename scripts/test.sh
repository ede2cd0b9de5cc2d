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
if [ "$#" -eq 0 ] && [ -x .venv-airflow2/bin/airflow ]; then
  # The whole suite: the Airflow 2.11 backfill tests (about 3 minutes, mostly subprocesses waiting on
  # each other) run alongside the rest, in a pytest process and Airflow home of their own.
  airflow2_log=$(mktemp)
  mkdir -p "$AIRFLOW_HOME-airflow2"
  AIRFLOW_HOME="$AIRFLOW_HOME-airflow2" .venv/bin/python -m pytest -p no:cacheprovider \
    tests/test_airflow2.py >"$airflow2_log" 2>&1 &
  airflow2_pid=$!
  trap 'kill "$airflow2_pid" 2>/dev/null' INT TERM
  .venv/bin/python -m pytest --ignore=tests/test_airflow2.py
  status=$?
  wait "$airflow2_pid"
  airflow2_status=$?
  echo "[test] tests/test_airflow2.py (run alongside the rest):"
  cat "$airflow2_log"
  rm -f "$airflow2_log"
  # the worse of the two: a failure (1) over "nothing selected" (5) over success (0)
  if [ "$airflow2_status" -ne 0 ] && [ "$airflow2_status" -ne 5 ]; then
    [ "$status" -eq 0 ] || [ "$status" -eq 5 ] && status=$airflow2_status
  fi
else
  .venv/bin/python -m pytest "$@"
  status=$?
fi
set -e
# pytest exits 5 when a -k/-m selection matched nothing: that is not a failure of the suite
[ "$status" -eq 5 ] && { echo "[test] no tests selected" >&2; exit 0; }
exit "$status"
