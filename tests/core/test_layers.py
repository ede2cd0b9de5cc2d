"""Imports go down only: every import of the package (at module level or inside a function) is read with
``ast`` and held against the layer order declared once below.

A module's layer is that of the longest prefix of its name in :data:`LAYERS`; it may import its own
layer and the layers under it. The only upward imports allowed are the modules at old public paths that
re-export a module moved up (:data:`REEXPORTS`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "airflow_provider_cdc"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

#: The layers, lowest first: (name, module prefixes under the package). Keep ARCHITECTURE.md's layer
#: table in step with this list.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("core",)),
    (
        "foundation",
        (
            "_compat",
            "_errors",
            "failures",
            "filesystems",
            "dag_settings",
            "lineage",
            "assets",
            "pipeline.specs",
        ),
    ),
    (
        "adapters",
        (
            "changesets",
            "lineage",
            "staging",
            "metastore",
            "merge",
            "metrics",
            "explain",
            "repair",
            "sources.protocol",
            "sources.claimed_reader",
            "sources.completion",
            "sources",
            "targets",
            "targets.protocol",
            "targets.registry",
            "targets.images",
        ),
    ),
    ("hooks", ("hooks", "sources.hook")),
    ("placement", ("placement", "spark_connect", "dataproc", "job_archive")),
    ("preflight", ("preflight", "operators._window")),
    ("steps", ("operators", "sensors", "triggers", "sources.operators", "cli.common")),
    (
        "plug-ins",
        (
            "sources.pipeline",
            "sources.spanner",
            "sources.datastream",
            "sources.tablestore",
            "targets.delta",
            "targets.bigquery",
        ),
    ),
    (
        "assembly",
        (
            "__init__",
            "__main__",
            "hooks.connection_types",
            "hooks.connection_forms",
            "task_groups",
            "pipeline",
            "cli",
            "ui",
        ),
    ),
    ("test kit", ("testing",)),
)

#: Modules at old public paths that only re-export what moved to a higher layer.
REEXPORTS: frozenset[str] = frozenset(
    {
        "hooks.bigquery_cdc",
        "hooks.spanner_change_stream",
        "hooks.spanner_table",
        "hooks.dataproc",
        "operators.upsert",
        "operators.bigquery_upsert",
        "operators.spanner_change_stream",
        "operators.spanner_table",
        "sensors.partitions_drained",
        "triggers.partitions_drained",
        "repair",
    }
)

def _layer_index() -> dict[str, int]:
    return {prefix: index for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}


def layer_of(module: str) -> int:
    """The layer of ``module`` (a name under the package, ``""`` for the package itself)."""
    prefixes = _layer_index()
    parts = (module or "__init__").split(".")
    for end in range(len(parts), 0, -1):
        found = prefixes.get(".".join(parts[:end]))
        if found is not None:
            return found
    raise AssertionError(f"module {module or PACKAGE!r} has no layer: add it to LAYERS in {__file__}")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its code."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if node.level > 1 else package
                name = ".".join([PACKAGE, *base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            names = [
                f"{name}.{alias.name}" if f"{name}.{alias.name}"[len(PACKAGE) + 1 :] in modules else name
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                found.add(name[len(PACKAGE) + 1 :])
    return found


def upward_imports() -> list[tuple[str, str]]:
    """Every import of a module from a higher layer, re-exports left out."""
    modules = _modules()
    found = []
    for module, path in modules.items():
        if module in REEXPORTS:
            continue
        own = layer_of(module)
        for imported in sorted(_imported(module, path, modules)):
            if layer_of(imported) > own:
                found.append((module, imported))
    return found


def test_every_import_goes_down() -> None:
    wrong = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {imported} ({LAYERS[layer_of(imported)][0]})"
        for module, imported in upward_imports()
    ]
    assert not wrong, "imports that run up a layer:\n" + "\n".join(wrong)


def test_every_reexport_is_still_needed() -> None:
    modules = _modules()
    for module in REEXPORTS:
        assert module in modules, f"{module} is gone: take it out of REEXPORTS"
        assert any(layer_of(m) > layer_of(module) for m in _imported(module, modules[module], modules)), (
            module
        )


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("core.window", "core"),
        ("placement.connect.session", "placement"),
        ("sources.spanner.sensors", "plug-ins"),
    ],
)
def test_a_module_takes_the_layer_of_its_longest_prefix(module: str, layer: str) -> None:
    assert LAYERS[layer_of(module)][0] == layer


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    code = "def f():\n    from airflow_provider_cdc.sources.spanner.records import DataChangeRecord\n"
    (tmp_path / "staging.py").write_text(code)
    modules = {"staging": tmp_path / "staging.py", "sources.spanner.records": tmp_path / "x.py"}
    imported = _imported("staging", tmp_path / "staging.py", modules)
    assert imported == {"sources.spanner.records"}
    assert layer_of("sources.spanner.records") > layer_of("staging")
