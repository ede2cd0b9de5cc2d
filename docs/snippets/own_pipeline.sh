# The example DAG against your database: its params take your project, instance, database and stream.
export SPANNER_EMULATOR_HOST=127.0.0.1:9010
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/example_dags" AIRFLOW__CORE__LOAD_EXAMPLES=False
conf='{"project_id": "test-project", "instance_id": "test-instance", "database_id": "shop",
       "stream": "ShopChanges"}'
python -m airflow_provider_cdc check --dag spanner_change_stream_to_lake --conf "$conf"
airflow db migrate
# On Airflow 3 the date is the window's end: this runs [00:00, 00:10), after the initial snapshot.
airflow dags test spanner_change_stream_to_lake 2026-01-01T00:10:00+00:00 -c "$conf"
python -m airflow_provider_cdc status --pipeline spanner_change_stream_to_lake
python -m airflow_provider_cdc tables --pipeline spanner_change_stream_to_lake
