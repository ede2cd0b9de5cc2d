python -m airflow_provider_cdc check --dag spanner_change_stream_to_lake --conf '{"stream": "Orders"}'
