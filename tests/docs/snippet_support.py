"""Helpers of the documentation tests: the snippet files, how to run them, the emulator they use."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "docs" / "snippets"
VENV_BIN = Path(sys.executable).parent
#: the port the snippets name; the tests run them on a free one
SNIPPET_PORT = "9010"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def snippet_commands(path: Path) -> list[str]:
    """The commands of a shell snippet: comments dropped, continuation lines joined."""
    commands: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = "" if raw.lstrip().startswith("#") else re.split(r"\s#\s", raw + " ", maxsplit=1)[0].rstrip()
        if not line.strip() and not pending:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append((pending + line).strip())
        pending = ""
    return [c for c in commands if c]


def snippet_env(airflow_home: Path, **extra: str) -> dict[str, str]:
    """An environment for a snippet: this virtualenv first on PATH, a scratch Airflow home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDC_", "AIRFLOW__", "AIRFLOW_CONN_"))}
    env.update(
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        AIRFLOW_HOME=str(airflow_home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "example_dags"),
        CDC_DEMO_HOME=str(airflow_home / "cdc"),
    )
    env.pop("SPANNER_EMULATOR_HOST", None)
    env.update(extra)
    return env


def run_snippet(
    path: Path, env: dict[str, str], replace: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a shell snippet with ``bash -e`` from the repository's root, after textual replacements."""
    text = path.read_text()
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    return subprocess.run(
        ["bash", "-e", "-c", text], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )  # fmt: skip


@pytest.fixture(scope="module")
def shop_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``own_emulator.sh`` running on a free port: the emulator with ``shop.sql`` on a manual clock."""
    port = str(free_port())
    log = tmp_path_factory.mktemp("emulator") / "emulator.log"
    home = tmp_path_factory.mktemp("emulator-home")
    (command,) = snippet_commands(SNIPPETS / "own_emulator.sh")
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", "exec " + command.replace(SNIPPET_PORT, port)],
            cwd=ROOT, env=snippet_env(home), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "serving on" not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the emulator of own_emulator.sh did not start:\n{log.read_text()}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def shell_words(command: str) -> list[str]:
    """A command's words, quotes respected (the snippets hold simple shell)."""
    import shlex

    return shlex.split(command)


def long_options(command: str) -> list[str]:
    return re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", command)
