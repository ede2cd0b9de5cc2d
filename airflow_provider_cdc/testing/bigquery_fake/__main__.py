"""Run the loopback BigQuery fake: ``python -m airflow_provider_cdc.testing.bigquery_fake --dataset p.d``.

Prints one JSON line ``{"rest_endpoint": ..., "write_endpoint": ...}`` and serves until stdin
closes or the process is terminated.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import FakeBigQuery


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", action="append", default=[], help="project.dataset to create")
    args = parser.parse_args(argv)
    fake = FakeBigQuery().start()
    for name in args.dataset:
        project, dataset = name.split(".", 1)
        fake.create_dataset(project, dataset)
    print(
        json.dumps({"rest_endpoint": fake.rest_endpoint, "write_endpoint": fake.write_endpoint}), flush=True
    )
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
