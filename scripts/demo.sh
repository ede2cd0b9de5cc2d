#!/usr/bin/env bash
# The main job on embedded defaults, from a fresh clone: sets everything up, starts the Spanner
# change-stream emulator with the demo database (splits, merges, partial updates, deletes, transactions
# across partitions), runs the example DAG spanner_change_stream_to_lake for consecutive 10-minute windows
# (SQLite metastore, Spark local[*], Delta tables under .demo/), then prints every target table, the apply
# watermarks, each window's task timings and whether the tables equal the committed history.
# `scripts/demo.sh bigquery [WINDOWS]` runs the example DAG spanner_change_stream_to_bigquery instead
# (the same windows, then BigQuery CDC tables in the loopback BigQuery fake) and prints the BigQuery
# tables, the Delta and BigQuery apply watermarks and the task timings.
# `scripts/demo.sh commit-timestamp [WINDOWS]` runs the example DAG spanner_commit_timestamp_tables_to_lake
# instead: no change stream, the emulator's commit-timestamp demo database (Performances updated in place
# with soft deletes, the changelog DocumentHistory mapped to each document's latest entry), then prints
# the Delta tables, the status, the task timings and whether the tables equal the committed history.
# `scripts/demo.sh datastream [WINDOWS]` runs the example DAG datastream_to_lake instead: a MySQL stream
# written in Avro, as Datastream lays it out, to Cloud Storage (the loopback gcp-storage-emulator) over
# WINDOWS (default 4) 30-second windows in real time, then each window through the DAG with the Delta tables
# compared with the truth; `datastream-bigquery` runs datastream_to_bigquery against the BigQuery fake.
# `scripts/demo.sh tablestore [WINDOWS]` runs tablestore_stream_to_lake against the project's Table Store stream
# emulator (puts, partial updates, column and row deletes, a shard split and a merge; WINDOWS one-minute windows,
# default 3), comparing the Delta table with the emulator's table after each; `tablestore-bigquery` runs
# tablestore_stream_to_bigquery (Delta, then BigQuery CDC tables in the fake).
# `scripts/demo.sh gcs [WINDOWS]` runs spanner_change_stream_to_lake with staging, change sets and the lake
# on gs:// in the loopback Cloud Storage fake (WINDOWS default 3, at most 6), with the credentials in the
# Google connection, then compares the Delta tables read back through the fake with the history.
# Usage: scripts/demo.sh [bigquery|commit-timestamp|datastream|datastream-bigquery|tablestore|tablestore-bigquery|gcs]
#   [WINDOWS]
#   (default 5; at most 6 for the Delta Lake DAG)
set -euo pipefail
cd "$(dirname "$0")/.."
target=lake
if [ "${1:-}" = bigquery ]; then target=bigquery; shift; fi
if [ "${1:-}" = commit-timestamp ]; then target=commit-timestamp; shift; fi
if [ "${1:-}" = datastream ]; then target=datastream; shift; fi
if [ "${1:-}" = datastream-bigquery ]; then target=datastream-bigquery; shift; fi
if [ "${1:-}" = tablestore ]; then target=tablestore; shift; fi
if [ "${1:-}" = tablestore-bigquery ]; then target=tablestore-bigquery; shift; fi
if [ "${1:-}" = gcs ]; then target=gcs; shift; fi
windows=${1:-5}
bash scripts/setup.sh
root=$(pwd)
export AIRFLOW_HOME="$root/.demo/airflow"
export CDC_DEMO_HOME="$root/.demo/cdc"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_FOLDER="$root/example_dags"
export PATH="$root/.venv/bin:$PATH"
# The demo's windows are fixed (10 minutes from 2026-01-01): settings of another run must not apply.
unset CDC_WINDOW_SECONDS CDC_START_DATE CDC_WINDOW_MINUTES
rm -rf "$root/.demo" && mkdir -p "$AIRFLOW_HOME" "$CDC_DEMO_HOME"

log() { printf '\n[demo] %s\n' "$*" >&2; }
log "initialising Airflow in $AIRFLOW_HOME"
airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1

