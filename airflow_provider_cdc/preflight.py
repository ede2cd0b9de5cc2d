"""The preflight: a pipeline DAG's settings checked before a window is recorded.

The open step runs it first (a task with what :class:`OpenStep` lists: the open operators' base)
and ``python -m airflow_provider_cdc check --dag DAG_ID [--conf JSON]`` runs it from a shell; both
gather the same :class:`~airflow_provider_cdc.core.findings.Finding` list:

- **params**: every ``dag_run.conf`` key is a param of the DAG (a value of the wrong type is refused);
- **connections**: every connection the provider's tasks name is defined; a default one may be missing,
  and what that means is said (Application Default Credentials, the local SQLite metastore, Spark
  ``local[*]``);
- **roots**: ``staging_root``, ``changeset_root`` and each target's root are known, absolute and
  writable (a local folder: a probe file created and deleted, or its nearest existing parent
  writable; ``gs://``: the bucket exists);
- **Spark**: a ``spark_connect`` server answers, a ``spark://host:port`` master's port answers; other
  connections (YARN, Kubernetes, Dataproc) are defined;
- **the window** is over: one that ends in the future is refused, naming the pipeline's last applied
  window and the next one to run;
- **the source** exists and answers (its hook's ``check_source``: a database, change stream or tables;
  a bucket and prefix; an instance and table), with "did you mean" suggestions.

The open step fails without retries on any error a retry cannot heal, listing them all; an error of a
service that did not answer is logged, and the step goes on (its own call then fails and is retried).
"""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

from airflow_provider_cdc._compat import AirflowFailException
from airflow_provider_cdc._errors import CdcError, ConnectionNotDefinedError, RelativePathError, redact
from airflow_provider_cdc.core.findings import ERROR, OK, WARNING, Finding, did_you_mean, errors_of
from airflow_provider_cdc.core.identifiers import InvalidIdentifierError
from airflow_provider_cdc.core.timestamps import format_timestamp
from airflow_provider_cdc.core.window import Window
from airflow_provider_cdc.operators._window import known_roots

__all__ = [
    "Preflight",
    "PreflightFailure",
    "check_connection",
    "check_dag",
    "check_params",
    "check_root",
    "check_spark",
    "dag_findings",
    "open_step_preflight",
    "source_findings",
    "window_findings",
]

#: Connection arguments every kind of step shares: attribute → (argument, default id, what a missing
#: default means; ``None``: it must exist). A source's own connection (a templated ``*_conn_id``
#: field of its steps) has no default meaning: it must be defined.
CONNECTIONS: dict[str, tuple[str, str, Callable[[], str] | None]] = {}
#: Environment variables whose ``…_EMULATOR_HOST`` points Google clients at an emulator.
_EMULATOR_SUFFIX = "_EMULATOR_HOST"
_PARAM_TEMPLATE = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
#: Seconds a TCP probe of a Spark server waits for an answer.
PROBE_TIMEOUT = 3.0


def _connections() -> dict[str, tuple[str, str, Callable[[], str] | None]]:
    if not CONNECTIONS:
        from airflow_provider_cdc.hooks.metastore import DEFAULT_METASTORE_CONN_ID, default_metastore_path
        from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID
        from airflow_provider_cdc.placement.connect.session import DEFAULT_SPARK_CONN_ID

        def google() -> str:
            emulators = sorted(name for name in os.environ if name.endswith(_EMULATOR_SUFFIX))
            if emulators:
                return f"Google clients use Application Default Credentials ({emulators[0]}: anonymous)"
            return "Google clients use Application Default Credentials"

        CONNECTIONS.update(
            gcp_conn_id=("gcp_conn_id", DEFAULT_GCP_CONN_ID, google),
            metastore_conn_id=(
                "metastore_conn_id",
                DEFAULT_METASTORE_CONN_ID,
                lambda: f"the metastore is the SQLite file {default_metastore_path()} (this machine only)",
            ),
            spark_conn_id=("conn_id", DEFAULT_SPARK_CONN_ID, lambda: "Spark runs local[*] on the worker"),
        )
    return CONNECTIONS


def _connection(attribute: str) -> tuple[str, str, Callable[[], str] | None]:
    """What :data:`CONNECTIONS` says of ``attribute``; a source's own connection must be defined."""
    return _connections().get(attribute) or (attribute, "", None)


