export AIRFLOW_CONN_DATAPROC_JOBS='{"conn_type": "dataproc", "extra": {
  "project_id": "my-project", "region": "us-central1", "cluster_name": "cdc",
  "staging_uri": "gs://my-bucket/dataproc",
  "properties": {"spark.executor.memory": "4g"}, "labels": {"team": "data"}}}'
