"""The targets by name (their metastore key): what the commit, the status and the repair look up.

Each :class:`TargetKind` names its implementation by import path, so that looking a target up
imports nothing heavy (a target's clients and storage libraries) until one is opened. A target is a folder
``targets/<name>/`` whose ``__init__`` declares its kind as ``TARGET`` (found by :func:`discover`, so a
new target needs no edit outside its folder); its class implements
:class:`~airflow_provider_cdc.core.contract.target.Target` with ``name`` equal to the registered name.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

from airflow_provider_cdc.core.contract.target import Target, TargetApplied, TargetCommit


@dataclass(frozen=True)
class TargetKind:
    """A registered target: its metastore key, how messages call it, what its apply watermark is called,
    whether the commit derives its watermarks from the windows (``True``) or records the watermarks the
    target reports (``False``), and its implementation (``module:Class``).

    ``commit`` names its part of the commit (``module:Class``, a
    :class:`~airflow_provider_cdc.core.contract.target.TargetCommit`); ``location_field`` the field of the
    window steps' ``locations`` that holds its tables (a commit given no ``applied`` commits the targets
    whose field is set); ``reported`` (``module:function``) converts the value of the commit's deprecated
    ``{name}_watermarks`` argument into a ``TargetApplied``; ``cli`` (``module``) adds the target's
    commands to ``python -m airflow_provider_cdc`` (its ``register(subparsers)``). ``keeps_rows`` says the
    target keeps the current rows of its tables, so that a later target of the pipeline can complete
    partial row images from them: its class, opened on its root, is then also a
    :class:`~airflow_provider_cdc.targets.images.RowSource` (``current_rows``, ``table_uri``), and
    ``cdc_pipeline`` applies it before the targets that write whole rows. ``spark_job`` (``module``)
    names the target's Spark job: the job archive ships its folder (without its Airflow operators).
    """

    name: str
    title: str
    watermark: str
    implementation: str
    watermark_is_window_end: bool = False
    commit: str = ""
    location_field: str | None = None
    reported: str = ""
    cli: str = ""
    catch_up: str = ""
    keeps_rows: bool = False
    spark_job: str = ""

    def load(self) -> type:
        """The implementing class (imported now), checked to carry this kind's name."""
        cls = _attribute(self.implementation)
        if getattr(cls, "name", None) != self.name:
            raise TypeError(
                f"target {self.name!r}: {self.implementation} has name {getattr(cls, 'name', None)!r}"
            )
        return cls

    def committer(self) -> TargetCommit:
        """The target's part of the commit (imported now)."""
        if not self.commit:
            raise TypeError(f"target {self.name!r} declares no commit part (TargetKind.commit)")
        return _attribute(self.commit)()

    def from_reported(self, value: Any, window: int) -> TargetApplied:
        """The commit's deprecated ``{name}_watermarks`` value as the target's ``TargetApplied``."""
        if not self.reported:
            raise TypeError(
                f"the commit takes no {self.name}_watermarks; give applied=[the {self.title} step's output]"
            )
        return _attribute(self.reported)(value, window)


def _attribute(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


#: The package whose sub-packages are the targets.
TARGETS_PACKAGE = "airflow_provider_cdc.targets"

_KINDS: dict[str, TargetKind] = {}


def register(kind: TargetKind) -> TargetKind:
    """Register a target kind under its (valid, unused) name."""
    from airflow_provider_cdc.metastore.model import validate_target

    name = validate_target(kind.name)
    if name in _KINDS and _KINDS[name] != kind:
        raise ValueError(f"target {name!r} is already registered ({_KINDS[name].implementation})")
    _KINDS[name] = kind
    return kind


def discover() -> None:
    """Register the ``TARGET`` of every target folder (``targets/<name>/__init__.py``), once."""
    if _DISCOVERED:
        return
    package = importlib.import_module(TARGETS_PACKAGE)  # by name: the targets sit above this module

    for module in pkgutil.iter_modules(package.__path__):
        if module.ispkg:
            kind = getattr(importlib.import_module(f"{package.__name__}.{module.name}"), "TARGET", None)
            if isinstance(kind, TargetKind):
                register(kind)
    _DISCOVERED.append(True)


_DISCOVERED: list[bool] = []


def target_kind(name: str) -> TargetKind:
    """The registered kind ``name``; an unknown name fails listing the known ones."""
    discover()
    try:
        return _KINDS[name]
    except KeyError:
        raise KeyError(f"unknown target {name!r}; registered targets: {sorted(_KINDS)}") from None


def target_names() -> list[str]:
    """The registered targets' names."""
    discover()
    return sorted(_KINDS)


def target_kinds() -> list[TargetKind]:
    """The registered kinds, by name."""
    discover()
    return [_KINDS[name] for name in sorted(_KINDS)]


def location_fields() -> list[str]:
    """The roots the registered targets keep their tables under (their ``location_field``), by name."""
    return sorted({kind.location_field for kind in target_kinds() if kind.location_field})


def location_kind(field: str) -> TargetKind:
    """The registered kind whose tables live under the root ``field``; an unknown root names the known."""
    for kind in target_kinds():
        if kind.location_field == field:
            return kind
    raise KeyError(f"no registered target keeps its tables under {field!r}; known roots: {location_fields()}")


def open_target(name: str, *args: Any, **kwargs: Any) -> Target:
    """An instance of the target ``name`` (its class's arguments)."""
    target = target_kind(name).load()(*args, **kwargs)
    if not isinstance(target, Target):
        raise TypeError(f"target {name!r} does not implement the target protocol")
    return target
