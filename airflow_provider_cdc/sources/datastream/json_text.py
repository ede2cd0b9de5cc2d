"""Canonical JSON text (sorted keys, compact, ASCII) written a column at a time.

A batch of events is turned into staged rows column-wise: each column's values become their JSON
texts in one call of the C encoder (:func:`json_texts`), and each row's object is one ``%`` format of
a per-shape template (:func:`object_format`). Every text equals what :data:`canonical_json` writes
for the whole object.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any


def _make_dumps(item_separator: str = ",") -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=True, separators=(item_separator, ":"))`` through the C encoder."""
    encoder = json.JSONEncoder(sort_keys=True, separators=(item_separator, ":"))
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is None:  # pragma: no cover - Python without the C accelerator
        return encoder.encode
    encode = make_encoder(
        None,
        encoder.default,
        json.encoder.encode_basestring_ascii,
        None,
        ":",
        item_separator,
        True,
        False,
        True,
    )
    join = "".join
    return lambda value: join(encode(value, 0))


#: Canonical compact JSON (sorted keys): the text of keys, images and metadata.
canonical_json = _make_dumps()
# A list written with this separator between its items splits into the items' texts: the encoder
# escapes every control character, so no scalar's text holds it (a nested list of two or more items
# does, and shows as more pieces than items).
_SEPARATOR = "\x00"
_separated = _make_dumps(_SEPARATOR)


def json_texts(values: Sequence[Any]) -> list[str]:
    """The canonical JSON text of each value, as a column (one encoder call for the column)."""
    if not values:
        return []
    texts = _separated(values)[1:-1].split(_SEPARATOR)
    if len(texts) == len(values):
        return texts
    return [canonical_json(value) for value in values]


def object_format(names: Sequence[str], constants: dict[str, str] | None = None) -> str:
    """A ``%`` format of the canonical JSON object with keys ``names`` (sorted here) whose values
    are given as JSON texts, in sorted-name order; ``constants``: keys whose text is fixed."""
    constants = constants or {}
    fields = (
        canonical_json(name).replace("%", "%%")
        + ":"
        + (constants[name].replace("%", "%%") if name in constants else "%s")
        for name in sorted(set(names) | set(constants))
    )
    return "{" + ",".join(fields) + "}"
