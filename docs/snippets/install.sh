pip install 'airflow-provider-cdc[spark]'                 # the provider, with PySpark for the merge job
pip install 'airflow-provider-cdc[spark,bigquery]'        # and the BigQuery CDC target
pip install 'airflow-provider-cdc[datastream,openlineage]' # the Datastream source; OpenLineage facets
pip install -e '.[test]'                                  # in this repository: every extra and the test tools
