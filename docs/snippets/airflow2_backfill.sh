export AIRFLOW_HOME=~/airflow2 SPANNER_EMULATOR_HOST=127.0.0.1:9010
export AIRFLOW__CORE__DAGS_FOLDER=$PWD/example_dags
.venv-airflow2/bin/airflow db migrate
.venv-airflow2/bin/airflow dags backfill -s 2026-01-01T00:00:00+00:00 -e 2026-01-01T00:20:00+00:00 \
    spanner_change_stream_to_lake          # windows [00:00,00:10) [00:10,00:20) [00:20,00:30)
