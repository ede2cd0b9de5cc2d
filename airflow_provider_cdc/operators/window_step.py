"""The arguments every window step takes, declared once: the merge, the upserts and the commit.

:class:`WindowStepFields` lists them with one default each: ``pipeline_id``, ``window_start`` and
``window_end`` (default the run's data interval), ``locations``, ``epoch``, ``gcp_conn_id``
(``google_cloud_default``), ``impersonation_chain`` and ``metastore_conn_id``. A step derives
:class:`WindowStepMixin` (before its Airflow base class), names its fields class (a subclass of
:class:`WindowStepFields` that may make ``locations`` or ``pipeline_id`` required), declares its
``__init__`` with ``connection_arguments_of(fields)`` (from
:mod:`airflow_provider_cdc.hooks.connection_fields`, so ``default_args`` and ``partial()`` see the
arguments) and adds only its own. All the common arguments are templated.

Every step also takes ``window``: the open step's window handle (its return value, e.g.
``window=open_window.output``; a mapping, its JSON text or a
:class:`~airflow_provider_cdc.core.contract.window_handle.WindowHandle`), kept in the template field
``window_handle``. Given one, the step's window, pipeline, epoch, source key, staging location and
window basis are the handle's, parsed once per run of the step; an explicit ``window_start``,
``window_end``, ``epoch`` or ``pipeline_id`` that differs from it fails without retries, naming both.
Without it the separate arguments keep working.

Google credentials reach storage only where a location needs them: the default connection is not
read for a pipeline on local paths (:func:`~airflow_provider_cdc.hooks.storage.storage_connection`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_cdc._errors import InvalidSettingError
from airflow_provider_cdc.core.contract.locations import WindowLocations
from airflow_provider_cdc.core.contract.window_handle import WindowHandle
from airflow_provider_cdc.core.identifiers import validate_pipeline_id
from airflow_provider_cdc.core.timestamps import coerce_timestamp, format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.failures import FailsPermanentErrors
from airflow_provider_cdc.hooks.connection_fields import (
    ConnectionFields,
    ConnectionFieldsMixin,
    connection_arguments_of,
)
from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook
from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID, storage_connection, storage_environment
from airflow_provider_cdc.operators._observed import ObservedStep
from airflow_provider_cdc.operators._window import WINDOW_END, WINDOW_START, epoch_of, locations_of, window_of

if TYPE_CHECKING:
    from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook
    from airflow_provider_cdc.lineage import StepLineage


@dataclass(frozen=True, kw_only=True)
class WindowStepFields(ConnectionFields):
    """The arguments of every window step (all templated).

    :param pipeline_id: the pipeline whose window this is (default: the step's own rule, mostly the
        DAG id).
    :param window_start: inclusive window start, RFC 3339 (default the data interval start).
    :param window_end: exclusive window end, RFC 3339 (default the data interval end).
    :param locations: the pipeline's roots: ``staging_root``, ``changeset_root`` and its targets' roots
        (absolute local paths or URIs; see :class:`WindowLocations`).
    :param epoch: the opening of the window this run belongs to (the open task's ``epoch`` XCom);
        with ``window`` the handle's.
    :param gcp_conn_id: Google Cloud connection whose credentials open object-store locations (the
        default connection is only read for those, and may be missing: Application Default
        Credentials).
    :param impersonation_chain: service account(s) to impersonate with ``gcp_conn_id``, as for the
        google provider's hooks.
    :param metastore_conn_id: the metastore of the pipeline's windows.
    """

    pipeline_id: str | None = None
    window_start: Any = WINDOW_START
    window_end: Any = WINDOW_END
    locations: Mapping[str, Any] | WindowLocations | None = None
    epoch: Any = None
    gcp_conn_id: str = DEFAULT_GCP_CONN_ID
    impersonation_chain: str | Sequence[str] | None = None
    metastore_conn_id: str | None = CdcMetastoreHook.default_conn_name

    def storage_conn_id(self) -> str | None:
        """The connection whose credentials open the locations (``None``: none is read)."""
        roots = locations_of(self.locations)
        return storage_connection(self.gcp_conn_id, tuple(roots.roots().values()))

    def to_hook(self) -> CdcPipelineHook:
        """The pipeline hook of these fields: the metastore and the storage credentials."""
        from airflow_provider_cdc.hooks.pipeline import CdcPipelineHook

        conn_id = self.storage_conn_id()
        return CdcPipelineHook(
            self.metastore_conn_id,  # type: ignore[arg-type]
            conn_id,
            impersonation_chain=self.impersonation_chain if conn_id else None,
        )


@dataclass(frozen=True, kw_only=True)
class LocatedWindowStepFields(WindowStepFields):
    """A window step that needs ``locations`` (the merge)."""

    locations: Mapping[str, Any] | WindowLocations = field()


@dataclass(frozen=True, kw_only=True)
class PipelineWindowStepFields(LocatedWindowStepFields):
    """A window step that needs ``locations`` and ``pipeline_id`` (the upserts)."""

    pipeline_id: str = field()


#: The template field that holds a step's ``window`` argument (the open step's window handle).
WINDOW_HANDLE_FIELD = "window_handle"

#: The common arguments' names (each window step's ``template_fields`` include them).
WINDOW_STEP_FIELDS: tuple[str, ...] = (*WindowStepFields.field_names(), WINDOW_HANDLE_FIELD)

#: The arguments a window handle decides; given explicitly too, they must agree with it.
_HANDLE_ARGUMENTS = ("window_start", "window_end", "epoch", "pipeline_id")

_Init = TypeVar("_Init", bound=Callable[..., None])


def window_step_arguments_of(fields: type[WindowStepFields]) -> Callable[[_Init], _Init]:
    """Declares an ``__init__`` of a :class:`WindowStepMixin` class as taking ``fields`` and ``window``
    (so ``default_args`` and ``partial()`` see them)."""
    connection = connection_arguments_of(fields)

    def declare(init: _Init) -> _Init:
        init = connection(init)
        signature = inspect.signature(init)
        if "window" in signature.parameters:
            return init
        window = inspect.Parameter("window", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Any)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        rest = [p for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        init.__signature__ = signature.replace(parameters=[*own, window, *rest])  # type: ignore[attr-defined]
        return init

    return declare


#: Declares an ``__init__`` of a :class:`WindowStepMixin` class as taking the common arguments.
window_step_arguments = window_step_arguments_of(WindowStepFields)


def window_handle_of(value: Any) -> WindowHandle | None:
    """The window handle of a rendered ``window`` argument (``None``: none given); one that is no
    handle fails without retries (``InvalidSettingError``), naming ``window``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return WindowHandle.of(value)
    except (TypeError, ValueError) as exc:
        raise InvalidSettingError(
            f"window must be the open step's window handle (its return value, e.g. "
            f"window=open_window.output), got {str(value)[:200]!r}: {exc}"
        ) from None


def _handle_value(handle: WindowHandle, name: str) -> Any:
    return {
        "window_start": handle.window.start,
        "window_end": handle.window.end,
        "epoch": handle.epoch,
        "pipeline_id": handle.pipeline,
    }[name]


def _disagrees(name: str, given: Any, handle: WindowHandle) -> bool:
    """Whether an explicit argument differs from what the handle says."""
    expected = _handle_value(handle, name)
    if name in ("window_start", "window_end"):
        try:
            return coerce_timestamp(given if not isinstance(given, str) else given.strip()) != expected
        except (TypeError, ValueError):
            return True
    if name == "epoch":
        try:
            return epoch_of(given) != expected
        except ValueError:
            return True
    return given not in (None, "") and str(given) != str(expected)


def _shown(value: Any) -> str:
    return format_timestamp(value) if hasattr(value, "tzinfo") else repr(value)


def check_handle_agrees(handle: WindowHandle, given: Mapping[str, Any]) -> None:
    """Fail without retries (``InvalidSettingError``) when an explicit ``window_start``,
    ``window_end``, ``epoch`` or ``pipeline_id`` in ``given`` (rendered) differs from ``handle``."""
    for name, value in given.items():
        if _disagrees(name, value, handle):
            raise InvalidSettingError(
                f"{name} {_shown(value)} differs from the window handle's "
                f"{_shown(_handle_value(handle, name))} (window {handle.window} of pipeline "
                f"{handle.pipeline!r}, epoch {handle.epoch}); give window alone, or leave {name} out"
            )


class WindowStepMixin(ObservedStep, FailsPermanentErrors, ConnectionFieldsMixin):
    """Gives a window step the :class:`WindowStepFields` (or :attr:`connection_class`'s) arguments as
    attributes, and what the steps derive from them: :meth:`window`, :meth:`window_locations`,
    :meth:`window_epoch`, :meth:`pipeline_of`, :meth:`pipeline_hook` and :meth:`storage_environment`.
    Its ``execute`` fails without retries on an error a retry cannot heal (:mod:`airflow_provider_cdc.
    failures`), and sends the step's metrics and keeps its failure on the window
    (:class:`~airflow_provider_cdc.operators._observed.ObservedStep`).

    ``window`` (the template field ``window_handle``): the open step's window handle; see the module.

    Put it before the Airflow base class; start ``template_fields`` with :data:`WINDOW_STEP_FIELDS`.
    """

    connection_class: type[WindowStepFields] = WindowStepFields
    template_fields: Sequence[str] = WINDOW_STEP_FIELDS
    template_fields_renderers: Mapping[str, str] = {"locations": "json"}

    pipeline_id: str | None
    window_start: Any
    window_end: Any
    locations: Mapping[str, Any] | WindowLocations | None
    epoch: Any
    gcp_conn_id: str
    impersonation_chain: str | Sequence[str] | None
    metastore_conn_id: str | None
    window_handle: Any

    @window_step_arguments
    def __init__(self, *, window: Any = None, **kwargs: Any) -> None:
        explicit = tuple(name for name in _HANDLE_ARGUMENTS if kwargs.get(name) is not None)
        super().__init__(**kwargs)
        self.window_handle = window
        #: the arguments given besides the handle (they must agree with it)
        self._explicit_arguments = explicit
        self._explicit_values: dict[str, Any] | None = None
        #: the rendered ``window`` and its handle, parsed once
        self._parsed_handle: tuple[Any, WindowHandle | None] | None = None

    def handle(self) -> WindowHandle | None:
        """The rendered ``window`` argument's handle (``None``: none given), parsed once: the step's
        window, pipeline and epoch become the handle's. An explicit ``window_start``, ``window_end``,
        ``epoch`` or ``pipeline_id`` that differs fails without retries, naming both values."""
        value = self.window_handle
        parsed = self._parsed_handle
        if parsed is not None and parsed[0] is value:
            return parsed[1]
        handle = window_handle_of(value)
        if handle is not None:
            if self._explicit_values is None:
                self._explicit_values = {name: getattr(self, name) for name in self._explicit_arguments}
            check_handle_agrees(handle, self._explicit_values)
            self.pipeline_id = handle.pipeline
            self.window_start = format_timestamp(handle.window.start)
            self.window_end = format_timestamp(handle.window.end)
            self.epoch = handle.epoch
        self._parsed_handle = (value, handle)
        return handle

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the fields, then take the window handle (the step's window, pipeline and epoch)."""
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        self.handle()

    def window(self) -> Window:
        """The window of the handle, else of the rendered ``window_start``/``window_end``."""
        handle = self.handle()
        if handle is not None:
            return handle.window
        return window_of(self.window_start, self.window_end)

    def window_locations(self, *required: str) -> WindowLocations:
        """The rendered ``locations``; ``required`` names the roots the step needs."""
        return locations_of(self.locations, *required)

    def window_epoch(self) -> int | None:
        """The handle's epoch, else the rendered ``epoch`` (``None``: none given)."""
        handle = self.handle()
        if handle is not None:
            return handle.epoch
        return epoch_of(self.epoch)

    def pipeline_of(self, context: Any, *, required: bool = True) -> str | None:
        """The handle's pipeline, else ``pipeline_id``, else the id of the DAG running the task
        (checked); without any, ``None`` unless ``required``."""
        handle = self.handle()
        if handle is not None:
            return validate_pipeline_id(handle.pipeline)
        if self.pipeline_id:
            return validate_pipeline_id(str(self.pipeline_id))
        ti = context.get("ti") if isinstance(context, Mapping) else None
        if ti is None:
            if required:
                raise ValueError(f"{type(self).__name__} outside a DAG run needs pipeline_id")
            return None
        return validate_pipeline_id(ti.dag_id)

    def pipeline_hook(self) -> CdcPipelineHook:
        """The pipeline hook of the rendered fields (Google credentials only for object-store
        locations)."""
        return self.to_hook()

    def storage_environment(self) -> dict[str, str]:
        """The storage options a job gets in its environment (masked; empty when no location is on an
        object store or the connection has no key)."""
        fields = self.connection
        conn_id = fields.storage_conn_id()
        return storage_environment(conn_id, fields.impersonation_chain if conn_id else None)

    def storage_options(self) -> dict[str, str] | None:
        """The storage options this task opens the step's locations with, as its pipeline hook reads
        them (``None``: none; the clients use Application Default Credentials)."""
        return self.pipeline_hook().storage_options() or None

    def step_lineage(self) -> StepLineage | None:
        """What this run of the step read and wrote (called after it succeeded); ``None``: nothing."""
        return None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: :meth:`step_lineage`'s datasets and the window as the run facet ``cdcWindow``
        (sent by the OpenLineage provider when it is installed and configured)."""
        from airflow_provider_cdc.lineage import lineage_of

        return lineage_of(self, task_instance, self.step_lineage, self.window(), self.window_epoch())

    if TYPE_CHECKING:

        @property
        def connection(self) -> WindowStepFields: ...

        def to_hook(self) -> CdcPipelineHook: ...
