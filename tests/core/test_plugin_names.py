"""Shared code knows no plug-in: outside a target's or a source's own folder (``targets/<name>/``,
``sources/<name>/``) and the test doubles (``testing/``), no module names a registered target or a
source in code, i.e. in an identifier, an import or a string literal (docstrings and comments may
name them as examples). Every module is read with ``ast``.

A name counts where it starts a word of the text: ``DeltaLake``, ``delta_root``, ``"bigquery"``,
``BigQueryCdc``, ``deltalake`` do; ``timedelta`` does not. The modules that must name plug-ins are
listed in :data:`ALLOWED`, each with why.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "airflow_provider_cdc"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE
#: Plug-in folders: the code inside them is the plug-in's own.
PLUGIN_PARENTS = ("targets", "sources")
EXCLUDED = ("testing",)

#: module (relative to the package) → the texts it may hold that name a plug-in (``None``: any).
ALLOWED: dict[str, frozenset[str] | None] = {
    # The provider's registration with Airflow: its hooks, operators and connection types by name.
    "__init__.py": None,
    "connection_types.py": None,
    "connection_forms.py": None,
    # Modules at old public paths that re-export what moved into a plug-in's folder.
    "hooks/bigquery_cdc.py": None,
    "operators/upsert.py": None,
    "operators/bigquery_upsert.py": None,
    "repair.py": None,
    "hooks/spanner_change_stream.py": None,
    "hooks/spanner_table.py": None,
    "operators/spanner_change_stream.py": None,
    "operators/spanner_table.py": None,
    "sensors/partitions_drained.py": None,
    "triggers/partitions_drained.py": None,
    "task_groups.py": None,
    "assets.py": frozenset(
        {
            "delta_table_uri",
            "bigquery_table_uri",
            "split_bigquery_dataset",
            "airflow_provider_cdc.targets.delta.names",
            "airflow_provider_cdc.targets.bigquery.names",
        }
    ),
    # Migrations that already ran keep their literal history (the targets' keys as they were stored).
    "metastore/migrations.py": None,
    # Metadata keys that tables written by earlier versions carry (read, never written).
    "changesets/arrow_values.py": frozenset({"spanner.type", "spanner.primary_key"}),
    # The object-store client is a library's (delta-rs), not the target's.
    "filesystems.py": frozenset({"deltalake.fs", "DeltaStorageHandler"}),
    # The public names of ``airflow_provider_cdc.pipeline``: every source's and target's spec, loaded
    # from its folder on first use.
    "pipeline/__init__.py": None,
}


def plugin_names() -> list[str]:
    """The registered targets' names and the sources' (their folders' names)."""
    from airflow_provider_cdc.plugins import target_names

    sources = sorted(p.name for p in (ROOT / "sources").iterdir() if (p / "__init__.py").is_file())
    return sorted({*target_names(), *sources})


_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def names_in(text: str, names: list[str]) -> list[str]:
    """The plug-in ``names`` that start a word of ``text``."""
    words = [w.lower() for w in _WORD.findall(text)]
    found = []
    for name in names:
        if any("".join(words[i:]).startswith(name) for i in range(len(words))):
            found.append(name)
    return found


def shared_modules() -> list[Path]:
    modules = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in EXCLUDED:
            continue
        if parts[0] in PLUGIN_PARENTS and len(parts) > 2:  # inside targets/<name>/ or sources/<name>/
            continue
        modules.append(path)
    return modules


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def texts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every identifier, imported module or name and string literal (but docstrings) of ``tree``."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            yield line, node.id
        elif isinstance(node, ast.Attribute):
            yield line, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield line, node.name
        elif isinstance(node, ast.arg):
            yield line, node.arg
        elif isinstance(node, ast.keyword) and node.arg:
            yield line, node.arg
        elif isinstance(node, ast.ImportFrom):
            yield line, node.module or ""
            for alias in node.names:
                yield line, alias.name
                if alias.asname:
                    yield line, alias.asname
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield line, alias.name
                if alias.asname:
                    yield line, alias.asname
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield line, node.value


def findings(path: Path, names: list[str]) -> list[str]:
    relative = path.relative_to(ROOT).as_posix()
    allowed = ALLOWED.get(relative, frozenset())
    if allowed is None:
        return []
    out = []
    for line, text in texts(ast.parse(path.read_text(encoding="utf-8"))):
        if text in allowed:
            continue
        for name in names_in(text, names):
            out.append(f"{relative}:{line}: {text[:80]!r} names {name!r}")
    return sorted(set(out))


def test_the_plugins_are_known() -> None:
    assert {"delta", "bigquery", "spanner", "datastream", "tablestore"} <= set(plugin_names())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DeltaLake", ["delta"]),
        ("lake_root", []),
        ("timedelta", []),
        ("deltalake.fs", ["delta"]),
        ("BigQueryCdc", ["bigquery"]),
        ("to_bigquery", ["bigquery"]),
        ("a big query", ["bigquery"]),
        ("SpannerChangeStream", ["spanner"]),
        ("target_roots", []),
    ],
)
def test_a_name_counts_where_it_starts_a_word(text: str, expected: list[str]) -> None:
    assert names_in(text, ["bigquery", "delta", "spanner"]) == expected


def test_shared_modules_name_no_plugin_in_code() -> None:
    names = plugin_names()
    found = [finding for path in shared_modules() for finding in findings(path, names)]
    assert not found, "shared modules name plug-ins (move the code into the plug-in's folder):\n" + "\n".join(
        found
    )


def test_every_allowed_module_exists() -> None:
    assert [name for name in ALLOWED if not (ROOT / name).is_file()] == []


def test_every_allowed_text_is_still_there() -> None:
    """The allow-list only shrinks: a text no longer in its module leaves the list."""
    stale = [
        f"{name}: {text!r}"
        for name, allowed in ALLOWED.items()
        if allowed is not None
        for text in allowed
        if text not in {found for _, found in texts(ast.parse((ROOT / name).read_text(encoding="utf-8")))}
    ]
    assert stale == []
