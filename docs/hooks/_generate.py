"""Write what the reference pages generate from the code (DAG params, CLI help, connection forms).

The JSON goes to the file named by the first argument.

Run by :mod:`generated` in a process of its own (the example DAGs are imported as Airflow parses them, in
a scratch ``AIRFLOW_HOME``), so that nothing of it stays in the documentation build's process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def dag_params() -> list[dict[str, Any]]:
    """Each example DAG's id, file and params (name, default, type, description)."""
    try:
        from airflow.sdk import DAG
    except ImportError:  # Airflow 2
        from airflow.models.dag import DAG

    found = []
    for path in sorted((ROOT / "example_dags").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_docs_example_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        dags = [value for value in vars(module).values() if isinstance(value, DAG)]
        for dag in sorted({id(d): d for d in dags}.values(), key=lambda d: d.dag_id):
            params = []
            for name in dag.params:
                param = dag.params.get_param(name)
                schema = dict(param.schema or {})
                params.append(
                    {
                        "name": name,
                        "default": param.value if param.has_value else None,
                        "type": schema.get("type"),
                        "description": param.description or schema.get("description") or "",
                    }
                )
            found.append({"dag_id": dag.dag_id, "file": f"example_dags/{path.name}", "params": params})
    return found


def cli_help() -> list[dict[str, str]]:
    """``--help`` of the command line and of each of its commands."""
    from airflow_provider_cdc import cli

    def run(argv: list[str]) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            cli.main([*argv, "--help"])
        return out.getvalue()

    top = run([])
    commands = []
    parser_help = top.split("{", 1)[1].split("}", 1)[0]
    for name in parser_help.split(","):
        commands.append({"command": name, "help": run([name])})
    return [{"command": "", "help": top}, *commands]


def connection_forms() -> list[dict[str, Any]]:
    """The registered connection types and their own fields."""
    from airflow_provider_cdc.connection_forms import CONNECTION_FORMS

    return [
        {
            "type": form.connection_type,
            "name": form.hook_name,
            "hook": form.hook_class_name,
            "hidden": list(form.hidden),
            "relabeling": dict(form.relabeling),
            "fields": [
                {"name": f.name, "label": f.label, "kind": f.kind, "description": f.description}
                for f in form.fields
            ],
        }
        for form in CONNECTION_FORMS
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    generated = {"dags": dag_params(), "cli": cli_help(), "connections": connection_forms()}
    Path(sys.argv[1]).write_text(json.dumps(generated))
