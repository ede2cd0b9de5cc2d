"""No DAG or shell command is written inline in the README or the documentation: pages include them.

A fenced block either only includes files (``--8<-- "path"`` lines of ``pymdownx.snippets``) that the
tests run (``example_dags/``, ``scripts/``, ``docs/snippets/``, or sections of ``README.md`` and
``ARCHITECTURE.md``), or holds something else than a command or a DAG: an output sample, SQL, JSON, a
diagram, a library call of the test kit. Such a block names its language (``text`` for output samples
and diagrams), so that a block without one is never a command by accident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from snippet_support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$')
INCLUDE_ROOTS = ("example_dags/", "scripts/", "docs/snippets/", "README.md", "ARCHITECTURE.md")
SHELL_LANGUAGES = {"bash", "sh", "shell", "console", "zsh", "shell-session"}
INLINE_LANGUAGES = {"text", "sql", "json", "python", "yaml", "toml"}
#: the first word of a command line (after an optional ``$ ``)
COMMAND = re.compile(
    r"^\s*(\$\s+)?(\S*/)?(python3?|airflow|gcloud|gsutil|pip|bash|sh|export|cdc-spanner-emulator|cdc-pipeline"
    r"|spark-submit|mkdocs|pytest|ruff|docker|curl|scripts/\S+|\.venv\S*/bin/\S+)(\s|$)"
)
DAG = re.compile(
    r"\bDAG\(|@dag\b|\w+(Operator|Sensor)(\.partial)?\(|\bfrom airflow\b|\bimport airflow\b|\w >> \w"
)
#: a command in an indented code block (four spaces after a blank line, outside a fence and a list)
INDENTED_COMMAND = re.compile(
    r"^    (\$\s+)?(python3? |airflow |scripts/|bash |cdc-spanner-emulator |export |gcloud |pip )"
)


@dataclass
class Block:
    page: Path
    line: int
    language: str
    lines: list[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    blocks: list[Block] = []
    current: Block | None = None
    fence = ""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if current is None:
            match = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if match:
                fence = match.group(1)
                current = Block(page, number, match.group(2).lower(), [])
        elif stripped.startswith(fence) and stripped.strip(fence[0]) == "":
            blocks.append(current)
            current = None
        else:
            current.lines.append(line)
    assert current is None, f"{page}: a fence opened at line {current.line} is never closed"
    return blocks


#: the line before a fence that shows a file verbatim (where an include cannot render: the README on GitHub)
COPY = re.compile(r"^<!-- a copy of (\S+), checked by the documentation's tests -->$")


def copy_of(block: Block) -> str | None:
    """The file a block says it is a verbatim copy of (the line before its fence), if any."""
    lines = block.page.read_text().splitlines()
    match = COPY.match(lines[block.line - 2].strip()) if block.line >= 2 else None
    return match.group(1) if match else None


def problems(block: Block) -> list[str]:
    copied = copy_of(block)
    if copied is not None:
        if not copied.startswith(INCLUDE_ROOTS) or not (ROOT / copied).is_file():
            return [f"says it is a copy of {copied}, which is not a file the tests run"]
        if "\n".join(block.lines).strip() != (ROOT / copied).read_text().strip():
            return [f"differs from {copied}, of which it says it is a copy"]
        return []
    content = [line for line in block.lines if line.strip()]
    includes = [INCLUDE.match(line) for line in content]
    if content and all(includes):
        return [
            f'includes "{m.group(1)}", which is not a file the tests run'
            for m in includes
            if m and not m.group(1).startswith(INCLUDE_ROOTS)
        ]
    found = []
    if any(includes):
        found.append("mixes includes with inline lines")
    if not block.language:
        found.append("names no language (an output sample or a diagram is `text`)")
    elif block.language in SHELL_LANGUAGES:
        found.append(f"is a {block.language} block written inline")
    elif block.language not in INLINE_LANGUAGES:
        found.append(f"has the language {block.language!r}, not one of {sorted(INLINE_LANGUAGES)}")
    found += [f"holds a command: {line.strip()!r}" for line in content if COMMAND.match(line)]
    found += [f"holds DAG code: {line.strip()!r}" for line in content if DAG.search(line)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dag_or_command_written_inline(page: Path) -> None:
    found = [f"{block.where}: {problem}" for block in fenced_blocks(page) for problem in problems(block)]
    previous = ""
    inside = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            inside = not inside
        elif not inside and not previous.strip() and INDENTED_COMMAND.match(line):
            found.append(f"{page.relative_to(ROOT)}:{number}: an indented command block: {line.strip()!r}")
        previous = line
    assert not found, "write it into a file a test runs and include it:\n" + "\n".join(found)


def test_included_files_exist() -> None:
    missing = []
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            match = INCLUDE.match(line)
            if match:
                path = match.group(1).split(":", 1)[0]
                if not (ROOT / path).is_file():
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {path}")
    assert not missing, missing


COPIED = "docs/snippets/shop_pipeline.py"


@pytest.mark.parametrize(
    ("text", "wrong"),
    [
        ("```bash\npython -m airflow_provider_cdc status --pipeline p\n```\n", True),
        ("```\nairflow dags test d 2026-01-01\n```\n", True),
        ("```python\nwith DAG('x') as dag:\n    SparkMergeWindowOperator(task_id='m')\n```\n", True),
        ('```bash\n--8<-- "docs/snippets/demo.sh"\n```\n', False),
        ('```bash\n--8<-- "/etc/passwd"\n```\n', True),
        ("```text\nWindow [a, b) of pipeline shop: FAILED\n```\n", False),
        ("```sql\nSELECT 1;\n```\n", False),
        (f"<!-- a copy of {COPIED}, checked by the documentation's tests -->\n```python\n"
         f"{(ROOT / COPIED).read_text()}```\n", False),
        (f"<!-- a copy of {COPIED}, checked by the documentation's tests -->\n```python\n"
         "with DAG('x') as dag:\n    pass\n```\n", True),
    ],
)
def test_the_check_itself(tmp_path: Path, text: str, wrong: bool) -> None:
    page = tmp_path / "page.md"
    page.write_text(text)
    assert bool([p for block in fenced_blocks(page) for p in problems(block)]) == wrong
