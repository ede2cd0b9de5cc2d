"""Deferred apply survives being killed anywhere between a window's append and its compaction.

Each run is the upsert job (or the ``compact`` command) in its own process, killed with ``os._exit``
at a named point or with SIGKILL at a random moment, then replayed; the lake must then read (merge
on read, and after a compaction) exactly as the same windows applied one by one.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_cdc.changesets.reader import ChangeSetReader
from airflow_provider_cdc.changesets.writer import Change, change_set_table, write_change_set
from airflow_provider_cdc.targets.delta.target import DeltaLakeTarget

ORDERS = [
    {"name": "ID", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Amount", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
]
BASE = datetime(2024, 5, 1, tzinfo=timezone.utc)
PIPELINE = "orders"
TABLE = "Orders"
WINDOW_SECONDS = 60

# Runs the upsert job (``job`` …) or the compact command (``compact`` …); CDC_KILL_AT names where the
# process dies: after the pending append, before the compaction's MERGE, after it (before the pending
# clean-up), after the clean-up; ``pause`` holds the compaction's MERGE until a file exists.
_RUN = textwrap.dedent(
    """
    import os, sys, time
    from airflow_provider_cdc import cli
    from airflow_provider_cdc.targets.delta import compaction, pending, upsert_job

    point = os.environ.get("CDC_KILL_AT")

    def after(function):
        def wrapper(*args, **kwargs):
            function(*args, **kwargs)
            os._exit(137)
        return wrapper

    def before(function):
        def wrapper(*args, **kwargs):
            os._exit(137)
        return wrapper

    def paused(function):
        def wrapper(*args, **kwargs):
            flag = os.environ["CDC_RESUME_FILE"]
            open(flag + ".waiting", "w").close()
            for _ in range(1200):
                if os.path.exists(flag):
                    break
                time.sleep(0.05)
            return function(*args, **kwargs)
        return wrapper

    if point == "append":
        pending.PendingChanges.append = after(pending.PendingChanges.append)
    elif point == "fold":
        compaction.merge_into = before(compaction.merge_into)
    elif point == "merge":
        compaction.merge_into = after(compaction.merge_into)
    elif point == "clean":
        pending.PendingChanges.clean = after(pending.PendingChanges.clean)
    elif point == "pause":
        compaction.merge_into = paused(compaction.merge_into)
    if sys.argv[1] == "job":
        code = upsert_job.main(sys.argv[2:])
    elif sys.argv[1] == "jobs":  # every window given, in order
        code = 0
        for changeset in sys.argv[3:]:
            code = code or upsert_job.main([*sys.argv[2].split(), "--changeset", changeset])
    else:
        code = cli.main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)
    """
)


def seq(n: int) -> str:
    return f"{n:016X}/{0:016X}/{0:016X}/{0:016X}"


def window_end(i: int) -> int:
    """The end (µs) of the ``i``-th window."""
    return (
        BASE + timedelta(seconds=WINDOW_SECONDS * (i + 1)) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    ) // (timedelta(microseconds=1))


def write_windows(root: Path, count: int, seed: int = 5) -> list[Path]:
    """Change sets of random keys (spread over a wide key space): full and partial images, deletes,
    inserts and deletes of rows only in pending windows, a few late changes."""
    rng = random.Random(seed)
    keys = [rng.getrandbits(62) for _ in range(40)]
    clock, paths = 1_000, []
    for i in range(count):
        changes = []
        for key in rng.sample(keys, 16):
            clock += 1
            n = clock - (rng.randint(1, 30) if i and rng.random() < 0.15 else 0)
            at = BASE + timedelta(seconds=n)
            draw = rng.random()
            if i and draw < 0.25:
                changes.append(Change({"ID": key}, "DELETE", seq(n), at))
            elif draw < 0.5:
                changes.append(Change({"ID": key}, "UPSERT", seq(n), at, {"Amount": i}, ["Amount"]))
            else:
                changes.append(Change({"ID": key}, "UPSERT", seq(n), at, {"Name": f"{key}.{i}", "Amount": i}))
        path = root / f"{window_end(i) - WINDOW_SECONDS * 1_000_000}-{window_end(i)}"
        write_change_set(str(path), {TABLE: change_set_table(ORDERS, changes)})
        paths.append(path)
    return paths


def truth(tmp_path: Path, paths: list[Path]) -> list[list[dict]]:
    """The table after each window, applied one by one."""
    reference = DeltaLakeTarget(str(tmp_path / "reference"), apply_mode="immediate")
    states = []
    for i, path in enumerate(paths):
        (part,) = ChangeSetReader(str(path)).tables()
        reference.apply_change_set(TABLE, part.dataset, part.column_types(), PIPELINE, window_end(i))
        states.append(rows(reference.read_table(TABLE)))
    return states


def rows(data: Any) -> list[dict]:
    return sorted(data.to_pylist(), key=lambda r: r["ID"])


def job_args(lake: Path, compact_every: int = 2) -> list[str]:
    deferred = ["--apply-mode", "deferred", "--compact-every", str(compact_every)]
    return ["--lake-root", str(lake), "--pipeline-id", PIPELINE, *deferred]


def run(*args: str, kill_at: str | None = None, env: dict[str, str] | None = None, **popen: Any) -> Any:
    environment = {**os.environ, "CDC_STORAGE_OPTIONS": "", **(env or {})}
    environment.pop("CDC_KILL_AT", None)
    if kill_at:
        environment["CDC_KILL_AT"] = kill_at
    command = [sys.executable, "-c", _RUN, *args]
    if popen:
        return subprocess.Popen(command, env=environment, **popen)
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kill_at", ["append", "fold", "merge", "clean"])
def test_killed_at_each_point_then_replayed_reads_as_the_windows_applied_one_by_one(
    tmp_path: Path, kill_at: str
) -> None:
    paths = write_windows(tmp_path / "changesets", 5)
    states = truth(tmp_path, paths)
    lake = tmp_path / "lake"
    target = DeltaLakeTarget(str(lake))
    killed = 0
    for i, path in enumerate(paths):
        first = run("job", "--changeset", str(path), *job_args(lake), kill_at=kill_at)
        assert first.returncode in (0, 137), first.stderr
        killed += first.returncode == 137
        replay = run("job", "--changeset", str(path), *job_args(lake))
        assert replay.returncode == 0, replay.stderr
        again = run("job", "--changeset", str(path), *job_args(lake))  # a re-run of a window changes nothing
        assert again.returncode == 0 and '"tables_applied": []' in again.stdout, again.stdout
        assert rows(target.read_latest(TABLE, PIPELINE)) == states[i]
    # windows 2 and 4 compact (the first creates the table): every run at those points died
    assert killed == (4 if kill_at == "append" else 2)
    assert target.compact(TABLE, PIPELINE).status == "nothing_pending"  # the last window compacted
    assert rows(target.read_table(TABLE)) == states[-1]
    assert target.pending(TABLE).windows(None) == []


def test_killed_at_random_moments_then_replayed(tmp_path: Path) -> None:
    paths = write_windows(tmp_path / "changesets", 6, seed=11)
    states = truth(tmp_path, paths)
    lake = tmp_path / "lake"
    rng = random.Random(3)
    for _ in range(3):
        process = run("jobs", " ".join(job_args(lake)), *map(str, paths), stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(rng.uniform(1.0, 4.0))  # a random moment to kill at, not a wait for a result
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    replay = run("jobs", " ".join(job_args(lake)), *map(str, paths))
    assert replay.returncode == 0, replay.stderr
    target = DeltaLakeTarget(str(lake))
    assert rows(target.read_latest(TABLE, PIPELINE)) == states[-1]
    target.compact(TABLE, PIPELINE)
    assert rows(target.read_table(TABLE)) == states[-1]


def test_a_compaction_during_a_window_loses_nothing(tmp_path: Path) -> None:
    paths = write_windows(tmp_path / "changesets", 4, seed=17)
    states = truth(tmp_path, paths)
    lake = tmp_path / "lake"
    for path in paths[:3]:  # the first creates the table, two windows pending
        assert run("job", "--changeset", str(path), *job_args(lake, compact_every=0)).returncode == 0
    resume = tmp_path / "resume"
    compactor = run(
        *("compact", "--lake-root", str(lake), "--table", TABLE, "--pipeline", PIPELINE),
        kill_at="pause",
        env={"CDC_RESUME_FILE": str(resume)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    waiting = Path(f"{resume}.waiting")
    for _ in range(1200):  # the compactor has folded the two windows and holds its MERGE
        if waiting.exists() or compactor.poll() is not None:
            break
        time.sleep(0.05)
    assert waiting.exists()
    # Meanwhile the next window is appended and compacted by the upsert job itself.
    window = run("job", "--changeset", str(paths[3]), *job_args(lake, compact_every=1))
    assert window.returncode == 0 and '"compacted_tables": ["Orders"]' in window.stdout, window.stdout
    resume.touch()
    out, err = compactor.communicate(timeout=120)
    assert compactor.returncode == 0, err
    assert '"status": "nothing_pending"' in out  # it lost the race, started over, found nothing to do
    target = DeltaLakeTarget(str(lake))
    assert rows(target.read_table(TABLE)) == states[-1]
    assert target.apply_watermark(TABLE, PIPELINE) == BASE + timedelta(seconds=4 * WINDOW_SECONDS)
