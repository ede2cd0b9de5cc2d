"""Running the merge and upsert jobs on Dataproc: cluster jobs or Serverless batches.

:mod:`~airflow_provider_cdc.placement.dataproc.resources` (a ``dataproc`` connection's fields, job and
batch resources, run ids and labels; pure), :mod:`~airflow_provider_cdc.placement.dataproc.hook`
(``DataprocJobsHook``: staging, fencing, submitting) and :mod:`~airflow_provider_cdc.placement.dataproc.run`
(the operators' glue)."""
