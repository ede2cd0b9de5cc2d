"""Connection fields declared once as a dataclass, and given to tasks as templated keyword arguments.

A **connection dataclass** (a frozen dataclass deriving :class:`ConnectionFields`, with a ``to_hook()``)
lists the arguments a hook takes. :func:`connection_arguments_of` makes the decorator that declares a
task's ``__init__`` as taking those fields, and :class:`ConnectionFieldsMixin` gives the task the fields
as attributes, :attr:`~ConnectionFieldsMixin.connection` and a cached :meth:`~ConnectionFieldsMixin.to_hook`.
Nothing here imports the Google provider: a DAG file naming these classes stays quick to parse.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, TypeVar

_Init = TypeVar("_Init", bound=Callable[..., None])
_Connection = TypeVar("_Connection", bound="ConnectionFields")


@dataclass(frozen=True)
class ConnectionFields:
    """Base of a connection dataclass: built from a task's attributes, compared by value."""

    def __post_init__(self) -> None:
        chain = getattr(self, "impersonation_chain", None)
        if chain is not None and not isinstance(chain, str):  # a list and a tuple compare equal
            object.__setattr__(self, "impersonation_chain", tuple(chain))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields' names, in declaration order (a task's leading ``template_fields``)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of(cls: type[_Connection], source: object) -> _Connection:
        """The fields of ``source``, an object with an attribute of each name (a task or trigger)."""
        return cls(**{name: getattr(source, name) for name in cls.field_names()})

    def arguments(self) -> dict[str, Any]:
        """The fields by name, as given."""
        return {name: getattr(self, name) for name in self.field_names()}

    def to_hook(self) -> Any:
        """A new hook for these fields."""
        raise NotImplementedError(f"{type(self).__name__} names no hook")


def connection_arguments_of(connection: type[ConnectionFields]) -> Callable[[_Init], _Init]:
    """The decorator that declares an ``__init__`` (of a class using :class:`ConnectionFieldsMixin`) as
    taking ``connection``'s fields too, through its ``**kwargs``.

    Airflow reads an operator's arguments from the signature of each ``__init__`` it defines: this is how
    ``default_args``, ``partial()`` and its missing-argument messages know the connection fields.
    """
    parameters = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.default is MISSING else f.default,
            annotation=f.type,
        )
        for f in fields(connection)
    ]

    def declare(init: _Init) -> _Init:
        signature = inspect.signature(init)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        rest = [p for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        init.__signature__ = signature.replace(parameters=[*own, *parameters, *rest])  # type: ignore[attr-defined]
        return init

    return declare


class ConnectionFieldsMixin:
    """Gives an operator, sensor or trigger the fields of :attr:`connection_class`: keyword-only arguments
    and attributes of the same names, :attr:`connection` and :meth:`to_hook`.

    A subclass sets ``connection_class``, starts its ``template_fields`` with the fields' names, and
    declares its ``__init__`` with ``connection_arguments_of(connection_class)``. Put it before the
    Airflow base class.
    """

    connection_class: ClassVar[type[ConnectionFields]]
    #: Copies of a task share its hook: database clients (a source's, SQLAlchemy's) cannot be deep-copied.
    shallow_copy_attrs: Sequence[str] = ("_connection_hook",)

    def __init__(self, **kwargs: Any) -> None:
        values: dict[str, Any] = {}
        for field in fields(self.connection_class):
            if field.name in kwargs:
                values[field.name] = kwargs.pop(field.name)
            elif field.default is MISSING:
                raise TypeError(f"{type(self).__name__} is missing the keyword argument {field.name!r}")
            else:
                values[field.name] = field.default
        super().__init__(**kwargs)
        for name, value in values.items():
            setattr(self, name, value)
        self._connection_hook: tuple[ConnectionFields, Any] | None = None

    @property
    def connection(self) -> Any:
        """The fields' current values (rendered, once a task runs)."""
        return self.connection_class.of(self)

    def to_hook(self) -> Any:
        """The hook for the fields' current values, built once and kept while they stay the same: every
        poke of a sensor, or poll of a trigger, uses one source client, metastore and retention lookup."""
        connection = self.connection
        cached = getattr(self, "_connection_hook", None)
        if cached is None or cached[0] != connection:
            cached = self._connection_hook = (connection, connection.to_hook())
        return cached[1]
