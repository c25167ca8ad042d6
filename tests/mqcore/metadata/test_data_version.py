"""dataVersion (spec 8.1)."""

from __future__ import annotations

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.jsonfile import dumps_fastjson


def test_next_version_counts_and_stamps(clock: FakeClock) -> None:
    first = DataVersion.initial(clock)
    assert first == DataVersion(0, 0, clock.now_ms())
    clock.advance(1500)
    second = first.next_version(clock)
    assert second == DataVersion(1, 0, first.timestamp + 1500)
    assert first.counter == 0  # immutable


def test_next_version_sets_the_state_machine_version(clock: FakeClock) -> None:
    assert DataVersion(4, 9, 1).next_version(clock).state_version == 0
    assert DataVersion(4, 0, 1).next_version(clock, state_version=3).state_version == 3


def test_written_as_the_java_bean() -> None:
    text = dumps_fastjson({"dataVersion": DataVersion(7, 0, 1699999999000).to_json()})
    expected = '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"stateVersion":0,\n'
    assert text == expected + '\t\t"timestamp":1699999999000\n\t}\n}'


def test_legacy_spellings_and_missing_fields() -> None:
    assert DataVersion.from_json({"counter": 3, "timestatmp": 15}) == DataVersion(3, 0, 15)
    assert DataVersion.from_json({"counter": 3, "timestamp": 16, "timestatmp": 15}).timestamp == 16
    assert DataVersion.from_json({}) == DataVersion(0, 0, 0)


def test_wrong_types_name_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        DataVersion.from_json({"counter": "3"})
    assert (info.value.field, info.value.rule) == ("dataVersion.counter", "type")
