"""MkDocs hook: the reference pages' tables generated from the code when the site is built.

A page asks for one with a marker line, ``<!-- generated: dag-params -->``, ``<!-- generated: cli -->`` or
``<!-- generated: connection-types -->``. The data comes from ``_generate.py``, run once per build in a
process of its own with a scratch ``AIRFLOW_HOME`` and the example DAGs' settings at their defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: the example DAGs' default roots live under CDC_DEMO_HOME; they are shown as the variable's name
DEMO_HOME = "/CDC_DEMO_HOME"
_generated: dict[str, Any] | None = None


def _data() -> dict[str, Any]:
    global _generated
    if _generated is None:
        with tempfile.TemporaryDirectory(prefix="cdc-docs-") as scratch:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CDC_", "AIRFLOW"))}
            env.update(
                AIRFLOW_HOME=scratch,
                AIRFLOW__CORE__LOAD_EXAMPLES="False",
                CDC_DEMO_HOME=DEMO_HOME,
                COLUMNS="100",
            )
            out = Path(scratch) / "generated.json"
            done = subprocess.run(
                [sys.executable, str(HERE / "_generate.py"), str(out)],
                env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"generating the reference tables failed:\n{done.stderr[-4000:]}")
            _generated = json.loads(out.read_text().replace(DEMO_HOME, "$CDC_DEMO_HOME"))
    return _generated


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if text else '`""`'


def dag_params_markdown() -> str:
    parts = []
    for dag in _data()["dags"]:
        parts.append(f"## `{dag['dag_id']}`\n\nFile: `{dag['file']}`.\n")
        if not dag["params"]:
            parts.append("No params.\n")
            continue
        rows = ["| param | type | default | description |", "| --- | --- | --- | --- |"]
        for p in dag["params"]:
            kind = p["type"] if isinstance(p["type"], str) else " or ".join(p["type"] or [])
            cells = [f"`{p['name']}`", _cell(kind or ""), _code(p["default"]), _cell(p["description"])]
            rows.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def cli_markdown() -> str:
    parts = []
    for command in _data()["cli"]:
        title = f"`{command['command']}`" if command["command"] else "Commands"
        parts.append(f"## {title}\n\n```text\n{command['help'].rstrip()}\n```\n")
    return "\n".join(parts)


def connections_markdown() -> str:
    parts = []
    for form in _data()["connections"]:
        hidden = ", ".join(f"`{h}`" for h in form["hidden"]) or "none"
        parts.append(f"## `{form['type']}`: {form['name']}\n")
        parts.append(f"Hook class `{form['hook']}`; standard fields hidden: {hidden}.\n")
        if form["relabeling"]:
            parts.append(", ".join(f"`{k}` shows as *{v}*" for k, v in form["relabeling"].items()) + ".\n")
        rows = ["| field (extra key) | label | kind | description |", "| --- | --- | --- | --- |"]
        rows += [
            f"| `{f['name']}` | {_cell(f['label'])} | {f['kind']} | {_cell(f['description'])} |"
            for f in form["fields"]
        ]
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


MARKERS = {
    "<!-- generated: dag-params -->": dag_params_markdown,
    "<!-- generated: cli -->": cli_markdown,
    "<!-- generated: connection-types -->": connections_markdown,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown
