"""BigQuery CDC target: change sets written through the Storage Write API default stream."""
