"""The upsert job (spark-submit entry point) and SparkUpsertWindowOperator."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from support.change_sets import END, WINDOW_ID, write_window
from support.change_sets import interval_context as _context

from airflow_provider_cdc import filesystems
from airflow_provider_cdc.core.timestamps import to_micros
from airflow_provider_cdc.targets.delta import upsert_job
from airflow_provider_cdc.targets.delta.target import APP_ID_PREFIX, DeltaLakeTarget


def run_main(capsys, *args: str) -> tuple[int, dict]:
    code = upsert_job.main(list(args))
    captured = capsys.readouterr()
    text = captured.out if code == 0 else captured.err
    return code, json.loads(text.strip().splitlines()[-1])


def test_job_applies_every_table_and_prints_a_summary(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv(filesystems.STORAGE_OPTIONS_ENV, raising=False)
    changeset = write_window(tmp_path / "changesets")
    lake = tmp_path / "lake"
    args = ["--changeset", str(changeset), "--lake-root", str(lake), "--pipeline-id", "shop"]
    code, summary = run_main(capsys, *args, "--window-version", str(to_micros(END)))
    assert code == 0
    assert summary["tables_applied"] == ["Customers", "Orders"]
    assert (summary["rows_upserted"], summary["rows_deleted"], summary["skipped_as_applied"]) == (6, 0, [])
    target = DeltaLakeTarget(str(lake))
    orders = sorted(target.read_table("Orders").to_pylist(), key=lambda r: r["OrderId"])
    assert [str(o["Amount"]) for o in orders] == [f"{i}.250000000" for i in range(5)]
    assert target.read_table("Customers", ["CustomerId", "Photo"]).to_pylist() == [
        {"CustomerId": 1, "Photo": b"\x89PNG"}
    ]
    # The window version defaults to the end of the change set's window id; a re-run skips.
    code, again = run_main(capsys, *args)
    assert (
        code == 0 and again["skipped_as_applied"] == ["Customers", "Orders"] and again["tables_applied"] == []
    )
    assert DeltaTable(str(lake / "Orders")).version() == 0


def test_job_refuses_a_change_set_without_manifest(tmp_path: Path, capsys) -> None:
    changeset = write_window(tmp_path / "changesets")
    (changeset / "_manifest.json").unlink()
    code, error = run_main(
        capsys, "--changeset", str(changeset), "--lake-root", str(tmp_path / "lake"), "--pipeline-id", "shop"
    )
    assert code == 2 and error["error"] == "ChangeSetError"
    assert "_manifest.json" in error["message"] and "incomplete" in error["message"]
    assert not (tmp_path / "lake").exists()


def test_job_refuses_a_change_set_whose_rows_do_not_match_the_manifest(tmp_path: Path, capsys) -> None:
    changeset = write_window(tmp_path / "changesets")
    manifest = json.loads((changeset / "_manifest.json").read_text())
    manifest["tables"]["Orders"]["rows"] = 6
    (changeset / "_manifest.json").write_text(json.dumps(manifest))
    code, error = run_main(
        capsys, "--changeset", str(changeset), "--lake-root", str(tmp_path / "lake"), "--pipeline-id", "shop"
    )
    assert code == 2 and "'Orders' has 5 rows, manifest says 6" in error["message"]


@pytest.mark.parametrize("listed", [{}, {"Customers": {"rows": 2, "source_changes": 2}}])
def test_job_refuses_a_manifest_that_omits_a_table(tmp_path: Path, capsys, listed: dict) -> None:
    changeset = write_window(tmp_path / "changesets")
    manifest = json.loads((changeset / "_manifest.json").read_text())
    (changeset / "_manifest.json").write_text(json.dumps({**manifest, "tables": listed, "rows": 2}))
    code, error = run_main(
        capsys, "--changeset", str(changeset), "--lake-root", str(tmp_path / "lake"), "--pipeline-id", "shop"
    )
    assert code == 2 and error["error"] == "ChangeSetError"
    assert "table=Orders" in error["message"]
    assert "'Orders' that _manifest.json does not list" in error["message"]
    assert not (tmp_path / "lake").exists()  # nothing applied, not even the listed table


def test_job_refuses_a_window_version_that_contradicts_the_change_set(tmp_path: Path, capsys) -> None:
    changeset = write_window(tmp_path / "changesets")
    code, error = run_main(
        capsys,
        *("--changeset", str(changeset), "--lake-root", str(tmp_path / "lake"), "--pipeline-id", "shop"),
        *("--window-version", "123"),
    )
    assert code == 2 and "--window-version 123 does not match" in error["message"]


def test_storage_options_come_from_the_environment_only(monkeypatch) -> None:
    monkeypatch.setenv(filesystems.STORAGE_OPTIONS_ENV, '{"google_service_account": "/keys/lake.json"}')
    assert filesystems.storage_options_from_env() == {"google_service_account": "/keys/lake.json"}
    monkeypatch.setenv(filesystems.STORAGE_OPTIONS_ENV, '{"google_service_account_key": "s3cr3t"')
    with pytest.raises(filesystems.StorageOptionsError) as info:
        filesystems.storage_options_from_env()
    assert "s3cr3t" not in str(info.value)
    options = {a.dest for a in upsert_job.build_parser()._actions}
    assert not any("option" in o or "credential" in o or "key" in o for o in options)


# --------------------------------------------------------------------------- operator

KEYFILE = {
    "type": "service_account",
    "private_key": "-----BEGIN PRIVATE KEY-----\nabc\n",
    "client_email": "x@y",
}


@pytest.fixture
def gcp_connection(monkeypatch) -> str:
    conn = {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": json.dumps(KEYFILE)}}
    monkeypatch.setenv("AIRFLOW_CONN_GCP_LAKE", json.dumps(conn))
    return "gcp_lake"


def test_gcp_storage_options_from_connection_extras() -> None:
    from airflow_provider_cdc.hooks.storage import gcp_storage_options

    assert gcp_storage_options({}) == {}
    assert gcp_storage_options({"key_path": "/keys/k.json"}) == {"google_service_account": "/keys/k.json"}
    assert json.loads(gcp_storage_options({"keyfile_dict": KEYFILE})["google_service_account_key"]) == KEYFILE
    legacy = {"extra__google_cloud_platform__keyfile_dict": json.dumps(KEYFILE)}
    assert json.loads(gcp_storage_options(legacy)["google_service_account_key"]) == KEYFILE
    with pytest.raises(ValueError, match="impersonation_chain"):
        gcp_storage_options({"impersonation_chain": "sa@p.iam.gserviceaccount.com"})
    with pytest.raises(ValueError, match="both 'keyfile_dict' and 'key_path'"):
        gcp_storage_options({"keyfile_dict": KEYFILE, "key_path": "/k.json"})
    with pytest.raises(ValueError, match="'keyfile_dict' is not valid JSON"):
        gcp_storage_options({"keyfile_dict": "{"})


@pytest.fixture(autouse=True)
def metastore_url(tmp_path: Path, monkeypatch) -> str:
    """Each test's own metastore behind the default metastore connection."""
    url = f"sqlite:///{tmp_path / 'metastore.db'}"
    monkeypatch.setenv("AIRFLOW_CONN_CDC_METASTORE_DEFAULT",
                       json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": url}}))
    return url


def _operator(task_id: str = "upsert", **kwargs):
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    kwargs.setdefault("locations", {"changeset_root": "gs://b/changesets/", "lake_root": "gs://b/lake"})
    op = SparkUpsertWindowOperator(task_id=task_id, pipeline_id="shop", **kwargs)
    op.render_template_fields(_context())
    return op


def test_operator_builds_arguments_from_the_data_interval() -> None:
    from airflow_provider_cdc.targets.delta.operators import UPSERT_JOB_PATH

    op = _operator()
    assert op.application == UPSERT_JOB_PATH and Path(UPSERT_JOB_PATH).is_file()
    for field in ("locations", "pipeline_id", "window_start", "window_end", "gcp_conn_id"):
        assert field in op.template_fields
    assert op.build_application_args() == [
        *("--changeset", f"gs://b/changesets/{WINDOW_ID}", "--lake-root", "gs://b/lake"),
        *("--pipeline-id", "shop", "--window-version", str(to_micros(END))),
        *("--expected-versions", '{"tables":{},"recorded_from_us":null}'),
    ]
    explicit = _operator(
        "u2",
        locations={"changeset_root": "/c", "lake_root": "/l"},
        window_start="1970-01-01T00:00:00.000001Z",
        window_end="1970-01-01T00:00:00.000002Z",
    )
    assert explicit.build_application_args()[1::2][:4] == ["/c/1-2", "/l", "shop", "2"]
    with pytest.raises(ValueError, match=r"locations lacks \['lake_root'\]"):
        _operator("u3", locations={"changeset_root": "/c"}).build_application_args()


def _submitted(op, monkeypatch) -> dict:
    """What the operator hands spark-submit (its fields at the moment SparkSubmitOperator runs)."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    seen: dict = {}

    def submit(self, context):
        seen.update(env=dict(self.env_vars or {}), args=list(self.application_args or []))

    monkeypatch.setattr(SparkSubmitOperator, "execute", submit)
    # the job did not run: what the lake holds afterwards is not read
    monkeypatch.setattr(type(op), "_applied", lambda self: None, raising=True)
    monkeypatch.setattr(type(op), "execute", lambda self, context: self._run(context))
    op.execute(_context())
    return seen


def test_operator_passes_credentials_in_the_environment_only(gcp_connection: str, monkeypatch) -> None:
    from airflow_provider_cdc.filesystems import STORAGE_OPTIONS_ENV

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    op = _operator(
        gcp_conn_id=gcp_connection,
        env_vars={"PYSPARK_PYTHON": "python3"},
        conn_id="spark_local",
        local_python=False,
    )
    seen = _submitted(op, monkeypatch)
    options = json.loads(seen["env"][STORAGE_OPTIONS_ENV])
    assert json.loads(options["google_service_account_key"]) == KEYFILE
    assert seen["env"]["PYSPARK_PYTHON"] == "python3"
    assert "PRIVATE KEY" not in " ".join(seen["args"])
    # Nothing of the run stays on the operator: rendered fields keep no credential.
    assert op.env_vars == {"PYSPARK_PYTHON": "python3"} and op.application_args in (None, [])


def test_operator_refuses_credentials_where_they_would_reach_the_command_line(
    gcp_connection: str, monkeypatch
) -> None:
    # On YARN (and Kubernetes) spark-submit turns the environment into --conf values; the upsert is
    # submitted only when its driver would run on the cluster (in client mode it runs here, no JVM).
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_REMOTE", json.dumps({"conn_type": "spark", "host": "yarn"}))
    op = _operator(
        locations={"changeset_root": "gs://b/c", "lake_root": "gs://b/l"},
        gcp_conn_id=gcp_connection,
        conn_id="spark_remote",
        deploy_mode="cluster",
    )
    with pytest.raises(ValueError, match="command line") as info:
        _submitted(op, monkeypatch)
    assert "PRIVATE KEY" not in str(info.value)


@pytest.mark.spark
def test_operator_runs_the_job_through_a_real_spark_submit(tmp_path: Path, monkeypatch, capfd) -> None:
    from airflow_provider_cdc.targets.delta.operators import SparkUpsertWindowOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LOCAL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    write_window(tmp_path / "changesets")
    lake = tmp_path / "lake"
    key_path = tmp_path / "key.json"
    key_path.write_text(json.dumps(KEYFILE))
    monkeypatch.setenv(
        "AIRFLOW_CONN_GCP_LAKE",
        json.dumps({"conn_type": "google_cloud_platform", "extra": {"key_path": str(key_path)}}),
    )
    op = SparkUpsertWindowOperator(
        task_id="upsert",
        conn_id="spark_local",
        locations={"changeset_root": str(tmp_path / "changesets"), "lake_root": str(lake)},
        pipeline_id="shop",
        gcp_conn_id="gcp_lake",
        env_vars={"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
        conf={"spark.ui.enabled": "false"},
        local_python=False,  # spark-submit even on a local master
    )
    op.render_template_fields(_context())
    op.execute(_context())
    output = capfd.readouterr().out
    # The hook logs the job's output; the summary is one JSON object with sorted keys.
    summaries = [
        json.loads(m)
        for m in re.findall(r'\{"changeset".*?"tables_applied": \[[^\]]*\], "window_version": \d+\}', output)
    ]
    assert summaries and summaries[-1]["tables_applied"] == ["Customers", "Orders"]
    assert summaries[-1]["storage_option_names"] == ["google_service_account"]  # from gcp_conn_id
    assert str(key_path) not in output and "PRIVATE KEY" not in output
    target = DeltaLakeTarget(str(lake))
    assert sorted(r["OrderId"] for r in target.read_table("Orders").to_pylist()) == [
        f"o{i}" for i in range(5)
    ]
    for table in ("Orders", "Customers"):
        assert DeltaTable(str(lake / table)).transaction_version(APP_ID_PREFIX + "shop") == to_micros(END)


# ------------------------------------------------------------------------------------------
# Windows in order, checked by the job itself (no metastore): the manifest's previous windows


def _ordered_window(root: Path, n: int, tables: list[str], previous: dict[str, int], epoch: int = 1) -> Path:
    """Window ``n`` (one minute each) changing ``tables``, its manifest recording, as the merge does,
    the epoch and per table the end of the last earlier window that changed it."""
    from datetime import datetime, timedelta, timezone

    from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
    from airflow_provider_cdc.core.window import Window

    types = [
        {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
        {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    ]
    start = datetime(2026, 3, 1, tzinfo=timezone.utc) + timedelta(minutes=n)
    window = Window(start, start + timedelta(minutes=1))
    change = Change({"Id": 1}, "UPSERT", f"{to_micros(start):016X}", start, {"Name": f"window {n}"})
    folder = root / window.window_id
    write_change_set(str(folder), {name: change_set_table(types, [change]) for name in tables})
    manifest = json.loads((folder / "_manifest.json").read_text())
    manifest.update(epoch=epoch, previous_windows={"tables": previous, "recorded_from_us": None})
    (folder / "_manifest.json").write_text(json.dumps(manifest))
    return folder


def _end(folder: Path) -> int:
    return int(folder.name.split("-")[1])


def test_the_job_alone_refuses_a_window_whose_predecessor_a_table_has_not_applied(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.delenv(filesystems.STORAGE_OPTIONS_ENV, raising=False)
    root, lake = tmp_path / "changesets", tmp_path / "lake"
    w1 = _ordered_window(root, 1, ["Orders", "Customers"], {})
    end1 = _end(w1)
    w2 = _ordered_window(root, 2, ["Customers"], {"Orders": end1, "Customers": end1})
    w3 = _ordered_window(root, 3, ["Orders", "Customers"], {"Orders": end1, "Customers": _end(w2)})

    def apply(folder: Path, *extra: str) -> tuple[int, dict]:
        return run_main(capsys, "--changeset", str(folder), "--lake-root", str(lake), "--pipeline-id", "shop",
                        *extra)  # fmt: skip

    assert apply(w1)[0] == 0
    code, error = apply(w3)  # window 2 never applied to Customers
    assert code == 2 and error["error"] == "PredecessorNotAppliedError", error
    assert (
        f"table 'Customers' holds window version {end1} of pipeline 'shop' but window version {_end(w3)} "
        f"needs it to hold window version {_end(w2)}, the last earlier window that changed it"
    ) in error["message"]
    assert "'Orders'" not in error["message"]  # Orders holds window 1, the last that changed it
    assert "Nothing was applied" in error["message"]
    target = DeltaLakeTarget(str(lake))
    assert target.applied_window_version("Orders", "shop") == end1  # nothing was applied
    # In order, window 3 applies: Orders still holds window 1, which window 2 did not change.
    assert apply(w2)[0] == 0
    code, summary = apply(w3, "--epoch", "1")
    assert code == 0 and summary["tables_applied"] == ["Customers", "Orders"] and summary["epoch"] == 1
    # A re-run of an applied window skips it; one of another opening of the window is refused.
    assert apply(w2)[1]["skipped_as_applied"] == ["Customers"]
    code, error = apply(w2, "--epoch", "2")
    assert code == 2 and error["error"] == "EpochMismatchError"
    assert "was merged in epoch 1 of the window, not in this run's epoch 2" in error["message"]


def test_an_unreachable_lake_fails_with_an_apply_error_naming_window_and_table(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    options = {"aws_endpoint": "http://127.0.0.1:9", "aws_access_key_id": "k", "aws_secret_access_key": "s",
               "aws_region": "us-east-1", "aws_allow_http": "true", "max_retries": "0"}  # fmt: skip
    monkeypatch.setenv(filesystems.STORAGE_OPTIONS_ENV, json.dumps(options))
    folder = _ordered_window(tmp_path / "changesets", 1, ["Orders"], {})
    code, error = run_main(
        capsys, "--changeset", str(folder), "--lake-root", "s3://no-such-bucket/lake", "--pipeline-id", "shop"
    )
    assert code == 2 and error["error"] == "ApplyError", error
    assert error["message"].startswith(f"window {folder.name} (version {_end(folder)}) of pipeline 'shop': ")
    uri = "s3://no-such-bucket/lake/Orders"
    assert f"table 'Orders': reading Delta table '{uri}' failed (OSError" in error["message"]
