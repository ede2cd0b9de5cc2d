"""Where a Spark job runs, chosen by the type of the step's Spark connection.

- :mod:`~airflow_provider_cdc.placement.spark_submit`: ``spark-submit`` to the connection's master
  (``local[*]`` without one, a standalone ``spark://`` cluster, YARN, Kubernetes), and the job's
  settings, credentials and local runs;
- :mod:`~airflow_provider_cdc.placement.connect`: a Spark Connect server (``spark_connect``), the task
  being the driver;
- :mod:`~airflow_provider_cdc.placement.dataproc`: Dataproc cluster jobs or Serverless batches
  (``dataproc``);
- :mod:`~airflow_provider_cdc.placement.job_archive`: the zips every placement ships the jobs' modules in.
"""
