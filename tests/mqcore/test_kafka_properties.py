"""mqcore.kafka_properties reads the Kafka listener's reserved properties as the listener
writes them (issue 21): the headers of every record shape, in order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_listener.mapping import record_to_message
from kafka_listener.record_codec import Record
from mqcore.kafka_properties import is_reserved_property, produced_headers

HEADERS = st.lists(
    st.tuples(
        st.text(max_size=8),
        st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=8).map(str.encode)),
    ),
    max_size=6,
)


def properties(headers: list[tuple[str, bytes | None]]) -> dict[str, str]:
    return dict(record_to_message(Record(0, 1, b"k", b"v", tuple(headers)), 0).properties or {})


@settings(max_examples=300, deadline=None)
@given(HEADERS)
def test_the_headers_a_producer_sent_come_back_in_order(
    headers: list[tuple[str, bytes | None]],
) -> None:
    props = properties(headers)
    expected = tuple(headers) if headers else None
    assert produced_headers(props) == expected


@pytest.mark.parametrize(
    "damage",
    [
        {"__kafka.hblk": "b64:%%%"},
        {"__kafka.hblk": "b64:AgI="},  # one header announced, cut short
        {"__kafka.hblk": "plain"},
        {"__kafka.hdrs": "[not json"},
        {"__kafka.hdrs": '{"a": 1}'},
    ],
)
def test_damaged_properties_give_none(damage: dict[str, str]) -> None:
    assert produced_headers({"a": "1", **damage}) is None


def test_reserved_names() -> None:
    assert is_reserved_property("__kafka.hdrs") and is_reserved_property("__kafka.anything")
    assert not is_reserved_property("trace") and not is_reserved_property("KEYS")
