#!/usr/bin/env bash
# Sets up the project (scripts/setup.sh, with the Airflow 2.11 virtualenv) and runs the whole test suite,
# the end-to-end DAG tests on Airflow 3 and 2.11 and the tests against Google's Cloud Spanner emulator
# (found through CDC_SPANNER_EMULATOR_BIN, the Google Cloud CLI's install path or PATH) included.
# PostgreSQL tests run when CDC_TEST_POSTGRES_URL is set (and skip with a reason otherwise); when it is
# unset and a server answers on 127.0.0.1:5432 as user postgres, that server is used.
# Extra arguments go to pytest, e.g. scripts/test.sh -k metastore
# scripts/test.sh --fast [pytest arguments]: the fast tier (no end-to-end DAG runs, no Spark merge scenarios).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --airflow2
if [ -z "${CDC_TEST_POSTGRES_URL:-}" ] && command -v pg_isready >/dev/null 2>&1 &&
   pg_isready -q -h 127.0.0.1 -p 5432 -U postgres 2>/dev/null; then
  export CDC_TEST_POSTGRES_URL="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
fi
echo "[test] PostgreSQL tests: ${CDC_TEST_POSTGRES_URL:-skipped (CDC_TEST_POSTGRES_URL not set)}" >&2
google_emulator=$(.venv/bin/python -c \
  "from airflow_provider_cdc.testing.google_emulator import find_binary; print(find_binary() or '')" || true)
echo "[test] Google's Cloud Spanner emulator tests: ${google_emulator:-skipped (emulator_main not found)}" >&2
# The Airflow 3 end-to-end DAG tests (tests/e2e/test_example_dag.py) run here; a bare `pytest` skips them
# unless CDC_E2E_TESTS=1. CDC_E2E_TESTS=0 scripts/test.sh leaves them out.
export CDC_E2E_TESTS="${CDC_E2E_TESTS:-1}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$(pwd)/.cache/airflow-test-home}"
mkdir -p "$AIRFLOW_HOME"
.venv/bin/ruff check --quiet .
# Test files that run alongside the rest (whole suite only), each group in a pytest process and Airflow
# home of its own, so the two cores stay busy while tests wait on subprocesses and real time. Each file is
# named once: its group runs it and the main process leaves it out. The end-to-end DAG tests merge on one
# Spark Connect server per process (the crash campaign, the Airflow 2.11 tests, the standalone cluster and
# the gs:// DAG's first window run cold spark-submits; the Dataproc fake runs spark-submit per job).
# Each process reports its slowest tests and how long it took.
groups=(
  # the Airflow 2.11 backfill tests (cold spark-submit merges, as on Cloud Composer 2), with the BigQuery
  # and commit-timestamp example DAGs', and the documentation's commands (a whole own-pipeline window and
  # the Spark Connect commands among them)
  "airflow2: tests/e2e/test_airflow2.py tests/e2e/test_example_dag_bigquery.py
    tests/e2e/test_example_dag_commit_timestamp.py tests/e2e/test_asset_events_airflow2.py
    tests/docs/test_snippets.py"
  # against Google's Cloud Spanner emulator (mostly waiting for real-time windows; they skip, naming the
  # reason, where it is not installed), the change-stream example DAG (here and on the Dataproc fake) and
  # the merge job's Spark tests (one spark-submit and one Spark Connect run of every scenario)
  "google: tests/e2e/test_google_emulator_read.py tests/e2e/test_example_dag_google.py
    tests/e2e/test_example_dag.py tests/pipeline/spark/test_merge_job.py tests/e2e/test_example_dag_dataproc.py"
  # the crash campaign (SIGKILLs at 20 seeded points, CDC_CRASH_POINTS for more), the deferred-apply upsert
  # killed between append and compaction, the example DAG on gs:// and a Spark Connect server killed
  # mid-merge
  "crash: tests/e2e/test_crash_campaign.py tests/e2e/test_deferred_apply_crash.py
    tests/e2e/test_example_dag_gcs.py tests/e2e/test_spark_connect_recovery.py"
  # the Datastream and Table Store pipelines and example DAGs, and the example DAG on a Spark standalone
  # cluster (a master and a worker from the pyspark wheel)
  "sources: tests/sources/datastream/test_datastream_pipeline.py tests/e2e/test_example_dag_datastream.py
    tests/e2e/test_example_dag_tablestore.py tests/e2e/test_standalone_cluster.py"
)
side_names=() side_pids=() side_logs=()
run_alongside() {  # NAME FILE...
  local name=$1 log
  shift
  log=$(mktemp)
  mkdir -p "$AIRFLOW_HOME-$name"
  (
    started=$SECONDS
    AIRFLOW_HOME="$AIRFLOW_HOME-$name" .venv/bin/python -m pytest -p no:cacheprovider --durations=10 "$@"
    status=$?
    echo "[test] $name took $((SECONDS - started)) s"
    exit $status
  ) >"$log" 2>&1 &
  side_names+=("$name: $*") side_pids+=("$!") side_logs+=("$log")
}
set +e
if [ "${1:-}" = "--fast" ]; then
  # The fast tier: core, sources, targets and pipeline steps, without the end-to-end DAG runs (tests/e2e
  # and the tests marked dag_run) and the Spark jobs' scenarios (marked spark; all of them run in the whole
  # suite), on every core (pytest-xdist; one worker per core, each test file on one worker so its
  # emulators start once; CDC_TEST_WORKERS to change it).
  shift
  started=$SECONDS
  CDC_E2E_TESTS=0 .venv/bin/python -m pytest -p no:cacheprovider --durations=10 -m "not dag_run and not spark" \
    -n "${CDC_TEST_WORKERS:-auto}" --dist loadfile --ignore=tests/e2e \
    --ignore=tests/pipeline/spark/test_merge_job.py --ignore=tests/sources/datastream/test_datastream_pipeline.py "$@"
  status=$?
  echo "[test] the fast tier took $((SECONDS - started)) s"
elif [ "$#" -eq 0 ]; then
  ignored=()
  for group in "${groups[@]}"; do
    name=${group%%:*}
    read -r -d '' -a files <<<"${group#*:}" || true  # every line of the group's files
    if [ "$name" = airflow2 ] && [ ! -x .venv-airflow2/bin/airflow ]; then continue; fi
    run_alongside "$name" "${files[@]}"
    for file in "${files[@]}"; do ignored+=("--ignore=$file"); done
  done
  trap 'kill "${side_pids[@]}" 2>/dev/null' INT TERM
  started=$SECONDS
  .venv/bin/python -m pytest --durations=20 "${ignored[@]}"
  statuses=("$?")
  echo "[test] the main pytest process took $((SECONDS - started)) s"
  for i in "${!side_pids[@]}"; do
    wait "${side_pids[$i]}"
    statuses+=("$?")
    echo "[test] ${side_names[$i]} (run alongside the rest):"
    cat "${side_logs[$i]}"
    rm -f "${side_logs[$i]}"
  done
  # the worst of them: the first failure, else success (0) over "nothing selected" (5)
  status=5
  for s in "${statuses[@]}"; do
    if [ "$s" -ne 0 ] && [ "$s" -ne 5 ]; then status=$s; break; fi
    [ "$s" -eq 0 ] && status=0
  done
else
  .venv/bin/python -m pytest "$@"
  status=$?
fi
set -e
# pytest exits 5 when a -k/-m selection matched nothing: that is not a failure of the suite
[ "$status" -eq 5 ] && { echo "[test] no tests selected" >&2; exit 0; }
exit "$status"
