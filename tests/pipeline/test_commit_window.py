"""CdcCommitWindowOperator: a window is applied once, each target's results and apply watermarks are
recorded from its apply step's output (``applied``: the Delta tables' and the BigQuery tables'
upsert_stream_apply_watermark), staleness fails a run."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from unittest import mock

import pytest

from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.core.contract.target import APPLIED, TableApplyResult, TargetApplied
from airflow_provider_cdc.core.timestamps import format_timestamp, to_micros
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.hooks.pipeline import (
    StaleTablesError,
    WindowStepError,
    stale_tables,
)
from airflow_provider_cdc.metastore import Metastore, WindowState
from airflow_provider_cdc.operators.commit import CdcCommitWindowOperator

BIGQUERY_TARGET, DELTA_TARGET = "bigquery", "delta"

PIPELINE = "shop"
STREAM = "OrdersStream"
START = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
END = START + timedelta(minutes=10)
CONN_ID = "cdc_metastore_under_test"


@pytest.fixture
def store(metastore_url: str, monkeypatch) -> Metastore:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": metastore_url}}),
    )
    metastore = Metastore(metastore_url)
    metastore.create_schema()
    return metastore


TYPES = [
    {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
]


def _changeset(root: Path, tables: list[str], start: datetime = START, end: datetime = END) -> str:
    """A change set of one row per table, as the merge job writes it (folders, then the manifest)."""
    change = Change({"Id": 1}, "UPSERT", f"{1:016X}", start, {"Name": "n"})
    write_change_set(str(root / Window(start, end).window_id),
                     {name: change_set_table(TYPES, [change]) for name in tables})
    return str(root)


def _delta(end: datetime = END) -> dict:
    """The output of a Delta apply step without a lake: the change set's tables hold the window."""
    return TargetApplied(DELTA_TARGET, to_micros(end)).to_dict()


def _commit(
    changeset_root: str, start: datetime = START, end: datetime = END, **kwargs
) -> CdcCommitWindowOperator:
    kwargs.setdefault("applied", [_delta(end)])
    return CdcCommitWindowOperator(
        task_id="commit", pipeline_id=PIPELINE, window_start=start, window_end=end,
        locations={"changeset_root": changeset_root}, metastore_conn_id=CONN_ID, **kwargs,
    )


def test_commit_applies_the_window_and_advances_the_watermarks(store: Metastore, tmp_path: Path) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
    root = _changeset(tmp_path, ["Orders", "Customers"])
    summaries = [{"rows": 30, "transactions": 2.5}, {"rows": 12, "transactions": 1.5}, "not a summary"]
    result = _commit(root, read_summaries=summaries).execute({})
    record = store.get_window(PIPELINE, START, END)
    assert record.state is WindowState.APPLIED and record.applied_at is not None
    assert (record.record_count, record.transaction_count) == (42, 4)
    assert store.table_watermarks(PIPELINE, target="delta") == {"Customers": END, "Orders": END}
    assert result["rows"] == 42 and set(result["watermarks"]) == {DELTA_TARGET}
    assert set(result["watermarks"][DELTA_TARGET]) == {"Customers", "Orders"}

    # The next window changes only Orders: every table the pipeline applies moves to its end.
    later = END + timedelta(minutes=10)
    store.open_window(PIPELINE, STREAM, END, later)
    _commit(_changeset(tmp_path, ["Orders"], END, later), END, later).execute({})
    assert store.table_watermarks(PIPELINE, target="delta") == {"Customers": later, "Orders": later}


def test_a_second_commit_of_an_applied_window_changes_nothing(store: Metastore, tmp_path: Path) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders"])
    _commit(root, read_summaries=[{"rows": 5}]).execute({})
    applied = store.get_window(PIPELINE, START, END)
    _commit(root, read_summaries=[{"rows": 999}]).execute({})
    again = store.get_window(PIPELINE, START, END)
    assert again.state is WindowState.APPLIED
    assert (again.record_count, again.applied_at) == (5, applied.applied_at)
    assert store.table_watermarks(PIPELINE, target="delta") == {"Orders": END}


