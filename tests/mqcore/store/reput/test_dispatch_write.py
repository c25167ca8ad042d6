"""DispatchWriter: units, index keys and listeners of a batch, in that order; the reference
writer one request at a time (the batched forms are compared with it byte for byte in
``tests/mqcore/store/test_store_fast_paths.py``)."""

from __future__ import annotations

from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.format.record import DispatchRequest
from mqcore.store import StoreConfig
from mqcore.store.reput.dispatch_write import DispatchWriter, ReferenceDispatchWriter
from mqcore.store.sharing.derived_views import DerivedViews

CONFIG = StoreConfig(consume_queue_file_entries=100, index_hash_slots=11, index_max_entries=100)
PREPARED, COMMIT = 0x4, 0x8


def request(
    i: int, *, queue_id: int = 0, queue_offset: int | None = None, sys_flag: int = 0
) -> DispatchRequest:
    return DispatchRequest(
        topic="T",
        queue_id=queue_id,
        queue_offset=i if queue_offset is None else queue_offset,
        phys_offset=100 * i,
        size=100,
        tags_code=7,
        store_timestamp=1_000 + i,
        keys=f"k{i}",
        uniq_key=f"u{i}",
        sys_flag=sys_flag,
        prepared_transaction_offset=0,
        properties={},
    )


def views_at(root: Path) -> DerivedViews:
    views = DerivedViews(root, CONFIG, FakeClock(), readonly=False)
    views.queues.load()
    views.index.load(True, 0)
    return views


def keyed(views: DerivedViews, key: str) -> list[int]:
    return list(views.index.query("T", key, 10, 0, 2**62).phys_offsets)


def test_units_are_readable_before_any_listener_runs(tmp_path: Path) -> None:
    views = views_at(tmp_path)
    ends_seen: list[int] = []
    arrivals: list[object] = []

    def listener(r: DispatchRequest) -> None:
        queue = views.queues.get("T", r.queue_id)
        assert queue is not None
        ends_seen.append(queue.max_offset)

    writer = DispatchWriter(
        views, index_enabled=True, listeners=[listener], arrivals_listeners=[arrivals.append]
    )
    writer.write_requests(
        [request(0), request(1, queue_id=1, queue_offset=0), request(2, queue_offset=1)]
    )
    assert ends_seen == [2, 1, 2]  # the whole batch was in place for the first listener
    assert arrivals == [{("T", 0): 1, ("T", 1): 0}]
    assert views.checkpoint.logics_msg_timestamp == 1_002
    assert keyed(views, "k1") == [100]


def test_a_prepared_record_gets_keys_but_no_unit(tmp_path: Path) -> None:
    views = views_at(tmp_path)
    writer = DispatchWriter(views, index_enabled=True)
    writer.write_one(request(0, sys_flag=PREPARED))
    assert views.queues.get("T", 0) is None
    writer.write_one(request(0, sys_flag=COMMIT))
    queue = views.queues.get("T", 0)
    assert queue is not None and queue.max_offset == 1


def test_no_keys_when_the_index_is_off(tmp_path: Path) -> None:
    views = views_at(tmp_path)
    writer = DispatchWriter(views, index_enabled=False)
    writer.write_requests([request(0), request(1)])
    writer.write_index(request(2))
    assert views.index.files == []
    queue = views.queues.get("T", 0)
    assert queue is not None and queue.max_offset == 2


def test_the_writer_reads_the_views_at_each_call(tmp_path: Path) -> None:
    views = views_at(tmp_path)
    writer = DispatchWriter(views, index_enabled=True)
    side = views.new_queues(readonly=False)
    side.load()
    views.queues = side  # a rebuild's side files
    writer.write_requests([request(0)])
    assert side.get("T", 0) is not None


def test_the_reference_writer_goes_one_request_at_a_time(tmp_path: Path) -> None:
    views = views_at(tmp_path)
    ends_seen: list[int] = []
    arrivals: list[object] = []

    def listener(r: DispatchRequest) -> None:
        queue = views.queues.get("T", 0)
        assert queue is not None
        ends_seen.append(queue.max_offset)

    writer = ReferenceDispatchWriter(
        views, index_enabled=True, listeners=[listener], arrivals_listeners=[arrivals.append]
    )
    writer.write_requests([request(0), request(1), request(2)])
    assert ends_seen == [1, 2, 3]
    assert arrivals == []
    assert keyed(views, "k2") == [200]
