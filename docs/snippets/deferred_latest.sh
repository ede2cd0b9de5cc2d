python -m airflow_provider_cdc latest --lake-root /path/to/lake --table Orders --output orders.parquet
python -m airflow_provider_cdc compact --lake-root /path/to/lake --table Orders --pipeline orders