# Every window's merge runs in one warm Spark: a local Spark Connect server started here (and
# stopped on exit), named by the Spark connection. CDC_DEMO_SPARK=submit runs a cold spark-submit
# per window instead.
cleanups=()
on_exit() { local c; for c in "${cleanups[@]}"; do eval "$c" || true; done; }
trap on_exit EXIT
if [ "${CDC_DEMO_SPARK:-connect}" = connect ]; then
  spark_port=$(python -c "from airflow_provider_cdc.placement.connect.server import free_port; print(free_port())")
  log "starting a local Spark Connect server on 127.0.0.1:$spark_port (the merge of every window runs in it)"
  export CDC_SPARK_CONNECT_HOME="$CDC_DEMO_HOME/spark-connect"
  cleanups+=("python -m airflow_provider_cdc spark-connect stop >/dev/null")
  python -m airflow_provider_cdc spark-connect start --port "$spark_port" >&2
  export AIRFLOW_CONN_SPARK_DEFAULT="{\"conn_type\": \"spark_connect\", \"host\": \"sc://127.0.0.1\", \"port\": $spark_port}"
fi

if [ "$target" = bigquery ]; then
  # The emulator (with the demo database) and the BigQuery fake are served by this one process.
  log "running spanner_change_stream_to_bigquery for $windows windows against the BigQuery fake"
  status=0
  python -m airflow_provider_cdc.testing.demo bigquery --windows "$windows" --log-dir "$CDC_DEMO_HOME" || status=$?
  log "metastore: windows, partitions and apply watermarks (Delta and BigQuery)"
  python -m airflow_provider_cdc status --pipeline spanner_change_stream_to_bigquery --limit 12
  log "task timings per window (seconds)"
  python -m airflow_provider_cdc timings --dag-id spanner_change_stream_to_bigquery
  exit "$status"
fi

if [ "$target" = datastream ] || [ "$target" = datastream-bigquery ]; then
  dag=datastream_to_lake kind=lake
  [ "$target" = datastream-bigquery ] && dag=datastream_to_bigquery kind=bigquery
  log "writing a Datastream stream to the Cloud Storage emulator, then running $dag window by window"
  status=0
  python -m airflow_provider_cdc.testing.datastream.demo --windows "${1:-4}" --target "$kind" \
    --log-dir "$CDC_DEMO_HOME" || status=$?
  if [ "$kind" = lake ]; then
    log "target tables (Delta Lake, $CDC_DEMO_HOME/datastream/lake)"
    python -m airflow_provider_cdc tables --lake-root "$CDC_DEMO_HOME/datastream/lake" --rows 3
  fi
  log "metastore: windows, files and apply watermarks"
  python -m airflow_provider_cdc status --pipeline "$dag" --limit 12
  log "task timings per window (seconds)"
  python -m airflow_provider_cdc timings --dag-id "$dag"
  exit "$status"
fi

if [ "$target" = tablestore ] || [ "$target" = tablestore-bigquery ]; then
  dag=tablestore_stream_to_lake kind=lake lake="$CDC_DEMO_HOME/tablestore/lake"
  if [ "$target" = tablestore-bigquery ]; then
    dag=tablestore_stream_to_bigquery kind=bigquery lake="$CDC_DEMO_HOME/tablestore/bigquery/lake"
  fi
  log "starting the Table Store stream emulator with a seeded workload, then running $dag window by window"
  status=0
  python -m airflow_provider_cdc.testing.tablestore_emulator.demo --windows "${1:-3}" --target "$kind" \
    --log-dir "$CDC_DEMO_HOME" || status=$?
  log "target tables (Delta Lake, $lake)"
  python -m airflow_provider_cdc tables --lake-root "$lake" --rows 3 || true
  log "metastore: windows, shards and apply watermarks"
  python -m airflow_provider_cdc status --pipeline "$dag" --limit 12
  log "task timings per window (seconds)"
  python -m airflow_provider_cdc timings --dag-id "$dag"
  exit "$status"
fi