def _commit_racing(store: Metastore, monkeypatch, meanwhile) -> None:
    """Run ``meanwhile`` (another run's metastore work) right after the commit reads the window."""
    original = Metastore.get_window
    calls = []

    def get_window(self: Metastore, *args, **kwargs):
        record = original(self, *args, **kwargs)
        if not calls:
            calls.append(record)
            meanwhile()
        return record

    monkeypatch.setattr(Metastore, "get_window", get_window)


def test_losing_the_commit_to_a_run_that_applied_the_window_is_not_a_failure(
    store: Metastore, tmp_path: Path, monkeypatch
) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    other_run = Metastore(store.engine.url.render_as_string(hide_password=False))
    _commit_racing(store, monkeypatch, lambda: other_run.transition_window(
        PIPELINE, START, END, WindowState.READING, WindowState.APPLIED, record_count=7))
    _commit(_changeset(tmp_path, ["Orders"]), read_summaries=[{"rows": 7}]).execute({})
    record = store.get_window(PIPELINE, START, END)
    assert record.state is WindowState.APPLIED and record.record_count == 7
    assert store.table_watermarks(PIPELINE, target="delta") == {"Orders": END}


def test_a_window_reopened_while_committing_fails_the_commit(
    store: Metastore, tmp_path: Path, monkeypatch
) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    other_run = Metastore(store.engine.url.render_as_string(hide_password=False))
    _commit_racing(store, monkeypatch, lambda: other_run.reopen_window(PIPELINE, START, END))
    with pytest.raises(WindowStepError, match=r"changed state to reading \(attempt 2\)"):
        _commit(_changeset(tmp_path, ["Orders"])).execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
    assert store.table_watermarks(PIPELINE, target="delta") == {}


def test_a_commit_of_an_earlier_opening_of_the_window_changes_nothing(
    store: Metastore, tmp_path: Path
) -> None:
    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc.hooks.pipeline import StaleEpochError

    store.open_window(PIPELINE, STREAM, START, END)
    assert store.open_window(PIPELINE, STREAM, START, END, reopen=True).attempt == 2  # a second run
    root = _changeset(tmp_path, ["Orders"])
    stale = r"opened again \(it is in epoch 2, reading\) since this run opened it in epoch 1: the commit of"
    with pytest.raises(AirflowFailException, match=stale):
        _commit(root, epoch="1").execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
    assert store.table_watermarks(PIPELINE, target="delta") == {}
    # A change set merged in another epoch than the run's is refused too.
    manifest = Path(root) / Window(START, END).window_id / "_manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "epoch": 1}))
    with pytest.raises(AirflowFailException, match="was merged in epoch 1, not in this run's epoch 2"):
        _commit(root, epoch="2").execute({})
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "epoch": 2}))
    _commit(root, epoch="2").execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.APPLIED
    # Also once the window is applied.
    with pytest.raises(AirflowFailException, match="epoch 1") as refused:
        _commit(root, epoch=1).execute({})
    assert isinstance(refused.value.__cause__, StaleEpochError)


def test_max_staleness_fails_the_run_naming_the_lagging_table(store: Metastore, tmp_path: Path) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders"])
    fresh = _commit(root, max_staleness=timedelta(hours=1), staleness_reference=END + timedelta(minutes=59))
    assert fresh.execute({})["watermarks"] == {DELTA_TARGET: {"Orders": "2026-03-01T12:10:00.000000Z"}}
    late = _commit(root, max_staleness=timedelta(hours=1), staleness_reference=END + timedelta(hours=2))
    with pytest.raises(StaleTablesError, match=r"max_staleness=1:00:00: Delta table Orders lags 2:00:00"):
        late.execute({})
    # The window stays applied: staleness is reported, nothing is undone.
    assert store.get_window(PIPELINE, START, END).state is WindowState.APPLIED


def test_stale_tables_lists_only_tables_lagging_more_than_allowed() -> None:
    now = END + timedelta(minutes=30)
    marks = {"A": END, "B": now - timedelta(minutes=5), "C": now - timedelta(minutes=30)}
    lag = timedelta(minutes=30)
    assert stale_tables(marks, now, timedelta(minutes=10)) == {"A": lag, "C": lag}
    assert stale_tables(marks, now, timedelta(minutes=30)) == {}


