"""Delay levels (spec 9) and delayOffset.json (spec 8.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.metadata.delay_offsets import DelayOffsetManager, parse_delay_levels
from mqcore.metadata.jsonfile import loads_fastjson
from tests.mqcore.metadata.support import fixture_text, install_fixture


def manager(config_dir: Path, clock: FakeClock) -> DelayOffsetManager:
    delay = DelayOffsetManager(config_dir, clock)
    delay.load()
    return delay


def test_default_levels() -> None:
    levels = parse_delay_levels()
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000)
    assert levels[4:14] == tuple(m * 60_000 for m in range(1, 11))
    assert levels[14:] == (1_200_000, 1_800_000, 3_600_000, 7_200_000)
    assert (
        parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h") == levels
    )


def test_custom_levels_with_days_and_extra_spaces() -> None:
    assert parse_delay_levels(" 500s  1d\t3h ") == (500_000, 86_400_000, 10_800_000)


@pytest.mark.parametrize(
    ("spec", "rule"),
    [("", "blank"), ("1s 5x", "format"), ("1.5s", "format"), ("-1s", "format"), ("s", "format")],
)
def test_bad_levels(spec: str, rule: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_delay_levels(spec)
    assert (info.value.field, info.value.rule) == ("message_delay_level", rule)


def test_java_file_round_trips_byte_for_byte(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "delayOffset.json", "delayOffset.json")
    delay = manager(config_dir, clock)
    assert delay.offsets() == {1: 0, 2: 17, 3: 5, 18: 2}
    assert delay.get(2) == 17 and delay.get(4) == 0
    assert delay.to_document() == fixture_text("delayOffset.json")
    delay.persist()
    assert (config_dir / "delayOffset.json").read_bytes() == fixture_text(
        "delayOffset.json"
    ).encode()


def test_legacy_4x_file(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "delayOffset_legacy_4x.json", "delayOffset.json")
    delay = manager(config_dir, clock)
    assert delay.offsets() == {2: 17, 3: 5}
    assert delay.data_version.counter == 0


def test_update_persist_and_version_step(config_dir: Path, clock: FakeClock) -> None:
    delay = manager(config_dir, clock)
    for i in range(199):
        delay.update(1, i)
    assert delay.data_version.counter == 0
    delay.update(2, 7)
    assert delay.data_version.counter == 1
    delay.persist()
    written = (config_dir / "delayOffset.json").read_text()
    assert written.endswith('"offsetTable":{1:198,2:7\n\t}\n}')
    assert manager(config_dir, clock).offsets() == {1: 198, 2: 7}
    with pytest.raises(ValidationError) as info:
        delay.update(0, 1)
    assert (info.value.field, info.value.rule) == ("level", "range")
    with pytest.raises(ValidationError):
        delay.update(1, -1)


def test_clamp_into_the_queue_bounds(config_dir: Path, clock: FakeClock) -> None:
    delay = manager(config_dir, clock)
    delay.update(1, 5)
    delay.update(2, 50)
    delay.update(3, 20)
    assert delay.clamp(1, 10, 40) == 10
    assert delay.clamp(2, 10, 40) == 40
    assert delay.clamp(3, 10, 40) == 20
    assert delay.clamp(4, 10, 40) is None
    assert delay.offsets() == {1: 10, 2: 40, 3: 20}


def test_an_invalid_document_changes_nothing(config_dir: Path, clock: FakeClock) -> None:
    delay = manager(config_dir, clock)
    delay.update(1, 3)
    with pytest.raises(ValidationError) as info:
        delay.replace_from_document('{"offsetTable":{1:4,0:5}}')
    assert (info.value.field, info.value.rule) == ("offsetTable key", "range")
    with pytest.raises(ValidationError):
        delay.replace_from_document('{"offsetTable":{1:4,2:-5}}')
    assert delay.offsets() == {1: 3}
    assert not (config_dir / "delayOffset.json").exists()
    delay.replace_from_document(fixture_text("delayOffset.json"))
    assert loads_fastjson((config_dir / "delayOffset.json").read_text())["offsetTable"][18] == 2
