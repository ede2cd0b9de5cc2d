"""What the end-to-end DAG tests share: the switches that run them (and the Airflow 2.11 tests), a
report on the example DAGs from a fresh interpreter, and the runs of an example DAG on its Airflow home
(its windows, ``airflow dags test`` of one, the committed history up to a window's end, its metastore)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

#: Marks an end-to-end DAG test: it runs only with ``CDC_E2E_TESTS=1``.
END_TO_END = pytest.mark.skipif(
    os.environ.get("CDC_E2E_TESTS") != "1",
    reason="end-to-end DAG tests run with CDC_E2E_TESTS=1, as scripts/test.sh sets it",
)

#: The Airflow 2.11 virtualenv in which the Airflow 2 tests run their commands.
AIRFLOW2_VENV = Path(__file__).resolve().parents[2] / ".venv-airflow2"
#: Marks an Airflow 2.11 test module: it needs that virtualenv.
ON_AIRFLOW2 = [
    pytest.mark.airflow2,
    pytest.mark.skipif(
        not (AIRFLOW2_VENV / "bin" / "airflow").exists(),
        reason=f"{AIRFLOW2_VENV} (Airflow 2.11) is missing: create it with scripts/setup.sh --airflow2",
    ),
]

#: The example DAGs' folder.
EXAMPLE_DAGS = Path(__file__).resolve().parents[2] / "example_dags"


def example_dags_report(script: str, airflow_root: Path, *args: str) -> Any:
    """What ``script`` prints as JSON on its last line, run with ``args`` in a fresh interpreter on an
    Airflow home in ``airflow_root`` (nothing of this process's Airflow or CDC settings); its stderr
    fails the test when it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CDC_"))}
    env.update(AIRFLOW_HOME=str(airflow_root / "airflow"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    result = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


class ExampleDagRuns:
    """Runs of the example DAG :attr:`dag_id` on the Airflow home :attr:`home` (an ``ExampleDagHome``),
    each with the run conf :attr:`conf`."""

    dag_id: ClassVar[str]
    home: Any

    @property
    def conf(self) -> dict[str, str]:
        """The DAG run's conf (none: the DAG's defaults)."""
        return {}

    def window(self, index: int) -> tuple[datetime, datetime]:
        return self.home.settings.window_bounds(index)

    def snapshot_window(self) -> tuple[datetime, datetime]:
        """The initial snapshot's window ``[T - 1µs, T)``, applied by the first window's run."""
        start = self.window(0)[0]
        return start - timedelta(microseconds=1), start

    def run(self, index: int, name: str) -> str:
        """``airflow dags test`` of window ``index`` (the date given is the window's end); its output."""
        end = self.window(index)[1]
        return self.home.airflow(
            "dags", "test", self.dag_id, end.isoformat(), "-c", json.dumps(self.conf),
            log=self.home.root / f"{name}.log", timeout=600,
        )  # fmt: skip

    def truth_after(self, index: int) -> dict[str, list[dict[str, Any]]]:
        """The tables' rows once every transaction committed before window ``index``'s end is applied."""
        from airflow_provider_cdc.core.timestamps import ONE_MICROSECOND
        from airflow_provider_cdc.testing.workload import TABLES_BY_NAME

        state = self.home.workload.state_at(self.window(index)[1] - ONE_MICROSECOND)
        return {
            name: [TABLES_BY_NAME[name].encode_values(rows[key]) for key in sorted(rows)]
            for name, rows in state.items()
        }

    def metastore(self) -> Any:
        from airflow_provider_cdc.metastore import Metastore

        return Metastore(self.home.metastore_url)
