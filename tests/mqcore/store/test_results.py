"""BatchPutResults: a plain batch's results kept as columns behave as the list of PutResults
the general path returns (``mqcore/store/results.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.format.msgid import create_offset_msg_id
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.results import BatchPutResults, PutResult, PutStatus

T0 = 1_700_000_000_000


def batch(count: int, first: int = 0) -> list[Message]:
    return [
        Message("orders", f"body-{i}".encode() * (1 + i % 3), tags="A", keys=f"k{i}")
        for i in range(first, first + count)
    ]


def expected(store: MessageStore, results: BatchPutResults) -> list[PutResult]:
    """Each result worked out from the record stored at its position."""
    out = []
    for phys in results.phys_offsets:
        ext = store.commit_log.message_at(phys)
        assert ext is not None
        out.append(
            PutResult(
                PutStatus.PUT_OK,
                "orders",
                3,
                ext.properties["UNIQ_KEY"],
                create_offset_msg_id(store.config.store_host, phys),
                phys,
                ext.queue_offset,
                T0,
                ext.store_size,
            )
        )
    return out


@pytest.fixture
def store(tmp_path: Path) -> MessageStore:
    with MessageStore(tmp_path, StoreConfig(), clock=FakeClock(T0)) as opened:
        opened.put_messages(batch(1))  # validates the topic: later batches go the plain way
        yield opened


def test_a_plain_batch_gives_columns_equal_to_the_stored_records(store: MessageStore) -> None:
    store.put_messages(batch(5), 3)
    results = store.put_batch(batch(7, 5), 3)
    assert isinstance(results, BatchPutResults)
    want = expected(store, results)
    assert [r.queue_offset for r in want] == list(range(5, 12))
    assert list(results) == want
    assert results == want and want == list(results)
    assert len(results) == 7
    assert results[0] == want[0] and results[-1] == want[-1] and results[-7] == want[0]
    assert results[2:5] == want[2:5] and results[::-2] == want[::-2]
    with pytest.raises(IndexError):
        results[7]
    with pytest.raises(IndexError):
        results[-8]
    assert results.wrote_bytes == sum(r.wrote_bytes for r in want)
    assert results.end == want[-1].phys_offset + want[-1].wrote_bytes
    assert results.msg_ids == [r.msg_id for r in want]
    assert results != want[:-1]
    assert results != [*want[:-1], PutResult(PutStatus.PUT_OK)]


def test_offset_msg_ids_are_made_on_first_use_and_one_alone_on_request(
    store: MessageStore,
) -> None:
    results = store.put_batch(batch(4), 3)
    assert isinstance(results, BatchPutResults)
    host = store.config.store_host
    want = [create_offset_msg_id(host, p) for p in results.phys_offsets]
    assert results._offset_msg_ids is None  # nothing asked for them yet
    assert results.offset_msg_id_at(2) == want[2]
    assert results._offset_msg_ids is None  # one id alone does not make the batch's
    assert results.offset_msg_ids == want
    assert results.offset_msg_id_at(3) == want[3]


def test_with_status_changes_only_the_status(store: MessageStore) -> None:
    results = store.put_batch(batch(3), 3)
    assert isinstance(results, BatchPutResults)
    timed_out = results.with_status(PutStatus.FLUSH_DISK_TIMEOUT)
    assert [r.status for r in timed_out] == [PutStatus.FLUSH_DISK_TIMEOUT] * 3
    assert [(r.msg_id, r.phys_offset) for r in timed_out] == [
        (r.msg_id, r.phys_offset) for r in results
    ]
    assert results.status is PutStatus.PUT_OK


def test_put_messages_gives_a_list_of_put_results(store: MessageStore) -> None:
    plain = store.put_messages(batch(4), 3)
    assert type(plain) is list and all(type(r) is PutResult for r in plain)
    columns = store.put_batch(batch(4, 4), 3)
    assert isinstance(columns, BatchPutResults)
    assert [r.queue_offset for r in plain + list(columns)] == list(range(8))
    assert columns.to_list() == expected(store, columns)
    single = store.put_message(Message("orders", b"one", keys="k"))
    assert isinstance(single, PutResult) and single.ok
    general = store.put_batch([Message("orders", b"p", properties={"user": "v"})])
    assert type(general) is list and general[0].ok
