bash scripts/test.sh                         # set up both virtualenvs, ruff, the whole suite
bash scripts/test.sh --fast                  # the fast tier: no end-to-end DAG runs, no Spark merge scenarios
bash scripts/test.sh --fast tests/core     # extra arguments go to pytest
bash scripts/test.sh tests/core            # one layer
CDC_E2E_TESTS=0 bash scripts/test.sh         # the whole suite without the Airflow 3 end-to-end DAG tests
