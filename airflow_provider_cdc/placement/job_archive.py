"""The job archives: the modules a Spark job imports, zipped for ``--py-files`` (or a Spark Connect
session's artifacts), so the jobs run where this provider and Airflow are not installed."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the package, above placement/
DOMAIN_ZIP_NAME = "airflow_provider_cdc_domain.zip"
_ZIP_ENTRY_TIME = (1980, 1, 1, 0, 0, 0)
_ZIP_PACKAGE_INIT = '"""The domain layer of airflow-provider-cdc, shipped to Spark with --py-files."""\n'


def shipped_modules() -> list[Path]:
    """What the merge job imports: the domain (with the window contract), the filesystem resolver and
    the job's own plan, kernels and file copies (executors unpickle the kernels by reference)."""
    merge = PACKAGE_DIR / "merge"
    return [
        *sorted((PACKAGE_DIR / "core").rglob("*.py")),
        PACKAGE_DIR / "filesystems.py",
        *sorted(merge.glob("*.py")),
    ]


def build_domain_zip(
    directory: str | os.PathLike[str], modules: Sequence[Path] | None = None, name: str = DOMAIN_ZIP_NAME
) -> str:
    """Write what the merge job imports (or ``modules``, files of this package) as a zip for
    ``--py-files``; return the zip's path.

    The zip holds the domain modules, ``filesystems`` and the job's modules with a package
    ``__init__`` without imports, so the driver and executors import them without Airflow installed.
    """
    target = Path(directory) / name
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        # The same code gives the same bytes (no timestamps): a Spark Connect session is shared by
        # the jobs whose zip is byte for byte the same.
        entries = [("__init__.py", _ZIP_PACKAGE_INIT.encode())] + [
            (module.relative_to(PACKAGE_DIR).as_posix(), module.read_bytes())
            for module in (shipped_modules() if modules is None else modules)
        ]
        for entry_name, content in entries:
            entry = zipfile.ZipInfo(f"airflow_provider_cdc/{entry_name}", date_time=_ZIP_ENTRY_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, content)
    return str(target)


JOB_ARCHIVE_NAME = "airflow_provider_cdc_jobs.zip"


def job_modules() -> list[Path]:
    """What the merge job and the targets' Spark jobs import: :func:`shipped_modules` plus the change-set
    reader, the target registry and the folder of every target with a Spark job
    (``TargetKind.spark_job``), without its Airflow operators. Dataproc jobs get it."""
    from airflow_provider_cdc.plugins import target_kinds

    folders = sorted(
        {PACKAGE_DIR.joinpath(*kind.spark_job.split(".")[1:-1]) for kind in target_kinds() if kind.spark_job}
    )
    return [
        *shipped_modules(),
        *sorted((PACKAGE_DIR / "changesets").glob("*.py")),
        PACKAGE_DIR / "plugins.py",
        PACKAGE_DIR / "targets" / "__init__.py",
        *(path for folder in folders for path in sorted(folder.glob("*.py")) if path.name != "operators.py"),
    ]


def build_job_archive(directory: str | os.PathLike[str]) -> str:
    """Write the archive of :func:`job_modules` into ``directory``; return its path."""
    return build_domain_zip(directory, job_modules(), JOB_ARCHIVE_NAME)
