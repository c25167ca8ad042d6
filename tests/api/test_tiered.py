"""Tiered storage over REST: ``GET /tiered``, the ``tier`` summary of ``/status`` and the
per-queue ``tier`` rows of the topic detail, off and on; and, once cleanup deleted the local
CommitLog segments, REST pull from offset 0 and key query served by the POSIX tier.

The runtime is the real one (``BrokerRuntime`` with ``tiered_backend="posix"``: the upload
loop, the tier lock, the TieredMessageStore as the broker's reader); cleanup is the real
cleanup step on its forced (disk over the force ratio) path.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from cairn import runtime
from cairn.runtime import BrokerRuntime
from mqcore.broker import Broker, BrokerConfig, OutgoingMessage
from mqcore.services import cleanup
from mqcore.services.cleanup import CleanupState
from mqcore.store import StoreConfig
from mqcore.tiered.config import TieredConfig
from tests.api.conftest import wait_dispatched

#: 16 KiB CommitLog files: the messages below fill several; scheduled deletion never runs;
#: forced cleanup may delete unconsumed local files (they are in the tier).
STORE = StoreConfig(
    commitlog_file_size=16 * 1024,
    consume_queue_file_entries=32,
    index_hash_slots=64,
    index_max_entries=256,
    max_message_size=64 * 1024,
    delete_when="99",
    disk_clean_forcibly_unconsumed=True,
)
#: Upload everything from offset 0, each pass.
TIER = TieredConfig(initial_window_ms=None, group_commit_count=8, group_commit_timeout_ms=0)
COUNT = 120


@pytest.fixture
def broker_runtime(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerRuntime]:
    """Overrides the conftest runtime: the tier backend is the (indirect) parameter, posix
    under ``tmp_path/tier`` by default."""
    backend = getattr(request, "param", "posix")
    rt = BrokerRuntime(
        store_dir=tmp_path / "store",
        services_mode="inline",
        store_config=STORE,
        broker_config=BrokerConfig(),
        tiered_backend=backend,
        tiered_path=tmp_path / "tier",
        tiered_config=TIER,
    )
    rt.start()
    runtime.install(rt)
    try:
        yield rt
    finally:
        rt.stop()
        runtime.reset()


def fill(broker: Broker, count: int = COUNT) -> list[OutgoingMessage]:
    broker.admin.create_topic("orders", read_queue_nums=2, write_queue_nums=2)
    sent = [
        OutgoingMessage(
            body=f"order {i} ".encode() + bytes([i % 256]) * (100 + i % 50),
            tag="paid" if i % 3 else "new",
            keys=[f"order-{i}"],
            properties={"n": str(i), "origin": "api-test"},
            queue_id=i % 2,
        )
        for i in range(count)
    ]
    for message in sent:
        broker.send("orders", [message])
    wait_dispatched(broker)
    return sent


def upload_all(rt: BrokerRuntime, queues: int = 2, timeout_s: float = 20) -> list[dict[str, Any]]:
    """Wake the runtime's own upload loop until the tier holds ``queues`` queues with lag 0
    and a pass finds nothing left to do (the key index follows the commits one pass later)."""
    (loop,) = [loop for loop in rt.loops if loop.name == "tiered_upload"]
    deadline = time.monotonic() + timeout_s
    caught_up_at: int | None = None  # the loop's run count when the lag was first 0
    while True:
        rows = rt.tier_status()
        if len(rows) == queues and all(r["lag"] == 0 for r in rows):
            if caught_up_at is None:
                caught_up_at = loop.state.runs
            # two runs later the run that committed is over, and an idle one followed
            last = loop.state.last_result or {}
            if loop.state.runs >= caught_up_at + 2 and last.get("progressed") is False:
                return rt.tier_status()
        if time.monotonic() > deadline:
            raise AssertionError(f"the tier did not catch up: {rows}")
        loop.wake()
        time.sleep(0.02)


def delete_local(rt: BrokerRuntime) -> None:
    """Every CommitLog file but the last, by the cleanup step's forced path."""
    store = rt.store
    assert store is not None and len(store.commit_log.segments.files) > 2
    state = CleanupState()
    for _ in range(50):
        result = cleanup.step(store, state, rt.clock, probe=lambda _p: 0.86, first_delay_ms=0)
        assert result.status == "ok", result
        if len(store.commit_log.segments.files) == 1:
            cleanup.step(store, state, rt.clock, probe=lambda _p: 0.1, first_delay_ms=0)
            return
    raise AssertionError("cleanup did not delete the old CommitLog files")


@pytest.mark.parametrize("broker_runtime", ["none"], indirect=True)
def test_off_reports_disabled(viewer: APIClient, broker: Broker) -> None:
    broker.admin.create_topic("orders", read_queue_nums=2, write_queue_nums=2)
    body = viewer.get("/api/v1/tiered").json()
    assert body["enabled"] is False and body["queues"] == []
    assert body["backend"] == "none" and body["read_strategy"] is None
    assert body["totals"] == {"queues": 0, "messages": 0, "lag": 0, "size_bytes": 0}
    tier = viewer.get("/api/v1/status").json()["tier"]
    assert tier["enabled"] is False and tier["queues"] == 0
    queues = viewer.get("/api/v1/topics/orders").json()["queues"]
    assert [q["tier"] for q in queues] == [None, None]