def _source_connections(task: Any) -> list[str]:
    """The templated ``*_conn_id`` fields of ``task`` that are not shared ones (a source's own)."""
    fields = getattr(_task_class(task), "template_fields", ()) or ()
    return [name for name in fields if name.endswith("_conn_id") and name not in _connections()]


@runtime_checkable
class OpenStep(Protocol):
    """What the preflight asks of a source's open step (the open operators' base has it all): its
    rendered settings and window, its pipeline, its own findings and its source hook's options."""

    task_id: str
    pipeline_id: Any
    metastore_conn_id: Any

    def window(self) -> Window:
        """The step's window from its rendered ``window_start``/``window_end`` (``ValueError``: they
        are not one)."""
        ...

    def pipeline(self, context: Any) -> str:
        """The pipeline the window belongs to."""
        ...

    def settings_findings(self) -> list[Finding]:
        """The step's findings about its own settings."""
        ...

    def source_check_options(self) -> dict[str, Any]:
        """What its hook's ``check_source`` is given besides the window."""
        ...

    def to_hook(self) -> Any:
        """The source hook of the rendered settings."""
        ...


class PreflightFailure(AirflowFailException, CdcError):
    """The preflight found errors a retry cannot heal (``findings``: every error it found)."""

    permanent = True

    def __init__(self, message: str, findings: list[Finding]) -> None:
        super().__init__(message)
        self.findings = findings


@dataclass
class Preflight:
    """The findings of one preflight."""

    findings: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.findings = list(dict.fromkeys(self.findings))  # two open steps of one source: said once

    @property
    def errors(self) -> list[Finding]:
        return errors_of(self.findings)

    @property
    def permanent_errors(self) -> list[Finding]:
        return [finding for finding in self.errors if not finding.transient]

    def lines(self) -> list[str]:
        """Every finding, errors first, one line each: ``ERROR setting: problem. Fix: …``."""
        order = {ERROR: 0, WARNING: 1, OK: 2}
        shown = sorted(self.findings, key=lambda f: order[f.level])
        label = {ERROR: "ERROR", WARNING: "WARNING", OK: "ok"}
        return [
            f"{label[f.level]:<7} {f}"
            + (" (the service did not answer: a retry may help)" if f.transient else "")
            for f in shown
        ]

    def log_to(self, logger: Any) -> None:
        """Log every finding: ``ok`` as info, the others as warnings."""
        for finding in self.findings:
            if finding.level == OK:
                logger.info("Preflight: %s", finding)
            else:
                logger.warning("Preflight %s: %s", finding.level, finding)

    def raise_permanent(self, what: str) -> None:
        """Raise :class:`PreflightFailure` listing every error when one of them is permanent."""
        if not self.permanent_errors:
            return
        errors = self.errors
        listed = "\n".join(f"- {finding}" for finding in errors)
        raise PreflightFailure(
            f"{what}: the preflight found {len(errors)} problem(s) in the pipeline's settings; nothing was "
            f"recorded and the task is not retried:\n{listed}",
            errors,
        )


# ----- single checks ----------------------------------------------------------------------------
def check_connection(setting: str, attribute: str, conn_id: str) -> list[Finding]:
    """The connection ``conn_id`` given as ``attribute`` (a key of :data:`CONNECTIONS`, or a source's
    own connection) is defined, or is a default whose absence has a meaning."""
    from airflow_provider_cdc.hooks.connections import lookup_connection

    argument, default, means = _connection(attribute)
    if lookup_connection(conn_id) is not None:
        return [Finding(setting, f"connection {conn_id!r} is defined", level=OK)]
    if means is not None and conn_id == default:
        return [Finding(setting, f"no connection {conn_id!r}: {means()}", level=OK)]
    error = ConnectionNotDefinedError(conn_id, argument, default if means is not None else None)
    problem, _, fix = str(error).partition(": ")
    return [Finding(setting, problem, fix)]


