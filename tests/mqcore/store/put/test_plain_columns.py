"""Plain batches as columns (``plain_batch.PlainColumns``): ``encode_plain_columns`` and
``MessageStore.put_plain_columns`` write exactly the records, and return exactly the
results, that ``encode_plain`` and ``put_batch`` give for ``columns.to_messages()``; a
batch the columns do not take is left to the messages' path, which decides."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format.msgid import HostAddress, UniqKeyGenerator
from mqcore.message import Message
from mqcore.store import MessageStore
from mqcore.store.put.keyed_grid import key_pairs
from mqcore.store.put.plain_batch import PlainColumns, encode_plain, encode_plain_columns
from mqcore.store.put.plain_grid import MIN_GRID_RECORDS
from mqcore.store.results import BatchPutResults, PutStatus
from tests.mqcore.store.put.test_plain_batch import SMALL, T0

HOST = HostAddress("10.0.0.9", 4000)
INT64_EDGES = [0, -1, 1, (1 << 63) - 1, -(1 << 63), None]


def columns(
    bodies: list[bytes],
    keys: list[str] | None = None,
    born_timestamps: list[int | None] | None = None,
    topic: str = "T",
    born_host: HostAddress | None = HOST,
) -> PlainColumns:
    return PlainColumns(
        topic,
        bodies,
        [""] * len(bodies) if keys is None else keys,
        [T0 + i for i in range(len(bodies))] if born_timestamps is None else born_timestamps,
        born_host,
    )


def batches() -> dict[str, PlainColumns]:
    rng = random.Random(7)
    sizes = [1, 2, 100, 1500, 4096]
    n = 150  # a batch fits in one 64 KiB segment
    mixed_keys = [rng.choice(["", f"id-{i}", "ключ", "k" * 900]) for i in range(50)]
    return {
        "keyless": columns([rng.randbytes(100) for _ in range(n)]),
        "keyed": columns([b"v" * 10] * n, [f"order-{i}" for i in range(n)]),
        "mixed": columns([rng.randbytes(rng.choice(sizes[:4])) for _ in range(50)], mixed_keys),
        "one byte": columns([b"x"]),
        "large": columns([bytes(60_000)]),
        "sizes": columns([bytes(s) for s in sizes]),
        "timestamps": columns([b"t"] * len(INT64_EDGES), born_timestamps=INT64_EDGES),
        "default host": columns([b"h"] * 3, born_host=None),
        "ipv6 host": columns([b"h"] * 3, born_host=HostAddress("2001:db8::17", 1)),
        "long keys": columns([b"x"] * 2, ["a" * 2000, ""]),  # past the columns' table
        "separator key": columns([b"x"] * 2, ["", "a\x02b"]),
        "key with a space": columns([b"x"] * 2, ["a b", "c"]),
        "empty body": columns([b"x", b""]),
        "bytearray body": columns([b"x", bytearray(b"y")]),  # type: ignore[list-item]
        "oversized body": columns([b"x", bytes(SMALL.max_message_size + 1)]),
        "timestamp past int64": columns([b"x"] * 2, born_timestamps=[T0, 1 << 63]),
        "topic not encodable": columns([b"x"], topic="\ud800"),
        "host not an address": columns([b"x"], born_host=HostAddress("host.example", 1)),
    } | grid_batches(rng)


def grid_batches(rng: random.Random) -> dict[str, PlainColumns]:
    """Batches of at least ``MIN_GRID_RECORDS`` (``plain_grid.py``'s path) and their
    near misses, which take the list path or the messages'."""
    n = MIN_GRID_RECORDS + 6
    bodies = [rng.randbytes(rng.choice([1, 2, 90, 300])) for _ in range(n)]
    one_length = [f"order-{i:04d}" for i in range(n)]
    near = {
        "grid keyless sizes": columns(bodies),
        "grid keyed": columns(bodies, one_length),
        "grid keyed ipv6": columns(bodies, one_length, born_host=HostAddress("2001:db8::5", 9)),
        "grid timestamps": columns(
            [b"t"] * n, born_timestamps=(INT64_EDGES * n)[:n], born_host=None
        ),
        "grid long topic": columns(bodies[:n], topic="t" * 200),  # V2: two-byte TOPICLENGTH
        "grid one-length text keys": columns(bodies, ["ключ"] * n),  # not ASCII: the list
        "grid keys and none": columns(bodies, one_length[:-1] + [""]),
        "grid keys of two lengths": columns(bodies, one_length[:-1] + ["k"]),
        "grid separator key": columns(bodies, one_length[:-1] + ["order\x02001"]),
        "grid oversized body": columns(bodies[:-1] + [bytes(SMALL.max_message_size + 1)]),
        "grid empty body": columns(bodies[:-1] + [b""]),
        "grid timestamp past int64": columns(bodies, born_timestamps=[T0] * (n - 1) + [1 << 63]),
    }
    return near | keyed_grid_batches(rng, bodies)


# PROPERTIESLENGTH of a key of n characters with _encode's 32-character UNIQ_KEY:
# KEYS\x01 key \x02 UNIQ_KEY\x01 id \x02; the columns' length table ends at 1024.
KEY_FOR_1023 = 1023 - len("KEYS\x01\x02UNIQ_KEY\x01\x02") - 32


def keyed_grid_batches(rng: random.Random, bodies: list[bytes]) -> dict[str, PlainColumns]:
    """Batches of keys of several lengths (``keyed_grid.py``'s path) and their near misses."""
    n = len(bodies)
    ascii_text = "".join(map(chr, range(1, 128))).replace("\x02", "")  # \x01 and space too
    varied = ["".join(rng.choices(ascii_text, k=rng.randint(1, 300))) for _ in range(n)]
    counted = [f"order-{i}" for i in range(95, 95 + n)]  # 2 and 3 digits
    at_edge = [rng.choice(["k", "k" * 255, "k" * 256, "k" * KEY_FOR_1023]) for _ in range(n)]
    v6 = HostAddress("2001:db8::5", 9)
    return {
        "keyed grid varied": columns(bodies, varied),
        "keyed grid counted": columns(bodies, counted),
        "keyed grid known pairs": PlainColumns(  # as the Kafka decoder gives them
            "T", bodies, counted, [T0] * n, HOST, key_pairs(counted)
        ),
        "keyed grid ipv6": columns(bodies, counted, born_host=v6),
        "keyed grid long topic": columns(bodies, varied, topic="t" * 200),  # V2
        "keyed grid timestamps": columns(
            [b"t"] * n, varied, born_timestamps=(INT64_EDGES * n)[:n], born_host=None
        ),
        "keyed grid at the table's edge": columns(bodies, at_edge),  # PROPERTIESLENGTH 1023
        "keyed grid past the table": columns(bodies, at_edge[:-1] + ["k" * (KEY_FOR_1023 + 1)]),
        "keyed grid one not ascii": columns(bodies, counted[:-1] + ["ключ"]),
        "keyed grid separator key": columns(bodies, counted[:-1] + ["order\x02001"]),
        "keyed grid keys and none": columns(bodies, [""] + counted[1:]),
        "keyed grid empty body": columns(bodies[:-1] + [b""], counted),
    }


BATCHES = batches()
GRID_TAKEN = {"grid keyless sizes", "grid keyed", "grid keyed ipv6", "grid timestamps", "grid long topic", "keyless"} | {
    "keyed", "grid keys of two lengths", "keyed grid varied", "keyed grid counted",
    "keyed grid known pairs",
    "keyed grid ipv6", "keyed grid long topic", "keyed grid timestamps",
    "keyed grid at the table's edge",
}  # fmt: skip


def _encode(encoder: object, batch: object, phys_offset: int) -> object:
    args = (7, "AC1100010000ABCDEF0123456789", 0xFFF0, T0 + 5, SMALL.max_message_size)
    hosts = (HostAddress("127.0.0.1", 0), HostAddress("10.0.0.1", 10911))
    try:
        return encoder(batch, *args, *hosts, phys_offset, 42, T0)  # type: ignore[operator]
    except MessageIllegalError as exc:
        return ("raised", exc.field, exc.rule)


@pytest.mark.parametrize("name", list(BATCHES))
@pytest.mark.parametrize("phys_offset", [0, 3 * 1024 * 1024 * 1024])
def test_the_columns_encode_as_their_messages(name: str, phys_offset: int) -> None:
    batch = BATCHES[name]
    expected = _encode(encode_plain, batch.to_messages(), phys_offset)
    got = _encode(encode_plain_columns, batch, phys_offset)
    assert _records(got) == _records(expected)
    if isinstance(got, tuple) and len(got) == 4:  # encoded: the parts and results too
        parts, results, total, next_queue_offset = got
        # The grid cuts a record into two parts (header + previous tail, body), the list
        # path into five: which path ran.
        assert (len(parts) == 2 * len(batch) + 1) == (name in GRID_TAKEN)
        assert list(results) == list(expected[1])  # type: ignore[index]
        assert results.end == phys_offset + total
        assert next_queue_offset == 42 + len(batch)


def _records(encoded: object) -> object:
    """An encoder's answer with its parts joined (the encoders cut them differently)."""
    if isinstance(encoded, tuple) and len(encoded) == 4:
        parts, results, total, next_queue_offset = encoded
        return b"".join(parts), results, total, next_queue_offset
    return encoded


def test_which_batches_the_encoders_refuse() -> None:
    refused = {n for n, b in BATCHES.items() if _encode(encode_plain_columns, b, 0) is None}
    assert refused == {
        "separator key",
        "empty body",
        "bytearray body",
        "oversized body",
        "topic not encodable",
        "host not an address",
        "grid separator key",
        "grid oversized body",
        "grid empty body",
        "keyed grid separator key",
        "keyed grid empty body",
    }
    for name in ("timestamp past int64", "grid timestamp past int64"):
        raised = _encode(encode_plain_columns, BATCHES[name], 0)
        assert raised == ("raised", "record", "field_range")


@pytest.mark.parametrize(
    "name", ["grid keyless sizes", "grid keyed", "grid keyed ipv6", "keyed grid ipv6"]
)
def test_the_grid_encodes_as_the_messages_with_an_ipv6_store_host(name: str) -> None:
    batch = BATCHES[name]
    args = (3, "AC1100010000ABCDEF0123456789", 5, T0 + 5, SMALL.max_message_size)
    hosts = (HostAddress("127.0.0.1", 0), HostAddress("2001:db8::1", 10911))
    expected = encode_plain(batch.to_messages(), *args, *hosts, 1000, 7, T0)
    got = encode_plain_columns(batch, *args, *hosts, 1000, 7, T0)
    assert _records(got) == _records(expected)
    assert got is not None and len(got[0]) == 2 * len(batch) + 1


def _twin_stores(tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    stores = []
    for name in ("messages", "columns"):
        uniq = UniqKeyGenerator(ip="10.0.0.1", pid=1, clock=FakeClock(T0))
        store = MessageStore(tmp_path / name, SMALL, clock=FakeClock(T0), uniq=uniq).open()
        store.put_message(Message("T", b"first"))
        stores.append(store)
    return stores[0], stores[1]


def _commit_log(store: MessageStore) -> bytes:
    """The CommitLog's bytes, segment by segment (blank records included)."""
    end, size = store.commit_log.max_offset, SMALL.commitlog_file_size
    out = b""
    for base in range(0, end, size):
        raw = store.commit_log.read(base, min(size, end - base))
        assert raw is not None
        out += raw
    return out


def _outcome(put: Callable[[], object]) -> object:
    try:
        return put()
    except (MessageIllegalError, ValidationError) as exc:
        return ("raised", exc.rule)


def test_put_plain_columns_writes_what_put_batch_writes(tmp_path: Path) -> None:
    by_messages, by_columns = _twin_stores(tmp_path)
    with by_messages, by_columns:
        rolled = 0
        taken: set[str] = set()
        for name, batch in BATCHES.items():
            for queue_id in (0, 1):
                if name == "large" and queue_id:
                    continue  # keep the segments few
                expected = _outcome(partial(by_messages.put_batch, batch.to_messages(), queue_id))
                got = _outcome(partial(by_columns.put_plain_columns, batch, queue_id))
                assert got == expected, name  # results (columns or a list) or the error
                if isinstance(expected, BatchPutResults):
                    assert isinstance(got, BatchPutResults), name
                    assert got.to_list() == expected.to_list(), name
                    assert got.end == by_columns.commit_log.max_offset
                    rolled += got[0].phys_offset % SMALL.commitlog_file_size == 0
                    taken.add(name)
                assert _commit_log(by_columns) == _commit_log(by_messages), name
        assert taken == set(BATCHES) - {
            "separator key", "empty body", "bytearray body", "oversized body",
            "timestamp past int64", "topic not encodable", "host not an address",
            "grid separator key", "grid oversized body", "grid empty body",
            "grid timestamp past int64", "grid long topic", "keyed grid separator key",
            "keyed grid empty body", "keyed grid long topic",
        }  # fmt: skip
        assert rolled >= 1  # at least one batch went to the next segment after a blank
        assert by_columns.commit_log.max_offset > 2 * SMALL.commitlog_file_size


def test_a_refused_batch_writes_nothing(tmp_path: Path) -> None:
    by_messages, by_columns = _twin_stores(tmp_path)
    with by_messages, by_columns:
        end = by_columns.commit_log.max_offset
        huge = columns([bytes(40_000), bytes(40_000)])  # more than a segment holds
        with pytest.raises(MessageIllegalError) as info:
            by_columns.put_plain_columns(huge, 0)
        assert info.value.rule == "max_batch_bytes"
        with pytest.raises(MessageIllegalError):
            by_messages.put_batch(huge.to_messages(), 0)
        assert by_columns.commit_log.max_offset == end
        assert _commit_log(by_columns) == _commit_log(by_messages)


def test_an_unwritable_store_refuses_columns_as_put_batch_does(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        assert store.put_plain_columns(columns([]), 0) == []
        store.set_writable(False, "test")
        (refused,) = store.put_plain_columns(columns([b"x"]), 0)
        assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert store.commit_log.max_offset == 0


def test_a_new_topics_first_batch_takes_the_plain_path(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, clock=FakeClock(T0)) as store:
        assert isinstance(store.put_plain_columns(columns([b"x"] * 3, topic="Fresh"), 0), BatchPutResults)  # fmt: skip
        assert isinstance(store.put_batch([Message("Other", b"x")], 0), BatchPutResults)
        with pytest.raises(ValidationError) as info:  # the general path's error, as before
            store.put_plain_columns(columns([b"x"], topic="not a topic!"), 0)
        assert info.value.rule == "characters"
