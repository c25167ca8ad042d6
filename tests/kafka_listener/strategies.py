"""Hypothesis strategies generated from kafka_listener schemas (attrs-style strategies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from kafka_listener.records import Record
from kafka_listener.structs import Field

_INTS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
}
_PRIMITIVES: dict[str, st.SearchStrategy[Any]] = {
    **_INTS,
    "bool": st.booleans(),
    "float64": st.floats(allow_nan=False),
    "string": st.text(max_size=12),
    "bytes": st.binary(max_size=12),
    "records": st.binary(max_size=24),
    "uuid": st.uuids(),
}


def _field_strategy(f: Field, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if f.type == "[]":
        inner: st.SearchStrategy[Any] = st.lists(
            struct_strategy(f.fields, version, flexible), max_size=2
        )
    elif f.type.startswith("[]"):
        inner = st.lists(_PRIMITIVES[f.type[2:]], max_size=3)
    else:
        inner = _PRIMITIVES[f.type]
    if version in f.nullable:
        return st.none() | inner
    return inner


def struct_strategy(
    fields: Sequence[Field], version: int, flexible: bool
) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts holding exactly the fields present at ``version``."""
    return st.fixed_dictionaries(
        {f.name: _field_strategy(f, version, flexible) for f in fields if version in f.versions}
    )


def expected_decoded(
    fields: Sequence[Field], version: int, value: dict[str, Any]
) -> dict[str, Any]:
    """What decoding ``value`` must give: present fields as generated (recursing into
    arrays of structs), absent ones as their defaults."""
    out: dict[str, Any] = {}
    for f in fields:
        if version not in f.versions:
            out[f.name] = f.default_factory()()
        elif f.type == "[]" and value[f.name] is not None:
            out[f.name] = [expected_decoded(f.fields, version, item) for item in value[f.name]]
        else:
            out[f.name] = value[f.name]
    return out


_HEADER = st.tuples(
    st.text(max_size=8),
    st.none() | st.binary(max_size=8),
)


@st.composite
def record_lists(draw: st.DrawFn, max_size: int = 20) -> list[Record]:
    """Records with sequential offset deltas, timestamps near a base, optional
    null keys/values and headers."""
    base = draw(st.integers(0, 2**41))
    n = draw(st.integers(1, max_size))
    records = []
    for i in range(n):
        records.append(
            Record(
                i,
                base + draw(st.integers(-(10**6), 10**6)),
                draw(st.none() | st.binary(max_size=20)),
                draw(st.none() | st.binary(max_size=300)),
                tuple(draw(st.lists(_HEADER, max_size=3))),
            )
        )
    return records