def test_status_rows_totals_and_topic_detail(
    viewer: APIClient, broker_runtime: BrokerRuntime
) -> None:
    broker = broker_runtime.broker
    assert broker is not None
    fill(broker)
    rows = upload_all(broker_runtime)
    response = viewer.get("/api/v1/tiered")
    assert response.status_code == 200
    body = response.json()
    assert body["enabled"] is True
    assert (body["backend"], body["read_strategy"]) == ("posix", "NOT_IN_DISK")
    queues = body["queues"]
    assert [(q["topic"], q["queue_id"]) for q in queues] == [("orders", 0), ("orders", 1)]
    for q in queues:
        assert q["tier_min_offset"] == 0
        assert q["commit_offset"] == q["dispatch_offset"] == q["local_max_offset"] == COUNT // 2
        assert q["lag"] == 0 and q["messages"] == COUNT // 2
        assert q["size_bytes"] > COUNT // 2 * 100  # at least the bodies
    assert {k: v for k, v in queues[0].items() if k != "messages"} == rows[0]
    totals = body["totals"]
    assert totals["queues"] == 2 and totals["messages"] == COUNT and totals["lag"] == 0
    assert totals["size_bytes"] == sum(q["size_bytes"] for q in queues)

    # the tier's files (flat files and key index) live under the POSIX root
    root = Path(str(broker_runtime.tiered_path))
    on_disk = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert on_disk >= totals["size_bytes"] > 0

    status = viewer.get("/api/v1/status").json()["tier"]
    assert status == {
        "enabled": True,
        "backend": "posix",
        "read_strategy": "NOT_IN_DISK",
        **totals,
    }
    detail = viewer.get("/api/v1/topics/orders").json()["queues"]
    assert [q["tier"] for q in detail] == queues
    only = viewer.get("/api/v1/tiered?topic=nothing-here").json()
    assert only["queues"] == [] and only["enabled"] is True


def test_lag_shows_what_is_not_uploaded(viewer: APIClient, broker_runtime: BrokerRuntime) -> None:
    broker = broker_runtime.broker
    assert broker is not None
    fill(broker, 20)
    upload_all(broker_runtime)
    (upload,) = [loop for loop in broker_runtime.loops if loop.name == "tiered_upload"]
    upload.stop()  # what is sent now stays local
    for i in range(6):
        broker.send("orders", [OutgoingMessage(body=b"late %d" % i, queue_id=0)])
    wait_dispatched(broker)
    q0, q1 = viewer.get("/api/v1/tiered?topic=orders").json()["queues"]
    assert (q0["commit_offset"], q0["local_max_offset"], q0["lag"]) == (10, 16, 6)
    assert (q1["commit_offset"], q1["local_max_offset"], q1["lag"]) == (10, 10, 0)
    assert viewer.get("/api/v1/status").json()["tier"]["lag"] == 6
    detail = viewer.get("/api/v1/topics/orders").json()["queues"]
    assert [q["tier"]["lag"] for q in detail] == [6, 0]


def test_tiered_needs_a_role(anonymous: APIClient, viewer: APIClient) -> None:
    assert anonymous.get("/api/v1/tiered").status_code in (401, 403)
    assert viewer.get("/api/v1/tiered?topic=bad%20name").status_code == 400


def test_cold_pull_and_key_query_after_local_deletion(
    viewer: APIClient, broker_runtime: BrokerRuntime
) -> None:
    rt = broker_runtime
    assert rt.broker is not None and rt.store is not None and rt.tiered is not None
    sent = fill(rt.broker)
    upload_all(rt)
    delete_local(rt)
    local_min = [rt.store.min_offset("orders", q) for q in (0, 1)]
    assert all(low > 0 for low in local_min), local_min  # offset 0 is gone from local disk
    served_by_tier = rt.tiered.stats.tier

    got: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for queue_id in (0, 1):
        offset = 0
        while offset < COUNT // 2:
            page = viewer.get(
                "/api/v1/topics/orders/messages",
                {"queue_id": queue_id, "offset": offset, "limit": 16, "body_encoding": "base64"},
            ).json()
            assert page["status"] == "FOUND", (queue_id, offset, local_min, page)
            got[queue_id] += page["messages"]
            offset = page["next_offset"]
    assert rt.tiered.stats.tier > served_by_tier  # the cold offsets came from the tier
    for queue_id in (0, 1):
        expected = sent[queue_id::2]
        messages = got[queue_id]
        assert [m["queue_offset"] for m in messages] == list(range(COUNT // 2))
        for out, message in zip(messages, expected, strict=True):
            assert base64.b64decode(out["body"]) == message.body
            assert out["keys"] == list(message.keys)
            assert out["tag"] == message.tag
            assert out["properties"] == dict(message.properties or {})

    # the key index in the tier finds a message whose local segment is gone
    first = got[0][0]
    found = viewer.get("/api/v1/topics/orders/messages", {"key": "order-0"}).json()["messages"]
    assert [(m["msg_id"], m["queue_offset"], m["archived"]) for m in found] == [
        (first["msg_id"], 0, False)
    ]
    by_id = viewer.get(f"/api/v1/messages/{first['msg_id']}")
    assert by_id.status_code == 200 and by_id.json()["queue_offset"] == 0
