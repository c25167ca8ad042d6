"""Decoding of the two documents that are a version plus a table of named configs.

``topics.json`` (``topicConfigTable``) and ``subscriptionGroup.json``
(``subscriptionGroupTable``) have the same frame: a ``dataVersion`` bean and a map from a name
to a config bean that repeats the name (``topicName``, ``groupName``). Reading the frame is the
same for both; only the config class and the name field differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mqcore.clock import Clock
from mqcore.errors import ValidationError
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.validation import JsonObject


class NamedConfig(Protocol):
    def validate(self) -> None: ...


def decode_version(doc: JsonObject, clock: Clock) -> DataVersion:
    """The document's ``dataVersion``, or a fresh one when the document has none."""
    version = doc.get_object("dataVersion")
    return DataVersion.initial(clock) if version is None else DataVersion.from_json(version.raw)


def decode_named_table[C: NamedConfig](
    doc: JsonObject,
    table_key: str,
    strict: bool,
    from_json: Callable[[Any, str, str], C],
    name_of: Callable[[C], str],
    name_field: str,
    kind: str,
) -> dict[str, C]:
    """Decode ``doc[table_key]``: name → config.

    ``strict`` (document import) also applies each config's rules and requires the name inside
    the bean (``name_field``) to equal its table key; a file at load is only shape-checked.

    Raises:
        ValidationError: ``field`` is the JSON path of the first bad entry.
    """
    table_obj = doc.get_object(table_key, required=strict)
    table: dict[str, C] = {}
    for key, value in table_obj.items() if table_obj is not None else ():
        path = f"{table_key}.{key}"
        if not isinstance(key, str):
            raise ValidationError(path, "type", f"{path}: {kind} names must be strings")
        config = from_json(value, path, key)
        if strict:
            _validate_entry(config, name_of(config), key, path, name_field)
        table[key] = config
    return table


def _validate_entry(config: NamedConfig, name: str, key: str, path: str, name_field: str) -> None:
    try:
        config.validate()
    except ValidationError as exc:
        raise ValidationError(f"{path}.{exc.field}", exc.rule, f"{path}: {exc}") from exc
    if name != key:
        raise ValidationError(
            f"{path}.{name_field}",
            "mismatch",
            f"{path}: {name_field} {name!r} differs from its table key {key!r}",
        )
