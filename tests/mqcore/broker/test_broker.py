"""Broker lifecycle, names and status (administration: ``test_admin.py``)."""

from __future__ import annotations

import pytest

from mqcore.broker import Broker, OutgoingMessage
from mqcore.clock import FakeClock
from tests.mqcore.broker.conftest import BrokerFactory


def test_status(broker: Broker, clock: FakeClock) -> None:
    for _ in range(6):
        broker.send("Orders", [OutgoingMessage(b"x" * 10)])
        clock.advance(1_000)
    broker.pull("g", "Orders", 0, 0)
    status = broker.status({"reput": {"runs": 3}})
    assert status.started and status.broker_name == "broker-a"
    assert status.cluster_name == "DefaultCluster"
    assert status.put_total == 6 and status.get_total == 2
    assert status.put_tps == pytest.approx(6 / 60)
    assert status.commitlog_max_offset > 0 and status.dispatch_behind_bytes == 0
    assert status.store_size_bytes > 0 and 0 < status.disk_used_ratio < 1
    # What the files take on disk (blocks reserved ahead of the writes included), not their
    # apparent size: a young segment is sparse past its reserved part.
    files = [p.stat() for p in broker.store.root.rglob("*") if p.is_file()]
    assert status.store_size_bytes == sum(st.st_blocks * 512 for st in files)
    assert status.services == {"reput": {"runs": 3}}
    assert status.uptime_ms == 6_000


def test_broker_name_from_config(make_broker: BrokerFactory) -> None:
    broker = make_broker(broker_name="broker-b")
    assert broker.broker_name == "broker-b"
    assert broker.admin.get_topic("broker-b").kind == "system"
    (result,) = broker.send("TBW102", [OutgoingMessage(b"x")])
    assert result.broker_name == "broker-b"


def test_start_and_stop_are_idempotent(broker: Broker) -> None:
    broker.start()
    broker.stop()
    broker.stop()
    assert not broker.started
    broker.start()
    assert broker.send("Orders", [OutgoingMessage(b"x")])