def check_root(
    setting: str, root: str, gcp_conn_id: str | None = None, impersonation_chain: Any = None
) -> list[Finding]:
    """A root is absolute and writable: a local folder (a probe file created and deleted in it, or
    its nearest existing parent writable), a ``gs://`` bucket that exists; other URIs are taken as
    given."""
    from airflow_provider_cdc._errors import require_absolute
    from airflow_provider_cdc.filesystems import is_local

    text = str(root).strip()
    try:
        require_absolute(setting, text)
    except RelativePathError:
        return [
            Finding(
                setting,
                f"{text!r} is a relative path (tasks run in other working directories)",
                f"give an absolute path such as {os.path.abspath(text)!r}, or a gs:// URI",
            )
        ]
    if is_local(text):
        return _check_local_root(setting, urlparse(text).path if text.startswith("file:") else text)
    parsed = urlparse(text)
    if parsed.scheme != "gs":
        return [Finding(setting, f"{text} is on {parsed.scheme}://: not checked here", level=OK)]
    return _check_object_root(setting, text, gcp_conn_id, impersonation_chain)


def _check_local_root(setting: str, root: str) -> list[Finding]:
    path = Path(root)
    if path.is_dir():
        try:
            with tempfile.NamedTemporaryFile(dir=path, prefix=".cdc-preflight-"):
                pass
        except OSError as exc:
            return [
                Finding(
                    setting,
                    f"{root} is not writable here ({exc.strerror})",
                    "give the workers' user write access to it, or choose another root",
                )
            ]
        return [Finding(setting, f"{root} is writable", level=OK)]
    if path.exists():
        return [Finding(setting, f"{root} is a file, not a folder", "choose a folder")]
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return [
            Finding(
                setting,
                f"{root} does not exist and cannot be created: {parent} is not a writable folder",
                f"create {root} with write access for the workers' user, or choose another root",
            )
        ]
    return [Finding(setting, f"{root} does not exist yet; it will be created under {parent}", level=OK)]


#: What an object store says when the bucket (or the object's parent) does not exist, and when the
#: identity may not write there: the two answers a retry cannot change.
_MISSING = re.compile(r"\b404\b|NOT_FOUND|NotFound|NoSuchBucket|does not exist|not found", re.IGNORECASE)
_REFUSED = re.compile(r"\b40[13]\b|PERMISSION_DENIED|UNAUTHENTICATED|Forbidden|Unauthorized|AccessDenied")
PROBE_PREFIX = "_cdc_preflight_probe-"


def _check_object_root(
    setting: str, root: str, gcp_conn_id: str | None, impersonation_chain: Any
) -> list[Finding]:
    """A ``gs://`` root is writable through the same filesystem and credentials the steps use
    (:func:`airflow_provider_cdc.filesystems.resolve` with the storage options of ``gcp_conn_id``): an
    empty probe object is written under it and deleted. A missing bucket and refused access are errors;
    anything else (the service unreachable) is transient."""
    import uuid

    from airflow_provider_cdc.filesystems import join, resolve
    from airflow_provider_cdc.hooks.storage import DEFAULT_GCP_CONN_ID, storage_options

    bucket = urlparse(root).netloc
    try:
        options = storage_options(gcp_conn_id or DEFAULT_GCP_CONN_ID, impersonation_chain)
        filesystem, path = resolve(root, options)
    except ConnectionNotDefinedError:
        return []  # the connection's own finding says it
    except CdcError as exc:
        return [Finding(setting, str(exc), "fix the Google Cloud connection (gcp_conn_id)")]
    probe = join(path, f"{PROBE_PREFIX}{uuid.uuid4().hex}")
    try:
        with filesystem.open_output_stream(probe) as out:
            out.write(b"")
        filesystem.delete_file(probe)
    except OSError as exc:
        detail = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        if _REFUSED.search(str(exc)):
            return [
                Finding(
                    setting,
                    f"{root} is not writable with gcp_conn_id's identity: {detail}",
                    "grant that identity write access to the bucket (roles/storage.objectAdmin)",
                )
            ]
        if _MISSING.search(str(exc)):
            return [
                Finding(
                    setting,
                    f"Cloud Storage bucket {bucket!r} does not exist ({detail})",
                    "create it, or fix the root's bucket name",
                )
            ]
        return [Finding(setting, f"{root} could not be checked: {detail}", "try again", transient=True)]
    return [Finding(setting, f"{root} is writable", level=OK)]