start_emulator() {  # ARGS...: the emulator's demo options
  python -m airflow_provider_cdc.testing.spanner_emulator --port 0 --demo "$@" \
    --port-file "$CDC_DEMO_HOME/emulator.port" --demo-truth "$CDC_DEMO_HOME/truth.json" \
    >"$CDC_DEMO_HOME/emulator.log" 2>&1 &
  emulator=$!
  cleanups+=("kill $emulator 2>/dev/null")
  for _ in $(seq 1 120); do [ -s "$CDC_DEMO_HOME/emulator.port" ] && break; sleep 1; done
  [ -s "$CDC_DEMO_HOME/emulator.port" ] || { cat "$CDC_DEMO_HOME/emulator.log"; exit 1; }
  export SPANNER_EMULATOR_HOST=$(cat "$CDC_DEMO_HOME/emulator.port")
  grep -h "demo database loaded" "$CDC_DEMO_HOME/emulator.log" | sed 's/^.*INFO __main__: /[demo] /' >&2
}

run_windows() {  # DAG PATTERN: each window with `airflow dags test`, printing the log lines PATTERN matches
  local dag=$1 pattern=$2 i logical start
  for i in $(seq 1 "$windows"); do
    logical=$(python -c "from datetime import datetime, timedelta, timezone; print((datetime(2026,1,1,tzinfo=timezone.utc)+timedelta(minutes=10*$i)).isoformat())")
    log "window $i/$windows: airflow dags test $dag $logical (data interval ends there)"
    start=$(date +%s)
    if ! airflow dags test "$dag" "$logical" >"$CDC_DEMO_HOME/window-$i.log" 2>&1; then
      tail -40 "$CDC_DEMO_HOME/window-$i.log"; exit 1
    fi
    grep -hoE "$pattern" "$CDC_DEMO_HOME/window-$i.log" | sed 's/^/  /' >&2 || true
    log "window $i done in $(( $(date +%s) - start )) s"
  done
}

report() {  # DAG LAKE_ROOT QUESTION: the tables, the metastore, the timings and the comparison
  local dag=$1 lake=$2
  log "target tables (Delta Lake, $lake)"
  python -m airflow_provider_cdc tables --lake-root "$lake" --rows 3
  log "metastore: windows, partitions and apply watermarks"
  python -m airflow_provider_cdc status --pipeline "$dag" --limit 12
  log "task timings per window (seconds)"
  python -m airflow_provider_cdc timings --dag-id "$dag"
  log "do the tables equal the history committed to Spanner in those $windows windows$3?"
  python -m airflow_provider_cdc compare --lake-root "$lake" --truth "$CDC_DEMO_HOME/truth.json" --windows "$windows"
}

applied='Window \[[^]]*\) applied[^[]*'

if [ "$target" = gcs ]; then
  # Every root on gs:// in the Cloud Storage fake (JSON and XML APIs on one loopback port); it serves
  # until its stdin (a FIFO this script holds open) closes.
  windows=${1:-3}
  bucket=cdc lake="gs://cdc/demo/lake"
  log "starting the Cloud Storage fake with the bucket $bucket"
  mkfifo "$CDC_DEMO_HOME/gcs.stdin"
  python -m airflow_provider_cdc.testing.gcs_fake --port 0 --port-file "$CDC_DEMO_HOME/gcs.port" \
    --bucket "$bucket" <"$CDC_DEMO_HOME/gcs.stdin" >"$CDC_DEMO_HOME/gcs.log" 2>&1 &
  gcs=$!
  exec 3>"$CDC_DEMO_HOME/gcs.stdin"
  cleanups+=("kill $gcs 2>/dev/null")
  for _ in $(seq 1 60); do [ -s "$CDC_DEMO_HOME/gcs.port" ] && break; sleep 1; done
  [ -s "$CDC_DEMO_HOME/gcs.port" ] || { cat "$CDC_DEMO_HOME/gcs.log"; exit 1; }
  # pyarrow and google-cloud-storage find the fake through STORAGE_EMULATOR_HOST; delta-rs through the
  # service-account key in the Google connection (object_store's gcs_base_url and disable_oauth fields).
  export STORAGE_EMULATOR_HOST="http://127.0.0.1:$(cat "$CDC_DEMO_HOME/gcs.port")"
  python -c "from airflow_provider_cdc.testing.gcs_fake import delta_storage_options as o
