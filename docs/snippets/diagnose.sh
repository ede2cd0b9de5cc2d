python -m airflow_provider_cdc pipelines                                          # every pipeline, where it stands
python -m airflow_provider_cdc explain --pipeline spanner_change_stream_to_lake   # why its newest window is not applied
python -m airflow_provider_cdc status --pipeline spanner_change_stream_to_lake    # windows, partitions, watermarks, leases
