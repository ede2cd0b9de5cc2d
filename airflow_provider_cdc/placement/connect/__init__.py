"""Spark Connect: run the provider's Spark jobs in an already-running Spark (a local server or a
cluster's), instead of starting a JVM per window with ``spark-submit``."""
