"""Consumer filters and consumerFilter.json (spec 8.6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.metadata.consumer_filter import (
    CLEAN_AFTER_DEATH_MS,
    BloomFilterData,
    ConsumerFilterData,
    ConsumerFilterManager,
)
from mqcore.metadata.jsonfile import loads_fastjson
from tests.mqcore.metadata.support import NOW_MS, fixture_text, install_fixture


def manager(config_dir: Path, clock: FakeClock) -> ConsumerFilterManager:
    filters = ConsumerFilterManager(config_dir, clock)
    filters.load()
    return filters


def test_java_file_loads_and_live_filters_become_dead_30s_ago(
    config_dir: Path, clock: FakeClock
) -> None:
    install_fixture(config_dir, "consumerFilter.json", "consumerFilter.json")
    filters = manager(config_dir, clock)
    sql = filters.get("TopicTest", "group_sql")
    assert sql == ConsumerFilterData(
        "group_sql",
        "TopicTest",
        "a > 5 AND b = 'x,1:y'",
        "SQL92",
        1699999000000,
        NOW_MS - 30_000,
        BloomFilterData(64, (3, 17, 40)),
        397,
    )
    assert sql.is_dead
    gone = filters.get("TopicTest", "group_gone")
    assert gone is not None and gone.dead_time == 1699999500000 and gone.bloom_filter_data is None
    # Written back exactly as Java would, with the new death time of the live filter.
    expected = (
        fixture_text("consumerFilter.json")
        .replace('"dead":false', '"dead":true')
        .replace('"deadTime":0', f'"deadTime":{NOW_MS - 30_000}')
    )
    assert filters.to_document() == expected
    filters.persist()
    assert (config_dir / "consumerFilter.json").read_text() == expected


def test_dead_time_never_before_birth(config_dir: Path, clock: FakeClock) -> None:
    filters = manager(config_dir, clock)
    filters.register(ConsumerFilterData("g", "T", "TagA", "TAG", born_time=NOW_MS - 5))
    filters.persist()
    assert manager(config_dir, clock).get("T", "g") == ConsumerFilterData(
        "g", "T", "TagA", "TAG", born_time=NOW_MS - 5, dead_time=NOW_MS - 5
    )


def test_persist_drops_filters_dead_for_a_day(config_dir: Path, clock: FakeClock) -> None:
    filters = manager(config_dir, clock)
    filters.register(ConsumerFilterData("old", "T1", "TagA", "TAG", born_time=1))
    filters.register(ConsumerFilterData("live", "T2", "TagB", "TAG", born_time=NOW_MS))
    assert filters.get("T2", "live") is not None and not filters.get("T2", "live").is_dead  # type: ignore[union-attr]
    assert filters.unregister("old") == 1
    assert filters.unregister("old") == 0  # already dead
    clock.advance(CLEAN_AFTER_DEATH_MS - 1)
    filters.persist()
    assert filters.get("T1", "old") is not None
    clock.advance(1)
    filters.persist()
    assert filters.get("T1", "old") is None and filters.topics() == ["T2"]
    written = loads_fastjson((config_dir / "consumerFilter.json").read_text())
    assert list(written["filterDataByTopic"]) == ["T2"]
    assert written["filterDataByTopic"]["T2"]["groupFilterData"]["live"]["dead"] is False


def test_register_validates_and_remove(config_dir: Path, clock: FakeClock) -> None:
    filters = manager(config_dir, clock)
    with pytest.raises(ValidationError) as info:
        filters.register(ConsumerFilterData("g", "T", "x", "XPATH", born_time=1))
    assert (info.value.field, info.value.rule) == ("expression_type", "choice")
    with pytest.raises(ValidationError) as info:
        filters.register(ConsumerFilterData("bad group", "T"))
    assert info.value.field == "consumer_group"
    filters.register(ConsumerFilterData("g", "T", born_time=1))
    assert filters.list_topic("T") == [ConsumerFilterData("g", "T", born_time=1)]
    assert filters.remove("T", "g") and not filters.remove("T", "g")
    assert filters.topics() == []


def test_an_invalid_document_changes_nothing(config_dir: Path, clock: FakeClock) -> None:
    filters = manager(config_dir, clock)
    filters.register(ConsumerFilterData("g", "T", born_time=NOW_MS))
    bad = fixture_text("consumerFilter.json").replace('"bitNum":64', '"bitNum":-64')
    with pytest.raises(ValidationError) as info:
        filters.replace_from_document(bad)
    field = "filterDataByTopic.TopicTest.groupFilterData.group_sql.bloom_filter_data.bit_num"
    assert (info.value.field, info.value.rule) == (field, "range")
    assert filters.topics() == ["T"]
    filters.replace_from_document(fixture_text("consumerFilter.json"))
    assert filters.topics() == ["TopicTest"]
