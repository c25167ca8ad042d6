"""Fixtures: a started Broker over a real MessageStore + Metadata in tmp_path, small segments,
a FakeClock, and inline dispatch so that a pull right after a send sees the message."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mqcore.broker import Broker, BrokerConfig
from mqcore.clock import FakeClock
from mqcore.store.config import StoreConfig

NOW_MS = 1_700_000_000_000

SMALL_STORE = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=32,
    index_hash_slots=64,
    index_max_entries=256,
)
#: SMALL_STORE with bodies of at most 100 bytes: the tests of the body-size rules.
SMALL_BODIES_STORE = dataclasses.replace(SMALL_STORE, max_message_size=100)

BrokerFactory = Callable[..., Broker]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture
def make_broker(tmp_path: Path, clock: FakeClock) -> Iterator[BrokerFactory]:
    """Build (and close at the end) a broker; keyword args go to BrokerConfig, except
    ``store_config`` and ``metadata_options``."""
    opened: list[Broker] = []

    def make(
        *,
        store_config: StoreConfig = SMALL_STORE,
        metadata_options: dict[str, Any] | None = None,
        **config: Any,
    ) -> Broker:
        config.setdefault("dispatch_on_send", True)
        broker = Broker.open(
            tmp_path / "store",
            store_config,
            config=BrokerConfig(**config),
            clock=clock,
            **(metadata_options or {}),
        )
        opened.append(broker)
        return broker

    yield make
    for broker in opened:
        broker.close()


@pytest.fixture
def broker(make_broker: BrokerFactory) -> Broker:
    broker = make_broker()
    broker.admin.create_topic("Orders", read_queue_nums=4)
    return broker
