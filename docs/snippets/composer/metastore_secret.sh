gcloud secrets create airflow-connections-cdc_metastore_default --data-file=- <<'JSON'
{"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": "postgresql+psycopg2://cdc:PASSWORD@10.20.0.3:5432/cdc"}}
JSON