def test_a_window_without_a_change_set_manifest_is_not_committed(store: Metastore, tmp_path: Path) -> None:
    from airflow_provider_cdc.changesets.reader import ChangeSetError

    store.open_window(PIPELINE, STREAM, START, END)
    (tmp_path / Window(START, END).window_id).mkdir()  # the merge did not finish
    with pytest.raises(ChangeSetError, match="has no _manifest.json: it is incomplete"):
        _commit(str(tmp_path)).execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
    assert store.table_watermarks(PIPELINE, target="delta") == {}


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda m: m.update(tables={}), "folder(s) table=Customers, table=Orders hold table(s)"),
        (lambda m: m["tables"].pop("Orders"), "'Orders' that _manifest.json does not list"),
        (lambda m: m["tables"]["Orders"].update(rows=2), "table 'Orders' has 1 rows, manifest says 2"),
        (lambda m: m.update(rows=5), "says 5 rows in all but its tables add up to 2"),
    ],
)
def test_a_manifest_that_disagrees_with_the_change_set_is_refused_naming_the_table(
    store: Metastore, tmp_path: Path, edit, problem: str
) -> None:
    from airflow_provider_cdc.changesets.reader import ChangeSetError

    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders", "Customers"])
    manifest_path = tmp_path / Window(START, END).window_id / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    edit(manifest)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ChangeSetError, match=re.escape(problem)):
        _commit(root).execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
    assert store.table_watermarks(PIPELINE, target="delta") == {}


# ------------------------------------------------------------------------------ BigQuery watermarks


def _bigquery_summary(**marks: str | None) -> dict:
    """The BigQuery upsert's return value for tables with these upsert_stream_apply_watermarks."""
    return {
        "window_id": Window(START, END).window_id,
        "tables": {
            table: {"source_table": table, "table": table, "rows": 3, "upsert_stream_apply_watermark": mark,
                    "staleness_seconds": None}
            for table, mark in marks.items()
        },
    }


def test_the_commit_records_the_bigquery_watermarks_only_forward(store: Metastore, tmp_path: Path) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders", "Customers"])
    first = datetime(2026, 3, 1, 12, 11, 5, 123456, tzinfo=timezone.utc)
    summary = _bigquery_summary(Orders=format_timestamp(first), Customers=format_timestamp(first))
    result = _commit(root, bigquery_watermarks=summary).execute({})
    assert store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET) == {"Customers": first, "Orders": first}
    assert result["watermarks"][BIGQUERY_TARGET] == {
        "Customers": "2026-03-01T12:11:05.123456Z", "Orders": "2026-03-01T12:11:05.123456Z"
    }
    # The Delta tables' watermarks are the pipeline's own, apart from BigQuery's.
    assert store.table_watermarks(PIPELINE, target="delta") == {"Customers": END, "Orders": END}

    # A re-run reads an older watermark for Orders (never recorded backwards), a newer one for
    # Customers; the plain mapping form and datetimes are accepted too.
    later = first + timedelta(minutes=3)
    again = _commit(root, bigquery_watermarks={"Orders": first - timedelta(minutes=1), "Customers": later})
    assert again.execute({})["watermarks"][BIGQUERY_TARGET] == {
        "Customers": format_timestamp(later), "Orders": format_timestamp(first)
    }
    assert store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET) == {"Customers": later, "Orders": first}


def test_without_bigquery_watermarks_the_commit_is_unchanged(store: Metastore, tmp_path: Path) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    result = _commit(_changeset(tmp_path, ["Orders"])).execute({})
    assert set(result["watermarks"]) == {DELTA_TARGET}
    assert store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET) == {}


