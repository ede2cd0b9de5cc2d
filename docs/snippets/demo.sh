bash scripts/demo.sh                       # the change-stream DAG into Delta Lake, 5 windows
bash scripts/demo.sh 6                     # all six demo windows
bash scripts/demo.sh bigquery              # then BigQuery CDC tables, in the BigQuery fake
bash scripts/demo.sh commit-timestamp      # Spanner tables read by their commit-timestamp column
bash scripts/demo.sh datastream            # Datastream files (MySQL, Avro) over a Cloud Storage emulator
bash scripts/demo.sh datastream-bigquery   # the same into BigQuery
bash scripts/demo.sh tablestore            # the Table Store stream emulator, 3 one-minute windows
bash scripts/demo.sh tablestore-bigquery   # the same into BigQuery
bash scripts/demo.sh gcs                   # every root on gs:// in the Cloud Storage fake
CDC_DEMO_SPARK=submit bash scripts/demo.sh # a cold spark-submit per window instead of Spark Connect
