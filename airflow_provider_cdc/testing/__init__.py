"""The test kit: the Spanner change-stream emulator, Google's emulator as a child process, the BigQuery
fakes, seeded workloads with their ground truth, the demo database and lake/ground-truth comparison.

Install it with the ``testing`` extra (``pip install 'airflow-provider-cdc[testing]'``); the provider's
own modules never import it.
"""
