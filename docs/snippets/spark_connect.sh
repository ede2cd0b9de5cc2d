# a local server: one warm Spark for every window (loopback only; pid, port and log under
# ~/.cache/cdc-spark-connect, or CDC_SPARK_CONNECT_HOME)
python -m airflow_provider_cdc spark-connect start --port 15002     # prints the connection below
export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}'
python -m airflow_provider_cdc spark-connect status                 # exit status 3 when not running
python -m airflow_provider_cdc spark-connect stop