def test_a_null_bigquery_watermark_is_a_warning_not_a_failure(store: Metastore, tmp_path: Path) -> None:
    from airflow_provider_cdc.core.contract.locations import WindowLocations
    from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook

    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders", "Customers"])
    fresh = END + timedelta(seconds=30)
    summary = _bigquery_summary(Orders=format_timestamp(fresh), Customers=None)
    # A table whose watermark was not asked for (report_watermarks=False) is left out.
    summary["tables"]["Lines"] = {"rows": 2}
    log = mock.Mock()
    result = CdcPipelineHook(CONN_ID).commit_window(
        PIPELINE,
        Window(START, END),
        WindowLocations(changeset_root=root),
        reported={"bigquery": summary},
        max_staleness=timedelta(minutes=5),
        now=END + timedelta(minutes=1),
        log=log,
    )
    assert result["watermarks"] == {BIGQUERY_TARGET: {"Customers": None, "Orders": format_timestamp(fresh)}}
    assert store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET) == {"Orders": fresh}
    warnings = [call.args[0] % call.args[1:] for call in log.warning.call_args_list]
    assert len(warnings) == 1 and warnings[0].startswith(
        "BigQuery table Customers has no upsert_stream_apply_watermark yet"
    ), warnings
    assert store.get_window(PIPELINE, START, END).state is WindowState.APPLIED


def test_max_staleness_fails_naming_the_lagging_bigquery_table(store: Metastore, tmp_path: Path) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders", "Customers"])
    now = END + timedelta(minutes=5)
    summary = _bigquery_summary(
        Orders=format_timestamp(now - timedelta(minutes=40)),
        Customers=format_timestamp(now - timedelta(minutes=2)),
    )
    late = _commit(
        root, bigquery_watermarks=summary, max_staleness=timedelta(minutes=30), staleness_reference=now
    )
    with pytest.raises(StaleTablesError) as failure:
        late.execute({})
    message = str(failure.value)
    assert message.endswith(
        "max_staleness=0:30:00: BigQuery table Orders lags 0:40:00 "
        "(upsert_stream_apply_watermark 2026-03-01T11:35:00.000000Z)"
    ), message
    assert "Customers" not in message  # within max_staleness; the Delta tables too
    # The window stays applied and the watermarks recorded: staleness is reported, nothing is undone.
    assert store.get_window(PIPELINE, START, END).state is WindowState.APPLIED
    assert set(store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET)) == {"Customers", "Orders"}

    # Stale Delta tables and stale BigQuery tables are named in one failure.
    with pytest.raises(StaleTablesError) as failure:
        _commit(root, bigquery_watermarks=summary, max_staleness=timedelta(hours=1),
                staleness_reference=END + timedelta(minutes=62)).execute({})
    assert str(failure.value) == (
        "apply watermark older than max_staleness=1:00:00: "
        "BigQuery table Orders lags 1:37:00 (upsert_stream_apply_watermark 2026-03-01T11:35:00.000000Z), "
        "Delta table Customers lags 1:02:00 (apply watermark 2026-03-01T12:10:00.000000Z), "
        "Delta table Orders lags 1:02:00 (apply watermark 2026-03-01T12:10:00.000000Z)"
    )


def test_only_the_tables_the_window_reported_are_checked_for_staleness(
    store: Metastore, tmp_path: Path
) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    old = END - timedelta(hours=5)
    root = _changeset(tmp_path, ["Orders"])
    _commit(root, bigquery_watermarks={"Customers": old, "Orders": old}).execute({})
    later = END + timedelta(minutes=10)
    store.open_window(PIPELINE, STREAM, END, later)
    # The next window sends only Orders: Customers' old watermark (nothing of this window is
    # pending for it) is kept and not checked.
    result = _commit(
        _changeset(tmp_path, ["Orders"], END, later), END, later, bigquery_watermarks={"Orders": later},
        max_staleness=timedelta(minutes=30), staleness_reference=later + timedelta(minutes=1),
    ).execute({})
    assert result["watermarks"][BIGQUERY_TARGET] == {
        "Customers": format_timestamp(old), "Orders": format_timestamp(later)
    }


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2026-03-01T12:00:00Z", r"bigquery_watermarks must be the BigQuery upsert's return value"),
        ({"tables": {"Orders": {"upsert_stream_apply_watermark": "yesterday"}}},
         r"table 'Orders' has no valid upsert_stream_apply_watermark"),
        ({"Orders": 12}, r"table 'Orders' has no valid upsert_stream_apply_watermark"),
        ({"Bad name": None}, r"invalid BigQuery table name 'Bad name'"),
        (TargetApplied(BIGQUERY_TARGET, 1).to_dict(), r"of window version 1, not "),
    ],
)
def test_malformed_bigquery_watermarks_fail_before_the_window_is_committed(
    store: Metastore, tmp_path: Path, value, problem: str
) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    with pytest.raises((TypeError, ValueError), match=problem):
        _commit(_changeset(tmp_path, ["Orders"]), bigquery_watermarks=value).execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
    assert store.table_watermarks(PIPELINE, target="delta") == {}
    assert store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET) == {}