def _answers(host: str, port: int) -> str | None:
    """``None`` when ``host:port`` accepts a TCP connection, else why not."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def check_spark(setting: str, conn_id: str) -> list[Finding]:
    """The Spark connection of the merge and upsert: a Spark Connect server or a ``spark://`` master
    answers on its port; a missing ``spark_default`` means ``local[*]``; others must be defined."""
    from airflow_provider_cdc.hooks.connections import lookup_connection

    connection = lookup_connection(conn_id)
    if connection is None:
        return check_connection(setting, "spark_conn_id", conn_id)
    kind, host = (connection.conn_type or ""), (connection.host or "").strip()
    if kind == "spark_connect":
        parsed = urlparse(host if "://" in host else f"sc://{host}")
        address, port = parsed.hostname or "localhost", connection.port or parsed.port or 15002
        why = _answers(address, port)
        if why is None:
            return [Finding(setting, f"Spark Connect server {address}:{port} answers", level=OK)]
        return [
            Finding(
                setting,
                f"Spark Connect server {address}:{port} of connection {conn_id!r} does not answer ({why})",
                "start it (python -m airflow_provider_cdc spark-connect start), or "
                "fix the connection's host and port",
                transient=True,
            )
        ]
    if kind == "spark" and host.startswith("spark://"):
        masters = host[len("spark://") :].split(",")
        silent = []
        for master in masters:
            address, _, port = master.partition(":")
            why = _answers(address, int(port or connection.port or 7077))
            if why is not None:
                silent.append(f"{master} ({why})")
        if len(silent) == len(masters):
            return [
                Finding(
                    setting,
                    f"Spark master {host} of connection {conn_id!r} does not answer: " + ", ".join(silent),
                    "start the master, or fix the connection's host",
                    transient=True,
                )
            ]
        return [Finding(setting, f"Spark master {host} answers", level=OK)]
    return [Finding(setting, f"connection {conn_id!r} ({kind or 'no type'} {host}) is defined", level=OK)]


def check_params(dag: Any, conf: Mapping[str, Any] | None) -> list[Finding]:
    """Every ``dag_run.conf`` key is a param of ``dag`` and its value fits the param."""
    if not conf:
        return []
    if not isinstance(conf, Mapping):
        return [Finding("dag_run.conf", f"is {type(conf).__name__}, not a JSON object", "give a JSON object")]
    params = getattr(dag, "params", None) or {}
    known = sorted(params)
    shown = ", ".join(known) or "none"
    findings = []
    for key in conf:
        if key not in params:
            findings.append(
                Finding(
                    f"dag_run.conf[{key!r}]",
                    f"{key!r} is not a param of DAG {dag.dag_id!r}",
                    f"{did_you_mean(key, known, 'param')} (the DAG's params: {shown})",
                )
            )
            continue
        try:
            checked = copy.deepcopy(params)
            checked[key] = conf[key]
        except Exception as exc:  # ParamValidationError
            findings.append(
                Finding(
                    f"dag_run.conf[{key!r}]",
                    str(exc).splitlines()[0],
                    f"give param {key!r} a value its schema accepts",
                )
            )
    return findings


def window_findings(metastore_conn_id: str | None, pipeline: str, window: Window) -> list[Finding]:
    """The window is over: one ending in the future is refused, naming the pipeline's last applied
    window and the next one to run (the metastore's clock)."""
    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    try:
        with CdcMetastoreHook(metastore_conn_id or CdcMetastoreHook.default_conn_name) as hook:
            problem = hook.metastore.window_time_problem(pipeline, window)
    except ConnectionNotDefinedError:
        return []  # the connection's own finding says it
    except InvalidIdentifierError as exc:
        return [Finding("pipeline_id", str(exc), "give the pipeline an id the metastore takes")]
    except Exception as exc:
        detail = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return [
            Finding(
                "metastore_conn_id",
                f"the metastore did not answer: {detail}",
                "check that its database is reachable",
                transient=True,
            )
        ]
    if problem is None:
        return [Finding("window", f"window {window} of pipeline {pipeline!r} is over", level=OK)]
    return [Finding("window (window_start, window_end: the run's data interval)", problem)]


def source_findings(task: Any, window: Window | None) -> list[Finding]:
    """What the open ``task``'s (rendered) source hook finds about the source (``check_source``)."""
    from airflow_provider_cdc.failures import permanent_reason

    what = f"the source of task {task.task_id}"
    try:
        hook = task.to_hook()
    except ConnectionNotDefinedError:
        return []  # the connection's own finding says it
    except (AirflowFailException, ValueError, TypeError) as exc:
        return [Finding(what, str(exc), "fix the open task's source arguments")]
    try:
        return list(hook.check_source(window=window, **task.source_check_options()))
    except ConnectionNotDefinedError:
        return []
    except Exception as exc:
        reason = permanent_reason(exc)
        return [
            Finding(
                what,
                f"checking it failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                "check the source's settings and the connection's access" if reason else "try again",
                transient=reason is None,
            )
        ]


# ----- the tasks of a DAG ---------------------------------------------------------------------------
def _task_class(task: Any) -> type | None:
    cls = getattr(task, "operator_class", None)
    if cls is None or isinstance(cls, Mapping):
        cls = type(task) if cls is None else None
    return cls if isinstance(cls, type) else None


def _is_provider_task(task: Any) -> bool:
    """Whether ``task`` is one of the provider's steps (or built on their bases)."""
    cls = _task_class(task)
    if cls is None:
        return False
    return any(base.__module__.startswith("airflow_provider_cdc.") for base in cls.__mro__)


def _param_value(raw: Any, params: Mapping[str, Any]) -> Any:
    """``raw`` with a plain ``{{ params.x }}`` template resolved from ``params`` (other templates:
    ``None``)."""
    if not isinstance(raw, str) or "{{" not in raw:
        return raw
    match = _PARAM_TEMPLATE.match(raw)
    return params.get(match.group(1)) if match else None


def _argument(task: Any, name: str) -> Any:
    kwargs = getattr(task, "partial_kwargs", None)
    if isinstance(kwargs, Mapping):
        return kwargs.get(name)
    return getattr(task, name, None)


@dataclass
class _Use:
    """One rendered value some tasks give one argument, with the templates it came from."""

    tasks: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def setting(self, argument: str) -> str:
        params = sorted({m.group(1) for t in self.templates if (m := _PARAM_TEMPLATE.match(t))})
        tasks = ", ".join(self.tasks[:4]) + (" …" if len(self.tasks) > 4 else "")
        where = f"{argument} of task{'s' if len(self.tasks) > 1 else ''} {tasks}"
        return f"param {params[0]} ({where})" if params else where


def _rendered(task: Any, value: Any, render: Callable[[Any, Any], Any]) -> tuple[Any, list[str]]:
    """``value`` rendered and the templates it held (``NotImplemented`` when it cannot be rendered
    before the run: it pulls another task's XCom)."""
    templates = [value] if isinstance(value, str) and "{{" in value else []
    if isinstance(value, Mapping):
        templates = [v for v in value.values() if isinstance(v, str) and "{{" in v]
    if not templates:
        return value, []
    try:
        return render(task, value), templates
    except Exception:
        return NotImplemented, templates


def dag_findings(dag: Any, render: Callable[[Any, Any], Any]) -> list[Finding]:
    """The connections, roots and Spark connections of ``dag``'s provider tasks, each rendered with
    ``render(task, value)`` and checked once per value."""
    uses: dict[tuple[str, str, str], _Use] = {}
    findings_of_task: list[Finding] = []

    def note(kind: str, argument: str, value: Any, task: Any, template: list[str], **extra: Any) -> None:
        if value is NotImplemented or value in (None, ""):
            return
        use = uses.setdefault((kind, argument, str(value).strip()), _Use(extra=extra))
        use.tasks.append(task.task_id)
        use.templates.extend(template)

    for task in getattr(dag, "tasks", []):
        if not _is_provider_task(task):
            continue
        rendered: dict[str, Any] = {}
        own = _source_connections(task)
        for attribute in (*_connections(), *own, "impersonation_chain"):
            value, template = _rendered(task, _argument(task, attribute), render)
            rendered[attribute] = value
            if attribute == "spark_conn_id":
                note("spark", "conn_id", value, task, template)
            elif attribute != "impersonation_chain":
                note("connection", attribute, value, task, template)
        gcp = rendered.get("gcp_conn_id")
        storage = {
            "gcp_conn_id": gcp if isinstance(gcp, str) else None,
            "impersonation_chain": rendered.get("impersonation_chain"),
        }
        staging, template = _rendered(task, _argument(task, "staging_root"), render)
        note("root", "staging_root", staging, task, template, **storage)
        locations, template = _rendered(task, _argument(task, "locations"), render)
        if isinstance(locations, Mapping):
            raw = _argument(task, "locations")
            known = known_roots()
            for name in sorted(str(key) for key in set(locations) - set(known)):
                findings_of_task.append(
                    Finding(
                        f"{task.task_id}: locations[{name!r}]",
                        "is not a root of the pipeline or of a registered target",
                        f"give only {known}",
                    )
                )
            for name in known:
                own = [raw[name]] if isinstance(raw, Mapping) and isinstance(raw.get(name), str) else []
                note(
                    "root",
                    f"locations[{name!r}]",
                    locations.get(name),
                    task,
                    [t for t in own if "{{" in t],
                    **storage,
                )
    findings: list[Finding] = findings_of_task
    for (kind, argument, value), use in uses.items():
        setting = use.setting(argument)
        if kind == "connection":
            findings += check_connection(setting, argument, value)
        elif kind == "spark":
            findings += check_spark(setting, value)
        else:
            findings += check_root(
                setting, value, use.extra.get("gcp_conn_id"), use.extra.get("impersonation_chain")
            )
    return findings


# ----- the open step and the command ----------------------------------------------------------------
def open_step_preflight(task: Any, context: Mapping[str, Any]) -> Preflight:
    """The preflight of an open step ``task`` (rendered) in its run's ``context``: the DAG's params and
    tasks, the window and the task's own source."""
    dag = context.get("dag") or _dag_of(task)
    findings: list[Finding] = []
    if dag is not None:
        dag_run = context.get("dag_run")
        findings += check_params(dag, getattr(dag_run, "conf", None))
        findings += dag_findings(
            dag, lambda t, value: value if t is task else t.render_template(value, context)
        )
    else:  # a task run on its own: its own settings
        findings += dag_findings(SimpleNamespace(tasks=[task]), lambda t, value: value)
    own = task.settings_findings()
    findings += own
    try:
        window: Window | None = task.window()
    except RelativePathError:
        window = None  # the root's own finding names it
    except ValueError as exc:
        window = None
        findings.append(
            Finding("window_start/window_end", str(exc), "give RFC 3339 timestamps, start before end")
        )
    if window is not None:
        findings += window_findings(getattr(task, "metastore_conn_id", None), task.pipeline(context), window)
    if not errors_of(own):  # the source is checked with the step's own settings
        findings += source_findings(task, window)
    return Preflight(findings)


def _dag_of(task: Any) -> Any:
    try:
        return task.dag if getattr(task, "has_dag", lambda: True)() else None
    except Exception:
        return None


class _NoXcom:
    """A task instance for rendering before a run: no XCom exists yet."""

    def __init__(self, dag_id: str) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = (
            dag_id,
            "preflight",
            "",
            -1,
            0,
        )

    def xcom_pull(self, *args: Any, **kwargs: Any) -> None:
        return None


def render_context(
    dag: Any, params: Mapping[str, Any], conf: Mapping[str, Any], window: Window
) -> dict[str, Any]:
    """A context to render ``dag``'s templates with before a run of ``window``."""
    import pendulum

    start, end = pendulum.instance(window.start), pendulum.instance(window.end)
    return {
        "dag": dag,
        "params": dict(params),
        "dag_run": SimpleNamespace(
            conf=dict(conf), run_id="preflight", data_interval_start=start, data_interval_end=end
        ),
        "run_id": "preflight",
        "data_interval_start": start,
        "data_interval_end": end,
        "logical_date": start,
        "ds": start.to_date_string(),
        "ds_nodash": start.format("YYYYMMDD"),
        "ts": start.isoformat(),
        "ti": _NoXcom(dag.dag_id),
        "task_instance": _NoXcom(dag.dag_id),
        "macros": SimpleNamespace(),
        "var": SimpleNamespace(value=SimpleNamespace(), json=SimpleNamespace()),
    }


def open_tasks(dag: Any) -> list[OpenStep]:
    """The open steps of ``dag``."""
    return [task for task in dag.tasks if isinstance(task, OpenStep)]


def dag_params(dag: Any, conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """The DAG's params with the known keys of ``conf`` over their defaults (values as given)."""
    params = getattr(dag, "params", None) or {}
    values = params.dump() if hasattr(params, "dump") else dict(params)
    values.update({key: value for key, value in (conf or {}).items() if key in params})
    return values


def dag_pipeline_id(dag: Any, conf: Mapping[str, Any] | None = None) -> str:
    """The pipeline a DAG's windows belong to: its open step's rendered ``pipeline_id``, else the
    DAG's ``pipeline_id`` param, else the DAG id."""
    params = dag_params(dag, conf)
    for task in open_tasks(dag):
        return str(_param_value(task.pipeline_id, params) or dag.dag_id)
    return str(params.get("pipeline_id") or dag.dag_id)


def next_window(dag: Any, metastore_conn_id: str | None, pipeline: str) -> Window | None:
    """The window to run next: the data interval after the pipeline's last applied window, else the
    DAG's first data interval (``None``: the DAG has no schedule to tell)."""
    import pendulum
    from airflow.timetables.base import DataInterval, TimeRestriction

    from airflow_provider_cdc.hooks.metastore import CdcMetastoreHook

    last = None
    try:
        with CdcMetastoreHook(metastore_conn_id or CdcMetastoreHook.default_conn_name) as hook:
            last = hook.metastore.last_applied_window(pipeline)
    except Exception:  # an unreachable metastore has its own finding: start from the DAG's start
        last = None
    previous = (
        None if last is None else DataInterval(pendulum.instance(last.start), pendulum.instance(last.end))
    )
    earliest = getattr(dag, "start_date", None)
    restriction = TimeRestriction(
        earliest=None if earliest is None else pendulum.instance(earliest), latest=None, catchup=True
    )
    info = dag.timetable.next_dagrun_info(last_automated_data_interval=previous, restriction=restriction)
    if info is None:
        return None
    return Window(info.data_interval.start, info.data_interval.end)


def window_of_dag(dag: Any, start: datetime, end: datetime | None) -> Window:
    """The window ``[start, end)``; without ``end``, the data interval of ``dag``'s schedule that
    starts at ``start`` (its length)."""
    import pendulum
    from airflow.timetables.base import TimeRestriction

    if end is not None:
        return Window(start, end)
    info = dag.timetable.next_dagrun_info(
        last_automated_data_interval=None,
        restriction=TimeRestriction(earliest=pendulum.instance(start), latest=None, catchup=True),
    )
    length = (info.data_interval.end - info.data_interval.start) if info is not None else timedelta(0)
    if length <= timedelta(0):
        raise ValueError(f"DAG {dag.dag_id} has no schedule to tell a window's length: give --window-end")
    return Window(start, start + length)


def check_dag(
    dag: Any, conf: Mapping[str, Any] | None, window: Window | None
) -> tuple[Preflight, Window | None]:
    """The preflight of ``dag`` run with ``conf`` for ``window`` (default: the next window to run):
    what the open steps would find, every open step's source included."""
    conf = dict(conf or {})
    findings = check_params(dag, conf)
    params = dag_params(dag, conf)
    opens = open_tasks(dag)
    metastore = next((_param_value(t.metastore_conn_id, params) for t in opens), None)
    pipeline = dag_pipeline_id(dag, conf)
    if window is None:
        window = next_window(dag, metastore, pipeline)
    if window is None:
        findings.append(
            Finding(
                "window",
                f"DAG {dag.dag_id} has no schedule to tell its next window",
                "give --window-start and --window-end",
            )
        )
        return Preflight(findings), None
    context = render_context(dag, params, conf, window)
    findings += dag_findings(dag, lambda t, value: t.render_template(value, context))
    findings += window_findings(metastore, pipeline, window)
    for task in opens:
        try:
            task.render_template_fields(context)
        except Exception as exc:
            findings.append(
                Finding(
                    f"task {task.task_id}",
                    f"its arguments cannot be rendered: {exc}",
                    "fix the templates it is given",
                )
            )
            continue
        own = task.settings_findings()
        findings += own
        if not errors_of(own):
            findings += source_findings(task, window)
    return Preflight(findings), window


def dag_bag() -> Any:
    """The DAGs of Airflow's DAG folder (Airflow's own examples left out)."""
    try:  # Airflow 3
        from airflow.dag_processing.dagbag import DagBag

        return DagBag()
    except ImportError:  # Airflow 2.11
        from airflow.models.dagbag import DagBag as DagBag2

        return DagBag2(include_examples=False)


def load_dag(dag_id: str) -> tuple[Any, list[str]]:
    """The DAG ``dag_id`` from Airflow's DAG folder (``None`` when there is none) and every DAG id
    there."""
    bag = dag_bag()
    return bag.dags.get(dag_id), sorted(bag.dag_ids)


def conf_argument(text: str | None) -> dict[str, Any]:
    """``--conf``: a JSON object (empty when not given)."""
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"--conf must be a JSON object, got {type(value).__name__}")
    return value


def describe(window: Window) -> str:
    return f"[{format_timestamp(window.start)}, {format_timestamp(window.end)})"
