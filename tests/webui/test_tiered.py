"""The console's tiered storage parts: the overview card (totals, backend, read strategy,
the queues behind) and the topic page's per-queue columns, with real figures from a
runtime uploading to a POSIX tier; and the "off" note when tiered storage is off."""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import runtime
from cairn.runtime import BrokerRuntime
from mqcore.broker import Broker, OutgoingMessage
from mqcore.store import StoreConfig
from mqcore.tiered.config import TieredConfig
from tests.api.test_tiered import upload_all
from tests.webui.conftest import client_for
from webui.bridge import bridge
from webui.templatetags.console import bytes_h

TIER = TieredConfig(initial_window_ms=None, group_commit_count=4, group_commit_timeout_ms=0)


@pytest.fixture
def tier_rt(tmp_path: Path) -> Iterator[BrokerRuntime]:
    instance = BrokerRuntime(
        store_dir=tmp_path / "store",
        services_mode="inline",
        store_config=StoreConfig(commitlog_file_size=64 * 1024, consume_queue_file_entries=64),
        tiered_backend="posix",
        tiered_path=tmp_path / "tier",
        tiered_config=TIER,
    )
    instance.start()
    runtime.install(instance)
    try:
        yield instance
    finally:
        bridge.detach()
        instance.stop()
        runtime.reset()


def text(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return html_lib.unescape(response.content.decode())


def stat(page: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}">(.*?)<', page, re.S)
    assert found, testid
    return found.group(1).strip()


def fill(broker: Broker, per_queue: tuple[int, ...]) -> None:
    broker.admin.create_topic(
        "Orders", read_queue_nums=len(per_queue), write_queue_nums=len(per_queue)
    )
    for queue_id, count in enumerate(per_queue):
        for i in range(count):
            broker.send("Orders", [OutgoingMessage(body=b"x" * 300 + b"%d" % i, queue_id=queue_id)])
    broker.store.dispatch_until_caught_up()


def test_overview_card_and_topic_columns_show_tier_progress(
    tier_rt: BrokerRuntime, viewer: Any
) -> None:
    broker = tier_rt.broker
    assert broker is not None
    fill(broker, (7, 5))
    rows = upload_all(tier_rt)
    size = sum(r["size_bytes"] for r in rows)
    assert size > 12 * 300
    client = client_for(viewer)

    page = text(client.get("/"))
    assert 'data-testid="tier-card"' in page and "Tiered storage" in page
    assert "<strong>posix</strong>" in page and "<strong>NOT_IN_DISK</strong>" in page
    assert stat(page, "tier-queues") == "2"
    assert stat(page, "tier-messages") == "12"
    assert stat(page, "tier-lag") == "0"
    assert "up to date" in page
    assert stat(page, "tier-size") == bytes_h(size)
    live = text(client.get("/?partial=live"))  # the card refreshes with the live part
    assert 'data-testid="tier-card"' in live

    topic = text(client.get("/topics/Orders/"))
    assert ">Uploaded</th>" in topic and ">In tier</th>" in topic
    assert re.findall(r'data-testid="tier-commit">(\d+)<', topic) == ["7", "5"]
    assert re.findall(r'data-testid="tier-lag">(\d+)<', topic) == ["0", "0"]
    sizes = re.findall(r'data-testid="tier-size">(.*?)<', topic)
    assert sizes == [bytes_h(r["size_bytes"]) for r in rows]

    # messages not uploaded yet show as lag, on the card and in the topic's columns (the
    # upload loop is stopped first, so they stay behind)
    (upload,) = [loop for loop in tier_rt.loops if loop.name == "tiered_upload"]
    upload.stop()
    for i in range(3):
        broker.send("Orders", [OutgoingMessage(body=b"late %d" % i, queue_id=1)])
    broker.store.dispatch_until_caught_up()
    page = text(client.get("/"))
    assert stat(page, "tier-lag") == "3" and "3 to upload" in page
    behind = re.search(r'href="/topics/Orders/">Orders</a></td>(.*?)</tr>', page, re.S)
    assert behind, "the queue behind is listed"
    assert re.findall(r">(\d+)<", behind.group(1)) == ["1", "5", "8", "3"]
    topic = text(client.get("/topics/Orders/"))
    assert re.findall(r'data-testid="tier-lag">(\d+)<', topic) == ["0", "3"]


def test_off_note_and_no_columns(rt: BrokerRuntime, broker: Broker, viewer: Any) -> None:
    broker.admin.create_topic("Orders", read_queue_nums=1, write_queue_nums=1)
    client = client_for(viewer)
    page = text(client.get("/"))
    assert "Tiered storage is off" in page and 'data-testid="tier-queues"' not in page
    topic = text(client.get("/topics/Orders/"))
    assert "tiered storage off" in topic and ">Uploaded</th>" not in topic
