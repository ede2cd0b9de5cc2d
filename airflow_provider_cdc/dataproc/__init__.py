"""Running the merge and upsert jobs on Dataproc: cluster jobs or Serverless batches."""
