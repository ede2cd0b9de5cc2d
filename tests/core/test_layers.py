"""Imports go down only: every import of the package (at module level or inside a function) is read with
``ast`` and held against the layer order declared once below.

A module's layer is that of the longest prefix of its name in :data:`LAYERS`; it may import its own
layer and the layers under it. A module left at an old public path (:data:`REEXPORTS`) names the module
it became by a string (:func:`airflow_provider_cdc._moved.alias`), so it imports nothing upward.

The first-level entries of the package (its folders and single modules) import each other without a
cycle too (:func:`folder_cycles`), so that each folder sits above all that it imports.
"""

from __future__ import annotations

import ast
import importlib
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
            "_moved",
            "_errors",
            "failures",
            "filesystems",
            "dag_settings",
            "assets",
            "specs",
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
            "sources",
            "targets",
            "plugins",
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
            "connection_types",
            "connection_forms",
            "task_groups",
            "pipeline",
            "cli",
            "ui",
        ),
    ),
    ("test kit", ("testing",)),
)

#: Modules at old public paths: each is the module it moved to, named by a string.
REEXPORTS: frozenset[str] = frozenset(
    {
        "dataproc.placement",
        "hooks.bigquery_cdc",
        "hooks.connection_forms",
        "hooks.connection_types",
        "hooks.dataproc",
        "hooks.spanner_change_stream",
        "hooks.spanner_table",
        "job_archive",
        "operators._dataproc",
        "operators._spark",
        "operators.bigquery_upsert",
        "operators.spanner_change_stream",
        "operators.spanner_table",
        "operators.upsert",
        "pipeline.specs",
        "repair",
        "sensors.partitions_drained",
        "sources.completion",
        "spark_connect.jobs",
        "spark_connect.server",
        "spark_connect.session",
        "targets.protocol",
        "targets.registry",
        "task_groups",
        "triggers.partitions_drained",
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
    """Every import of a module from a higher layer."""
    modules = _modules()
    found = []
    for module, path in modules.items():
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


def _aliased(path: Path) -> str | None:
    """The module that the module at ``path`` makes itself (``alias(__name__, "...")``), if any."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "alias" and len(node.args) == 2:
            moved = node.args[1]
            if isinstance(moved, ast.Constant) and isinstance(moved.value, str):
                return moved.value
    return None


def test_every_old_path_is_the_module_it_moved_to() -> None:
    modules = _modules()
    aliases = {module: _aliased(path) for module, path in modules.items()}
    assert {module for module, moved in aliases.items() if moved} == REEXPORTS
    for module in sorted(REEXPORTS):
        moved = aliases[module]
        assert moved and moved.startswith(PACKAGE + ".") and moved[len(PACKAGE) + 1 :] in modules, module
        assert importlib.import_module(f"{PACKAGE}.{module}") is importlib.import_module(moved), module


def first_level(module: str) -> str:
    """The package's first-level entry that holds ``module`` (a folder, or a single module)."""
    return module.split(".")[0] if module else "__init__"


def folder_imports() -> dict[tuple[str, str], list[str]]:
    """Each import between two first-level entries (the test kit left out), with the modules behind it."""
    modules = _modules()
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in modules.items():
        for imported in sorted(_imported(module, path, modules)):
            edge = first_level(module), first_level(imported)
            if edge[0] != edge[1] and "testing" not in edge:
                edges.setdefault(edge, []).append(f"{module} -> {imported}")
    return edges


def folder_cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The groups of first-level entries that import each other in a loop (strongly connected, Tarjan)."""
    graph: dict[str, set[str]] = {}
    for low, high in edges:
        graph.setdefault(low, set()).add(high)
        graph.setdefault(high, set())
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                lowest[node] = min(lowest[node], lowest[other])
            elif other in stack:
                lowest[node] = min(lowest[node], index[other])
        if lowest[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_folder_imports_another_in_a_loop() -> None:
    edges = folder_imports()
    found = [
        f"{' <-> '.join(group)}:\n"
        + "\n".join(
            f"  {a} -> {b}: {', '.join(why[:3])}"
            for (a, b), why in sorted(edges.items())
            if {a, b} <= set(group)
        )
        for group in folder_cycles(edges)
    ]
    assert not found, "first-level folders that import each other in a loop:\n" + "\n".join(found)


def test_a_folder_cycle_is_found() -> None:
    edges = {("sources", "hooks"): ["sources.hook -> hooks.metastore"], ("hooks", "sources"): ["x -> y"]}
    assert folder_cycles(edges) == [["hooks", "sources"]]
    assert folder_cycles({("sources", "hooks"): ["sources.hook -> hooks.metastore"]}) == []


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
