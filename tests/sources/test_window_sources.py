"""A source of its own on the shared source machinery: the protocol, the claimed reader (claims, fencing,
retries of the source's own errors), the open/read operator bases, the window handle, and the
metastore-only window-complete sensor and trigger (no Spanner connection anywhere)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_cdc._errors import DrainWaitError
from airflow_provider_cdc.core.contract.locations import WindowLocations, partition_key, staging_folder
from airflow_provider_cdc.core.contract.staged_rows import STAGED_CHANGE_COLUMNS, staged_change_schema
from airflow_provider_cdc.core.contract.window_handle import WINDOW_XCOM_KEY, WindowHandle
from airflow_provider_cdc.core.findings import OK, Finding
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.metastore import Metastore, PartitionSpec
from airflow_provider_cdc.sources.claimed_reader import ClaimedWindowReader, UnitRead, WindowReadError
from airflow_provider_cdc.sources.hook import SourceError, WindowSourceHook
from airflow_provider_cdc.sources.operators import OpenWindowOperatorBase, ReadWindowOperatorBase
from airflow_provider_cdc.sources.protocol import StagesUnits, UnitReader, WindowSource
from airflow_provider_cdc.staging.parquet import StagingWriter
from tests.support.clock import ManualClock

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
WINDOW = Window(T0, T0 + timedelta(minutes=10))
SOURCE_KEY = "buckets/landing/Drops"
#: Rows in each file of the window (the source's units).
FILES = {"drop-a.jsonl": 3, "drop-b.jsonl": 5, "drop-c.jsonl": 0}


class FlakyStorageError(Exception):
    """The drop bucket's client failed in a way worth retrying."""


class CorruptFileError(Exception):
    """A file cannot be parsed: retrying reads the same."""


def staged_row(file: str, index: int) -> tuple[Any, ...]:
    """One staged row of ``file`` in the staged-row contract's column order (values by Arrow type)."""
    values: dict[str, Any] = {}
    for field in staged_change_schema():
        if pa.types.is_timestamp(field.type):
            values[field.name] = T0 + timedelta(seconds=index)
        elif pa.types.is_integer(field.type):
            values[field.name] = 1
        elif pa.types.is_boolean(field.type):
            values[field.name] = True
        elif field.name.endswith("_json"):
            values[field.name] = json.dumps({"file": file, "line": index})
        else:
            values[field.name] = f"{file}:{index}"
    return tuple(values[name] for name in STAGED_CHANGE_COLUMNS)


