"""Google Cloud Datastream: change events in Cloud Storage files as staged change rows."""
