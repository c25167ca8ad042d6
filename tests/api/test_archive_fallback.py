"""Key query beyond retention: messages cleanup deleted from the CommitLog come from the data
pipeline's archive, marked ``archived`` (``cairn.archive``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from cairn.runtime import BrokerRuntime
from mqcore.broker import Broker
from tests.api.conftest import send

pytestmark = pytest.mark.spark


def _delete_oldest_segment(broker: Broker) -> None:
    """What cleanup does: drop the first CommitLog segment, then its queue and index files."""
    store = broker.store
    segments = store.commit_log.segments
    first_end = segments.min_offset + segments.file_size
    assert (
        segments.delete_first_files_while(lambda f: f.base_offset + f.file_size <= first_end) == 1
    )
    low = store.commit_log.min_offset
    store.queues.clean_expired(low)
    store.index.delete_expired(low)


@pytest.fixture
def archived_store(
    broker_runtime: BrokerRuntime,
    broker: Broker,
    topic: str,
    tmp_path: Path,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """``order-1`` sent, a segment's worth of filler, ``order-1`` again; archived; then the
    first segment deleted."""
    from pipeline.jobs.archive import run_archive

    old = send(broker, topic, b"early", keys=["order-1"], tag="TagA")[0]
    send(broker, topic, *[bytes([i]) * 60_000 for i in range(5)])  # rolls the 256 KiB segment
    new = send(broker, topic, b"late", keys=["order-1"])[0]
    out = tmp_path / "pipeline"
    report = run_archive(broker_runtime.store_dir, out, spark=spark)
    assert report.messages == 7
    monkeypatch.setitem(settings.CAIRN, "ARCHIVE_DIR", out / "archive")
    _delete_oldest_segment(broker)
    live = broker.query_by_key(topic, "order-1", 0, 2**62)
    assert [m.msg_id for m in live] == [new.msg_id]
    return {"old": old, "new": new}


def test_key_query_falls_back_to_the_archive(
    viewer: Any, topic: str, archived_store: dict[str, Any]
) -> None:
    old, new = archived_store["old"], archived_store["new"]
    response = viewer.get(f"/api/v1/topics/{topic}/messages", {"key": "order-1", "begin": 0})
    assert response.status_code == 200, response.content[:500]
    messages = response.json()["messages"]
    assert [(m["msg_id"], m["archived"]) for m in messages] == [
        (old.msg_id, True),
        (new.msg_id, False),
    ]
    early = messages[0]
    assert early["body"] == "early" and early["keys"] == ["order-1"] and early["tag"] == "TagA"
    assert early["offset_msg_id"] == old.offset_msg_id
    assert early["store_timestamp"] <= messages[1]["store_timestamp"]
    assert set(early) == set(messages[1])

    # The archive is read only when the live matches do not fill the limit.
    one = viewer.get(
        f"/api/v1/topics/{topic}/messages", {"key": "order-1", "begin": 0, "limit": 1}
    ).json()["messages"]
    assert [(m["msg_id"], m["archived"]) for m in one] == [(new.msg_id, False)]


def test_key_query_without_an_archive_is_live_only(
    viewer: Any, topic: str, archived_store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(settings.CAIRN, "ARCHIVE_DIR", "/nonexistent/archive")
    messages = viewer.get(
        f"/api/v1/topics/{topic}/messages", {"key": "order-1", "begin": 0}
    ).json()["messages"]
    assert [(m["msg_id"], m["archived"]) for m in messages] == [
        (archived_store["new"].msg_id, False)
    ]


def test_console_key_search_shows_archived_badge(
    admin: Any, topic: str, archived_store: dict[str, Any]
) -> None:
    admin.force_login(admin.user)
    page = admin.get("/messages/", {"mode": "key", "key": "order-1", "begin_ms": "0"})
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="badge muted"') == 1 and ">archived</span>" in html
    assert archived_store["old"].msg_id in html and archived_store["new"].msg_id in html