class DropReader(ClaimedWindowReader):
    """Stages one file per claim; its client's :class:`FlakyStorageError` is worth retrying."""

    retryable = (FlakyStorageError,)

    def __init__(self, *args: Any, failures: dict[str, list[Exception]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures = failures
        self.tries: dict[str, int] = {}

    def read_unit(self, window: Window, token: str, writer: StagingWriter, read: UnitRead) -> None:
        self.tries[token] = self.tries.get(token, 0) + 1
        count = FILES[token]
        for index in range(count):
            writer.write_tuples([staged_row(token, index)])
            read.rows += 1
            if index == 1 and self.failures.get(token):  # fails after staging part of the file
                raise self.failures[token].pop(0)
        read.transactions += count


class DropHook(WindowSourceHook):
    """Files dropped into a bucket: units are files, late files wait out a lateness margin."""

    def __init__(self, metastore_conn_id: str, *, now: datetime, margin: timedelta = timedelta(minutes=5)):
        super().__init__()
        self.metastore_conn_id = metastore_conn_id
        self.now = now
        self.margin = margin
        self.failures: dict[str, list[Exception]] = {}

    @property
    def source_key(self) -> str:
        return SOURCE_KEY

    def check_source(self, **options: Any) -> list[Finding]:
        return [Finding("source", f"{len(FILES)} files dropped into {SOURCE_KEY}", level=OK)]

    def check_readable(self, window: Window) -> None:
        if self.now < window.end + self.margin:
            raise SourceError(f"window {window}: files may still arrive until {window.end + self.margin}")

    def plan_units(self, window: Window, staging_root: str, owner: str, **options: Any) -> list[str]:
        tokens = sorted(FILES)
        specs = [PartitionSpec(token, window.start) for token in tokens]
        self.metastore.add_partitions(self.source_key, specs)
        self.metastore.end_partitions(self.source_key, tokens, window.end)
        self.metastore.add_window_partitions(self.source_key, window.start, window.end, tokens)
        return tokens

    def window_reader(self, staging_root: str, owner: str, **options: Any) -> DropReader:
        options.setdefault("sleep", lambda seconds: None)
        return DropReader(
            self.metastore,
            self.source_key,
            self.staging_folder,
            staging_root,
            owner=owner,
            failures=self.failures,
            **self.reader_options(staging_root, options),
        )


class DropOpenOperator(OpenWindowOperatorBase):
    def __init__(self, *, hook: DropHook, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hook = hook
        self.metastore_conn_id = hook.metastore_conn_id

    def to_hook(self) -> DropHook:
        return self.hook


class DropReadOperator(ReadWindowOperatorBase):
    def __init__(self, *, hook: DropHook, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hook = hook

    def to_hook(self) -> DropHook:
        return self.hook


@pytest.fixture
def metastore_conn(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The metastore connection ``cdc_drops``; no Google connection and no emulator exist."""
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_CDC_DROPS",
        json.dumps({"conn_type": "cdc_metastore", "extra": {"sqlalchemy_url": sqlite_url}}),
    )
    return "cdc_drops"


@pytest.fixture
def hook(metastore_conn: str) -> Iterator[DropHook]:
    drops = DropHook(metastore_conn, now=WINDOW.end + timedelta(minutes=6))
    yield drops
    drops.close()


def _context(task_id: str = "open", map_index: int = -1) -> tuple[dict[str, Any], dict[str, Any]]:
    pushed: dict[str, Any] = {}
    ti = SimpleNamespace(dag_id="drops", run_id="run-1", task_id=task_id, map_index=map_index)
    ti.xcom_push = lambda key, value: pushed.update({key: value})
    return {"ti": ti}, pushed


def _recorded_rows(hook: DropHook, root: Path) -> dict[str, int]:
    """Rows in each file's recorded claim folder, read back from its Parquet files."""
    folder = Path(WindowLocations(staging_root=str(root)).staging_of(SOURCE_KEY, WINDOW))
    found = {}
    for item in hook.metastore.window_partitions(SOURCE_KEY, WINDOW.start, WINDOW.end):
        claim = folder / f"partition={partition_key(item.token)}" / f"claim={item.claim_id}"
        files = sorted(claim.glob("part-*.parquet"))
        assert len(files) == item.output_files
        found[item.token] = sum(pq.read_metadata(f).num_rows for f in files)
    return found


def test_the_sources_implement_the_protocol(hook: DropHook, tmp_path: Path) -> None:
    from airflow_provider_cdc.sources.spanner.change_stream_hook import SpannerChangeStreamHook
    from airflow_provider_cdc.sources.spanner.table_hook import SpannerTableHook

    assert isinstance(hook, WindowSource)
    reader = hook.window_reader(str(tmp_path), "reader-0")
    assert isinstance(reader, UnitReader) and isinstance(reader, StagesUnits)
    for spanner in (SpannerChangeStreamHook, SpannerTableHook):
        assert issubclass(spanner, WindowSourceHook)
        for name in ("check_readable", "check_source", "plan_units", "window_reader", "source_key"):
            assert vars(spanner).get(name) is not None, f"{spanner.__name__} implements {name}"
    assert not issubclass(SpannerTableHook, SpannerChangeStreamHook)

    class Unplanned(WindowSourceHook):  # a source that forgot to plan its windows
        source_key = SOURCE_KEY

        def check_readable(self, window: Window) -> None: ...

        def window_reader(self, staging_root: str, owner: str, **options: Any) -> Any: ...

    with pytest.raises(TypeError, match="plan_units"):
        Unplanned()


def test_the_open_and_read_operators_stage_a_window_of_files_with_retries_of_the_sources_errors(
    hook: DropHook, tmp_path: Path
) -> None:
    hook.failures["drop-b.jsonl"] = [FlakyStorageError("503 from the bucket"), FlakyStorageError("again")]
    fields = dict(staging_root=str(tmp_path), window_start=WINDOW.start, window_end=WINDOW.end)
    context, pushed = _context()
    returned = DropOpenOperator(task_id="open", hook=hook, readers=2, **fields).execute(context)
    assert pushed["epoch"] == 1
    # the open step returns its window handle (the later steps' window=open.output), also pushed as "window"
    assert returned == pushed[WINDOW_XCOM_KEY]
    handle = WindowHandle.from_dict(returned)
    assert handle == WindowHandle("drops", SOURCE_KEY, WINDOW, str(tmp_path), 1)
    assert handle.staging_location == f"{tmp_path}/Drops/{WINDOW.window_id}"
    assert hook.window_complete(WINDOW) is False

    read_context, _ = _context("read", 0)
    summary = DropReadOperator(task_id="read", hook=hook, reader_index=0, **fields).execute(read_context)
    assert summary["reader_index"] == 0
    assert (summary["rows"], summary["partitions"], summary["retries"]) == (8, 3, 2)
    assert summary["staging_uri"] == handle.staging_location
    assert _recorded_rows(hook, tmp_path) == FILES, "a retried file holds its rows once"
    assert hook.window_complete(WINDOW) is True

    DropOpenOperator(task_id="open", hook=hook, **fields).execute(context)  # opened again: epoch 2
    assert pushed["epoch"] == 2 and WindowHandle.from_dict(pushed[WINDOW_XCOM_KEY]).epoch == 2
    assert hook.window_complete(WINDOW) is False, "a re-opened window is read again"


def test_errors_the_source_does_not_list_fail_at_once_and_retries_run_out(
    hook: DropHook, tmp_path: Path
) -> None:
    hook.open_window_epoch("drops", WINDOW, str(tmp_path), "opener")
    hook.failures["drop-a.jsonl"] = [CorruptFileError("line 2 is not JSON")]
    with pytest.raises(SourceError, match=r"at partition drop-a.jsonl: CorruptFileError: line 2 is not JSON"):
        hook.read_window(WINDOW, str(tmp_path), "reader-0")
    # The task's retry (the same owner) takes its claim back; retries of the unit run out.
    reader = hook.window_reader(str(tmp_path), "reader-0", retries=2)
    hook.failures["drop-a.jsonl"] = [FlakyStorageError("503")] * 3
    with pytest.raises(WindowReadError, match=r"FlakyStorageError: 503 \(gave up after 2 retries\)"):
        reader.read(WINDOW)
    assert reader.tries["drop-a.jsonl"] == 3
    # A Google error is nothing to this source: the machine retries what the source lists only.
    plain = ClaimedWindowReader(hook.metastore, SOURCE_KEY, "Drops", str(tmp_path), owner="o")
    assert plain.retryable == ()
    given = ClaimedWindowReader(
        hook.metastore, SOURCE_KEY, "Drops", str(tmp_path), owner="o", retryable=(CorruptFileError,)
    )
    assert given.retryable == (CorruptFileError,)


def test_a_window_the_lateness_margin_still_covers_is_refused(hook: DropHook, tmp_path: Path) -> None:
    hook.now = WINDOW.end + timedelta(minutes=1)
    with pytest.raises(SourceError, match="files may still arrive"):
        hook.open_window_epoch("drops", WINDOW, str(tmp_path), "opener")
    assert hook.metastore.window_partitions(SOURCE_KEY, WINDOW.start, WINDOW.end) == []


def test_a_reader_that_lost_its_lease_is_fenced_out(sqlite_url: str, tmp_path: Path) -> None:
    clock = ManualClock(start_us=int(WINDOW.end.timestamp() * 1_000_000))
    store = Metastore(sqlite_url, clock=clock)
    store.create_schema()
    store.add_partitions(SOURCE_KEY, [PartitionSpec("drop-b.jsonl", WINDOW.start)])
    store.add_window_partitions(SOURCE_KEY, WINDOW.start, WINDOW.end, ["drop-b.jsonl"])
    folder = staging_folder(SOURCE_KEY)
    slow = DropReader(store, SOURCE_KEY, folder, str(tmp_path), owner="slow", failures={}, lease_seconds=30)
    quick = DropReader(store, SOURCE_KEY, folder, str(tmp_path), owner="quick", failures={}, lease_seconds=30)
    token, slow_claim = next(slow.claims(WINDOW))
    with slow.staging_writer(WINDOW, token, slow_claim) as writer:
        slow.read_unit(WINDOW, token, writer, UnitRead(token))
    clock.advance(31)  # the slow reader's lease expired before it completed
    summary = quick.read(WINDOW)
    assert [(unit.token, unit.rows) for unit in summary.units] == [("drop-b.jsonl", 5)]
    with pytest.raises(WindowReadError, match="lease of reader slow expired and another reader took"):
        slow.complete(WINDOW, token, slow_claim, rows=5, transactions=5.0, output_files=1)
    with pytest.raises(WindowReadError, match="reader slow lost its lease"):
        slow.renew(WINDOW, token)
    (item,) = store.window_partitions(SOURCE_KEY, WINDOW.start, WINDOW.end)
    assert (item.state, item.claim_id) != ("done", slow_claim)
    assert item.state == "done"
    store.dispose()


def test_the_window_handle_round_trips_and_names_the_merges_folder(tmp_path: Path) -> None:
    from airflow_provider_cdc.operators.merge import SparkMergeWindowOperator

    handle = WindowHandle("pipe", f"projects/p/instances/i/databases/d/{'Orders'}", WINDOW, "/staging", 3)
    stored = json.loads(json.dumps(handle.to_dict()))  # what XCom keeps
    assert WindowHandle.from_dict(stored) == handle
    assert WindowHandle.from_dict(json.dumps(stored)) == handle  # a rendered template's text
    assert stored["window_id"] == WINDOW.window_id
    assert stored["staging_location"] == f"/staging/Orders/{WINDOW.window_id}"
    merge = SparkMergeWindowOperator(
        task_id="merge",
        locations={"staging_root": "/staging", "changeset_root": "/changesets"},
        stream_key=handle.source_key,
        window_start=WINDOW.start.isoformat(),
        window_end=WINDOW.end.isoformat(),
    )
    arguments = merge.merge_arguments()
    assert arguments[arguments.index("--staging") + 1] == handle.staging_location
    # the staging location is the handle's own field, as the open step decided it; a dict without it (an
    # older XCom) takes the source key's folder
    elsewhere = WindowHandle.from_dict({**stored, "staging_location": "/elsewhere/Orders/w"})
    assert elsewhere.staging_location == "/elsewhere/Orders/w"
    assert elsewhere.to_dict()["staging_location"] == "/elsewhere/Orders/w"
    older = {k: v for k, v in stored.items() if k not in ("staging_location", "window_basis")}
    assert WindowHandle.from_dict(older) == handle
    with pytest.raises(ValueError, match="does not match"):
        WindowHandle.from_dict({**stored, "window_id": "1-2"})
    with pytest.raises(ValueError, match="lacks"):
        WindowHandle.from_dict({k: v for k, v in stored.items() if k != "epoch"})
    for key in ("", "projects/p/databases/d/orders-stream"):  # no folder a staging path may take
        with pytest.raises(ValueError):
            WindowHandle("pipe", key, WINDOW, "/staging", 1)
    assert WindowHandle("pipe", SOURCE_KEY, WINDOW, "/s").to_dict()["epoch"] is None


def _sensor(**kwargs: Any) -> Any:
    from airflow_provider_cdc.sensors.window_complete import WindowCompleteSensor

    return WindowCompleteSensor(
        task_id="complete",
        source_key=SOURCE_KEY,
        window_start=WINDOW.start.isoformat(),
        window_end=WINDOW.end.isoformat(),
        metastore_conn_id="cdc_drops",
        **kwargs,
    )


def test_the_window_complete_sensor_reads_only_the_metastore(
    hook: DropHook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sensor = _sensor()
    assert sensor.poke({}) is False, "a window never opened is not complete"
    hook.open_window_epoch("drops", WINDOW, str(tmp_path), "opener")
    capsys.readouterr()
    assert sensor.poke({}) is False
    logged = capsys.readouterr()
    logged_text = logged.out + logged.err
    assert "drop-a.jsonl (not yet read for window" in logged_text
    assert "3 partition(s) hold it back" in logged_text
    hook.read_window(WINDOW, str(tmp_path), "reader-0")
    assert sensor.poke({}) is True


def test_the_window_complete_sensor_refuses_a_window_whose_predecessor_never_ran(
    hook: DropHook, tmp_path: Path
) -> None:
    from airflow_provider_cdc._compat import AirflowFailException
    from airflow_provider_cdc.sources.operators import record_pipeline

    record_pipeline("cdc_drops", "drops", WINDOW, WINDOW.start - timedelta(minutes=10))
    with pytest.raises(AirflowFailException, match="drops"):
        _sensor(pipeline_id="drops").poke({})


def test_the_window_complete_sensor_defers_to_a_trigger_that_fires_once_the_window_is_read(
    hook: DropHook, tmp_path: Path
) -> None:
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 2.11
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

    from airflow_provider_cdc.triggers.window_complete import WindowCompleteTrigger

    hook.open_window_epoch("drops", WINDOW, str(tmp_path), "opener")
    sensor = _sensor(deferrable=True, poke_interval=0.05, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "airflow_provider_cdc.triggers.window_complete.WindowCompleteTrigger"
    assert kwargs == {
        "source_key": SOURCE_KEY,
        "window_start": WINDOW.start.isoformat(),
        "window_end": WINDOW.end.isoformat(),
        "metastore_conn_id": "cdc_drops",
        "timestamp": WINDOW.end.isoformat(),
        "poll_interval": 0.05,
        "pipeline_id": None,
        "end_from_trigger": False,
    }
    trigger = WindowCompleteTrigger(**json.loads(json.dumps(kwargs)))

    async def read_then_wait() -> Any:
        waiter = asyncio.ensure_future(trigger.run().__anext__())
        await asyncio.sleep(0.3)
        assert not waiter.done(), "the trigger fired before the window was read"
        await asyncio.to_thread(hook.read_window, WINDOW, str(tmp_path), "reader-0")
        return await asyncio.wait_for(waiter, 30)

    event = asyncio.run(read_then_wait())
    assert event.payload["status"] == "complete"
    sensor.execute_complete({}, event.payload)
    with pytest.raises(DrainWaitError, match="metastore is down"):
        sensor.execute_complete({}, {"status": "error", "message": "metastore is down"})


def test_the_window_complete_trigger_imports_no_source() -> None:
    import subprocess
    import sys

    code = (
        "import sys, airflow_provider_cdc.triggers.window_complete\n"
        "print(' '.join(m for m in sys.modules if m.startswith(('airflow_provider_cdc', 'google.cloud.'))))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = found.stdout.split()
    assert "airflow_provider_cdc.triggers.window_complete" in modules
    sources = ("airflow_provider_cdc.sources", "google.cloud.")
    assert not [m for m in modules if m.startswith(sources)], modules


def test_a_window_handle_rendered_by_a_plain_template_is_read_back() -> None:
    handle = WindowHandle("pipe", SOURCE_KEY, WINDOW, "/staging", 2)
    assert WindowHandle.from_dict(str(handle.to_dict())) == handle  # "{{ ti.xcom_pull('open') }}"
    assert WindowHandle.of(handle) is handle
    with pytest.raises(ValueError, match="neither JSON nor a mapping"):
        WindowHandle.from_dict("open_window")
