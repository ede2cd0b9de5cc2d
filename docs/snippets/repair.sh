python -m airflow_provider_cdc repair --pipeline spanner_change_stream_to_lake \
    --lake-root /path/to/lake --changeset-root /path/to/changesets