print(o('$STORAGE_EMULATOR_HOST')['google_service_account_key'])" >"$CDC_DEMO_HOME/gcs-key.json"
  export AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT=$(python -c "import json, sys
print(json.dumps({'conn_type': 'google_cloud_platform', 'extra': {'keyfile_dict': open(sys.argv[1]).read()}}))" \
    "$CDC_DEMO_HOME/gcs-key.json")
  conf="{\"staging_root\": \"gs://$bucket/demo/staging\", \"changeset_root\": \"gs://$bucket/demo/changesets\", \"lake_root\": \"$lake\"}"
  log "starting the Spanner change-stream emulator and loading the demo database"
  start_emulator --demo-windows 6
  for i in $(seq 1 "$windows"); do
    logical=$(python -c "from datetime import datetime, timedelta, timezone; print((datetime(2026,1,1,tzinfo=timezone.utc)+timedelta(minutes=10*$i)).isoformat())")
    log "window $i/$windows: airflow dags test spanner_change_stream_to_lake $logical -c '$conf'"
    start=$(date +%s)
    if ! airflow dags test spanner_change_stream_to_lake "$logical" -c "$conf" >"$CDC_DEMO_HOME/window-$i.log" 2>&1; then
      tail -40 "$CDC_DEMO_HOME/window-$i.log"; exit 1
    fi
    grep -hoE "$applied" "$CDC_DEMO_HOME/window-$i.log" | sed 's/^/  /' >&2 || true
    log "window $i done in $(( $(date +%s) - start )) s"
  done
  log "objects in gs://$bucket (per folder)"
  python -c "from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
import collections, os
client = storage.Client(project='demo-project', credentials=AnonymousCredentials(),
                        client_options={'api_endpoint': os.environ['STORAGE_EMULATOR_HOST']})
names = [b.name for b in client.list_blobs('$bucket') if not b.name.endswith('/')]  # no folder markers
counts = collections.Counter('/'.join(name.split('/')[:3]) for name in names)
for folder, n in sorted(counts.items()): print(f'  gs://$bucket/{folder}: {n} objects')"
  log "metastore: windows, partitions and apply watermarks"
  python -m airflow_provider_cdc status --pipeline spanner_change_stream_to_lake --limit 12
  log "task timings per window (seconds)"
  python -m airflow_provider_cdc timings --dag-id spanner_change_stream_to_lake
  # compare takes no storage options: delta-rs reads the same key from GOOGLE_SERVICE_ACCOUNT.
  log "do the Delta tables in $lake equal the history committed to Spanner in those $windows windows?"
  GOOGLE_SERVICE_ACCOUNT="$CDC_DEMO_HOME/gcs-key.json" python -m airflow_provider_cdc compare \
    --lake-root "$lake" --truth "$CDC_DEMO_HOME/truth.json" --windows "$windows"
  exit
fi
if [ "$target" = commit-timestamp ]; then
  log "starting the Spanner emulator and loading the commit-timestamp demo database (ledger, $windows windows)"
  start_emulator --demo-kind commit-timestamp --demo-windows "$windows"
  run_windows spanner_commit_timestamp_tables_to_lake \
    "Window \[[^]]*\) of [A-Za-z0-9_]+: commit_timestamp read at [^;]*|$applied"
  report spanner_commit_timestamp_tables_to_lake "$CDC_DEMO_HOME/commit-timestamp/lake" \
    " (soft-deleted rows gone, each document's latest history row)"
else
  log "starting the Spanner change-stream emulator and loading the demo database"
  start_emulator --demo-windows 6
  run_windows spanner_change_stream_to_lake \
    "Window \[[^]]*\) of [A-Za-z0-9_]+: (snapshot read at [^;]*|read [0-9]+ rows from [0-9]+ batch[^[]*)|Window \[[^]]*\): read [0-9]+ change rows[^[]*|$applied"
  report spanner_change_stream_to_lake "$CDC_DEMO_HOME/lake" ""
  log "where to look next:
  each window's log (every task's lines):  $CDC_DEMO_HOME/window-N.log
  the Delta tables:                        $CDC_DEMO_HOME/lake/<table>  (deltalake.DeltaTable(path).to_pyarrow_table())
  the pipeline in Airflow's UI:            scripts/ui.sh, then http://localhost:8080/plugin/cdc-pipelines
  why a window failed or waits:            .venv/bin/python -m airflow_provider_cdc explain --pipeline spanner_change_stream_to_lake
  your own pipeline on the emulator:       README, 'Your own pipeline in ten minutes' (cdc-spanner-emulator --ddl FILE --database NAME)"
fi
