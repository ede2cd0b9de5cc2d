"""``python -m airflow_provider_cdc``: the pipeline's command line (see :mod:`airflow_provider_cdc.cli`)."""

import sys

from airflow_provider_cdc.cli import main

sys.exit(main())