def test_applied_is_templated_and_takes_the_apply_steps_outputs() -> None:
    from airflow_provider_cdc.targets.bigquery.commit import from_reported

    assert "applied" in CdcCommitWindowOperator.template_fields
    assert "bigquery_watermarks" not in CdcCommitWindowOperator.template_fields  # a deprecated alias
    summary = _bigquery_summary(Orders="2026-03-01T12:11:00Z")
    applied = from_reported(summary, to_micros(END))
    assert applied.watermarks() == {"Orders": datetime(2026, 3, 1, 12, 11, tzinfo=timezone.utc)}
    assert TargetApplied.from_dict(applied.to_dict()) == applied  # an XCom round trip


def test_status_shows_the_bigquery_watermarks_beside_the_delta_ones(
    store: Metastore, tmp_path: Path, metastore_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_cdc import cli

    store.open_window(PIPELINE, STREAM, START, END)
    assert cli.main(["status", "--pipeline", PIPELINE, "--metastore-url", metastore_url]) == 0
    assert "BigQuery watermark" not in capsys.readouterr().out  # a lake-only pipeline shows what it did
    mark = END + timedelta(seconds=42)
    _commit(_changeset(tmp_path, ["Orders", "Customers"]), bigquery_watermarks={"Orders": mark}).execute({})
    assert cli.main(["status", "--pipeline", PIPELINE, "--metastore-url", metastore_url]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("table "))
    assert header.split() == ["table", "Delta", "watermark", "lag", "behind", "now", "BigQuery", "watermark",
                              "lag", "behind", "now"]
    # columns are two spaces apart; a lag reads as people read it ("271 d")
    rows = {cells[0]: cells for cells in (re.split(r"\s{2,}", line.strip())
                                          for line in out.splitlines()[out.splitlines().index(header) + 1:])}
    assert rows["Orders"][1] == "2026-03-01T12:10:00.000Z" and rows["Orders"][3] == "2026-03-01T12:10:42.000Z"
    assert re.fullmatch(r"\d+ d", rows["Orders"][2]), rows["Orders"]
    assert rows["Customers"][1] == "2026-03-01T12:10:00.000Z" and rows["Customers"][3:] == ["-", "-"]


def test_the_commit_records_any_targets_results_and_reported_watermarks(
    store: Metastore, tmp_path: Path
) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders", "Customers"])
    reported = datetime(2026, 3, 1, 12, 11, 5, tzinfo=timezone.utc)
    window = to_micros(END)
    bigquery = TargetApplied(BIGQUERY_TARGET, window, None, (
        TableApplyResult(BIGQUERY_TARGET, "Orders", window, APPLIED, rows=7, watermark=reported),
        TableApplyResult(BIGQUERY_TARGET, "Customers", window, APPLIED, rows=3),
    ))
    # a list of lists (several tasks' outputs) is taken too
    result = _commit(root, applied=[[_delta()], bigquery.to_dict()]).execute({})
    assert store.table_watermarks(PIPELINE, target=BIGQUERY_TARGET) == {"Orders": reported}
    assert store.table_watermarks(PIPELINE, target=DELTA_TARGET) == {"Customers": END, "Orders": END}
    ledger = store.window_tables(PIPELINE, target=DELTA_TARGET, window=(START, END))
    assert sorted((entry.table, entry.rows) for entry in ledger) == [("Customers", 1), ("Orders", 1)]
    assert result["tables"][BIGQUERY_TARGET]["Orders"]["rows"] == 7  # the step's result: no ledger entry


def test_outputs_that_are_not_apply_outputs_fail_before_the_window_is_committed(
    store: Metastore, tmp_path: Path
) -> None:
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders"])
    with pytest.raises(ValueError, match="applied takes the target apply steps' outputs"):
        _commit(root, applied=[{"table": "Orders"}]).execute({})
    with pytest.raises(ValueError, match="lacks"):
        malformed = {"target": "delta", "window": to_micros(END), "tables": [{"table": "O"}]}
        _commit(root, applied=[malformed]).execute({})
    with pytest.raises(ValueError, match="an apply step output of None"):
        _commit(root, applied=[_delta(), None]).execute({})
    with pytest.raises(ValueError, match="given the delta target twice"):
        _commit(root, applied=[_delta(), _delta()]).execute({})
    with pytest.raises(KeyError, match="unknown target 'lakehouse'"):
        _commit(root, applied=[{"target": "lakehouse", "window": to_micros(END)}]).execute({})
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING


def test_a_deferred_tables_watermark_is_the_end_of_the_last_window_folded_into_it(
    store: Metastore, tmp_path: Path
) -> None:
    """As BigQuery's ``upsert_stream_apply_watermark`` lags its appends, a Delta table whose windows
    are pending (deferred apply) has the end of the last window compacted into it as its watermark."""
    from airflow_provider_cdc.changesets.reader import ChangeSetReader
    from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

    lake, changesets = tmp_path / "lake", tmp_path / "changesets"
    later = END + timedelta(minutes=10)

    def run(start: datetime, end: datetime, target: DeltaLakeTarget) -> dict:
        store.open_window(PIPELINE, STREAM, start, end)
        root = _changeset(changesets, ["Orders"], start, end)
        for table in ChangeSetReader(str(changesets / Window(start, end).window_id)).tables():
            target.apply_window(table, PIPELINE, Window(start, end))
        # without applied, the targets whose location is given (lake_root) are committed
        return CdcCommitWindowOperator(
            task_id="commit", pipeline_id=PIPELINE, window_start=start, window_end=end,
            locations={"changeset_root": root, "lake_root": str(lake)}, metastore_conn_id=CONN_ID,
        ).execute({})

    run(START, END, DeltaLakeTarget(str(lake), apply_mode="immediate"))
    assert store.table_watermarks(PIPELINE, target="delta") == {"Orders": END}
    deferred = DeltaLakeTarget(str(lake), apply_mode="deferred", compact_every=None)
    result = run(END, later, deferred)
    assert deferred.pending_windows("Orders", PIPELINE) == [to_micros(later)]
    assert store.get_window(PIPELINE, END, later).state is WindowState.APPLIED  # held, pending
    assert store.table_watermarks(PIPELINE, target="delta") == {
        "Orders": END
    }  # the table itself holds up to END
    assert result["watermarks"] == {DELTA_TARGET: {"Orders": format_timestamp(END)}}
    deferred.compact("Orders", PIPELINE)
    run(END, later, deferred)  # the commit again, after the compaction: the watermark catches up
    assert store.table_watermarks(PIPELINE, target="delta") == {"Orders": later}


def test_an_unreachable_lake_fails_the_commit_naming_the_window_and_the_location(
    store: Metastore, tmp_path: Path, monkeypatch
) -> None:
    """A lake on ``gs://`` whose storage cannot be reached fails the commit with the window, the step,
    the location and the storage's error, as the upsert's ``ApplyError`` does: not a bare ``OSError``."""
    import socket

    from airflow_provider_cdc.hooks.pipeline import StorageUnavailableError

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    key = {"gcs_base_url": f"https://127.0.0.1:{closed}", "disable_oauth": True, "client_email": "",
           "private_key": "", "private_key_id": ""}
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(
        {"conn_type": "google_cloud_platform", "extra": {"keyfile_dict": json.dumps(key)}}
    ))
    store.open_window(PIPELINE, STREAM, START, END)
    root = _changeset(tmp_path, ["Orders"])
    op = CdcCommitWindowOperator(
        task_id="commit", pipeline_id=PIPELINE, window_start=START, window_end=END,
        locations={"changeset_root": root, "lake_root": "gs://cdc/lake"}, metastore_conn_id=CONN_ID,
    )
    with pytest.raises(StorageUnavailableError) as failure:
        op.execute({})
    message = str(failure.value)
    assert f"window {Window(START, END)} of pipeline '{PIPELINE}': the commit" in message
    assert "'gs://cdc/lake' could not be read" in message and "gcp_conn_id" in message
    assert "Nothing was committed" in message and "private_key" not in message
    assert store.get_window(PIPELINE, START, END).state is WindowState.READING
