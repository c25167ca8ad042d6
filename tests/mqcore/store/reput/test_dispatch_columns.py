"""Reput's column walk (``dispatch_scan.scan_columns`` / ``dispatch_columns``) gives exactly
the rows of the one-record-at-a-time walk (``iter_dispatch``), on long runs of the usual
records broken by every kind of record off the column path, and the batch properties parse
(``_properties_of_run``) decodes every run as ``_properties_of`` decodes each record."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mqcore.clock import FakeClock
from mqcore.format.msgid import HostAddress
from mqcore.format.record import DispatchRequest
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.commit_log import CommitLog
from mqcore.store.reput.dispatch_scan import (
    _BLANK,
    _HEADER_DTYPE,
    Columns,
    DispatchRow,
    Row,
    _properties_of,
    _properties_of_run,
    _Run,
    _scan_records,
    dispatch_columns,
    scan_columns,
)
from mqcore.store.reput.key_column import FixedKeys, RaggedKeys

T0 = 1_700_000_000_000
CONFIG = StoreConfig(commitlog_file_size=1024 * 1024)
USUAL = ("orders", "payments", "orders-eu")  # two topic lengths, interleaved in stretches


def assert_walks_as_requests(log: CommitLog, end: int, budget: int) -> None:
    """``dispatch_columns`` in reput's steps of ``budget`` bytes, each from wherever the
    last one stopped, gives the rows and stops where ``walk_requests`` does."""
    start = 0
    while True:
        columns, reached = dispatch_columns(log, start, end, budget, log.delay_levels_ms)
        rows, expected = walk_requests(log, start, end, budget)
        assert [DispatchRow(*row) for row in columns.rows()] == rows
        assert reached == expected
        if reached in (start, end):
            break
        start = reached


def walk_requests(
    log: CommitLog, start: int, end: int, budget: int
) -> tuple[list[DispatchRow], int]:
    rows: list[DispatchRow] = []
    for item in log.iter_dispatch(start, end, budget, log.delay_levels_ms):
        if isinstance(item, int):
            return rows, item
        assert isinstance(item, DispatchRequest)
        rows.append(
            DispatchRow(
                item.topic,
                item.queue_id,
                item.queue_offset,
                item.phys_offset,
                item.size,
                item.tags_code,
                item.store_timestamp,
                item.keys,
                item.uniq_key,
                item.sys_flag,
            )  # fmt: skip
        )
    raise AssertionError("iter_dispatch ends with an int")


def odd_message(rng: random.Random, i: int) -> Message:
    """A record off the column path, or one whose properties the batch parse refuses."""
    kind = rng.randrange(7)
    if kind == 0:
        return Message("orders", b"v6", keys=f"k{i}", born_host=HostAddress("2001:db8::5", 2))
    if kind == 1:
        return Message("SCHEDULE_TOPIC_XXXX", b"s", tags="A", properties={"DELAY": "2"})
    if kind == 2:
        return Message("orders", b"u", tags="A", keys=f"k{i}", properties={"x": "y"})
    if kind == 3:
        return Message("orders", b"n", keys=f"k{i}")  # no TAGS
    if kind == 4:
        return Message("orders", b"t", tags="a\x01b", keys=f"k{i}")  # \x01 in a value
    if kind == 5:
        return Message("orders", b"m", tags="Tág", keys=[f"ключ{i}", "b"])  # UTF-8, 2 keys
    return Message("%RETRY%" + "g" * 150, b"v2", tags="A", keys=f"k{i}")  # a V2 topic


def fill(store: MessageStore, count: int, odd_every: int, seed: int) -> None:
    rng = random.Random(seed)
    topic = USUAL[0]
    for i in range(count):
        if rng.random() < 0.02:
            topic = rng.choice(USUAL)
        if odd_every and rng.randrange(odd_every) == 0:
            message = odd_message(rng, i)
        else:
            message = Message(
                topic,
                rng.randbytes(rng.choice([1, 60, 300])),
                tags=rng.choice(["TagA", "TagBB"]),
                keys=f"ORDER-{i:08d}",
                born_timestamp=T0 + i,
                born_host=HostAddress("10.0.0.1", 1),
                sys_flag=rng.choice([0, 0, 0, 0x4, 0x8, 0xC]),
            )
        store.put_message(message, queue_id=rng.randrange(2))


@pytest.mark.parametrize(("odd_every", "seed"), [(0, 1), (700, 2), (40, 3), (3, 4)])
def test_columns_walk_the_log_as_iter_dispatch_does(
    tmp_path: Path, odd_every: int, seed: int
) -> None:
    with MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)) as store:
        store.add_listener(lambda r: None)  # keep reput away while filling
        fill(store, 3000, odd_every, seed)
        log = store.commit_log
        end = log.max_offset
        rng = random.Random(seed)
        for budget in [1 << 30, 4096, 100_000] + [rng.randrange(1, 400_000) for _ in range(6)]:
            assert_walks_as_requests(log, end, budget)


def test_columns_stop_where_the_record_walk_stops(tmp_path: Path) -> None:
    """A torn tail (bytes of a record not all there) and a limit inside a record."""
    with MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)) as store:
        store.add_listener(lambda r: None)
        fill(store, 600, 0, 7)
        log = store.commit_log
        segment = log.segments.find(0)
        assert segment is not None
        buf = bytes(segment.buffer[: log.max_offset])
        for limit in (len(buf), len(buf) - 1, len(buf) // 2, 1000, 90):
            out = Columns()
            reached = scan_columns(buf, 0, limit, limit, log.delay_levels_ms, out)
            rows, expected = walk_requests(log, 0, limit, 1 << 30)
            assert [DispatchRow(*row) for row in out.rows()] == rows
            assert reached == (expected, False)


def canonical(tags: str, keys: str, uniq: str) -> bytes:
    return f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}\x02".encode()


ODD_PROPERTIES = [
    b"",
    b"TAGS\x01a\x02KEYS\x01b\x02UNIQ_KEY\x01c",  # no trailing separator
    b"TAGS\x01a\x02KEYS\x01b\x02",  # two pairs
    b"TAGS\x01a\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02x\x01y\x02",  # four
    b"KEYS\x01b\x02TAGS\x01a\x02UNIQ_KEY\x01c\x02",  # another order
    b"TAGS\x01\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # an empty value
    b"TAGS\x01a\x01z\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # \x01 in a value
    b"TAGS\x01\xff\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # not UTF-8
    b"TAGS\x01\xe2\x82\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # a cut UTF-8 sequence
    b"\x02TAGS\x01a\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # a leading empty segment
    b"TAGS\x01a\x02\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # an empty segment inside
    b"TAGZ\x01a\x02KEYS\x01b\x02UNIQ_KEY\x01c\x02",  # another name
    canonical("Tág", "ключ", "u"),  # valid UTF-8, not ASCII
]


@pytest.mark.parametrize("seed", range(40))
def test_run_parse_matches_the_per_record_parse(seed: int) -> None:
    rng = random.Random(seed)
    run = [canonical(f"T{i % 3}", f"k-{i}", f"U{i:032d}") for i in range(rng.randrange(1, 60))]
    for _ in range(rng.randrange(3)):  # some runs stay all canonical
        run.insert(rng.randrange(len(run) + 1), rng.choice(ODD_PROPERTIES))
    if rng.random() < 0.3:  # records whose bytes only line up once joined
        cut = rng.randrange(1, len(run[0]))
        run[0:1] = [run[0][:cut], run[0][cut:]]
    tags, keys, uniq_keys = _properties_of_run(run)
    expected = [_properties_of(raw) for raw in run]
    assert list(zip(tags, keys, uniq_keys, strict=True)) == expected


def layout_record(names: tuple[str, ...], i: int) -> bytes:
    values = {"TAGS": f"T{i % 3}", "KEYS": f"k-{i}", "UNIQ_KEY": f"U{i:032d}"}
    return "".join(f"{name}\x01{values[name]}\x02" for name in names).encode()


LAYOUTS = (("TAGS", "KEYS", "UNIQ_KEY"), ("KEYS", "UNIQ_KEY"), ("TAGS", "UNIQ_KEY"), ("UNIQ_KEY",))


@pytest.mark.parametrize("seed", range(40))
def test_run_parse_of_every_layout_matches_the_per_record_parse(seed: int) -> None:
    """Runs of one of Cairn's four layouts (a keyless Kafka record: UNIQ_KEY alone; a keyed
    one: KEYS, UNIQ_KEY) parse in one pass; runs mixing layouts, or with an odd record,
    parse record by record; both as each record's own parse."""
    rng = random.Random(seed)
    names = rng.choice(LAYOUTS)
    run = [layout_record(names, i) for i in range(rng.randrange(1, 60))]
    uniform = rng.random() < 0.5
    if not uniform:
        for _ in range(rng.randrange(1, 3)):
            odd = rng.choice([layout_record(rng.choice(LAYOUTS), 7), *ODD_PROPERTIES])
            run.insert(rng.randrange(len(run) + 1), odd)
    columns = _properties_of_run(run)
    expected = [_properties_of(raw) for raw in run]
    assert list(zip(*columns, strict=True)) == expected
    if uniform:  # the one-pass parse took it (record by record gives tuples)
        assert all(isinstance(column, list) for column in columns)


def test_run_parse_finds_records_that_only_line_up_once_joined() -> None:
    """Joined on \x02, these two records read as two canonical records, but the first ends
    inside its TAGS pair: each record's own parse must win."""
    run = [b"TAGS\x01a", b"KEYS\x01b\x02UNIQ_KEY\x01c\x02\x02" + canonical("d", "e", "f")]
    assert list(zip(*_properties_of_run(run), strict=True)) == [
        ("a", None, None),
        ("d", "e", "f"),
    ]
    assert [_properties_of(raw) for raw in run] == [("a", None, None), ("d", "e", "f")]


# --- runs of one record size (the guessed stride walk, properties joined with numpy) ---------

#: Properties of one length in every shape of a stretch: the usual layout, a \x01 inside TAGS'
#: value, and one more pair (both refused by the joined parse, so parsed record by record).
SHAPES = (
    {"tags": "TagA"},
    {"tags": "T\x01gA"},
    {"tags": "TagA", "properties": {"x": "y"}},
)
#: Two topics of one length: told apart by their bytes.
STRETCH_TOPICS = (*USUAL, "orders-us")


def fill_stretches(store: MessageStore, count: int, odd_every: int, seed: int) -> None:
    """Stretches of records of one size and one properties length (a producer's messages),
    each of its own size, topic and shape; some records off the column path in between."""
    rng = random.Random(seed)
    i = 0
    while i < count:
        topic = rng.choice(STRETCH_TOPICS)
        body = rng.randbytes(rng.choice([1, 60, 300]))
        shape = rng.choice(SHAPES) if rng.random() < 0.3 else SHAPES[0]
        sys_flag = rng.choice([0, 0, 0, 0x8])
        for _ in range(rng.choice([1, 5, 40, 700, 1500])):
            if odd_every and rng.randrange(odd_every) == 0:
                message = odd_message(rng, i)
            else:
                message = Message(
                    topic,
                    body,
                    keys=f"ORDER-{i % 10**8:08d}",
                    born_timestamp=T0 + i,
                    born_host=HostAddress("10.0.0.1", 1),
                    sys_flag=sys_flag,
                    **shape,
                )
            store.put_message(message, queue_id=rng.randrange(2))
            i += 1


@pytest.mark.parametrize(("odd_every", "seed"), [(0, 11), (0, 12), (900, 13), (60, 14)])
def test_stretches_of_one_size_walk_as_iter_dispatch_does(
    tmp_path: Path, odd_every: int, seed: int
) -> None:
    with MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)) as store:
        store.add_listener(lambda r: None)  # keep reput away while filling
        fill_stretches(store, 6000, odd_every, seed)
        log = store.commit_log
        end = log.max_offset
        assert len(log.segments.files) > 1  # stretches cross segment ends too
        rng = random.Random(seed)
        for budget in [1 << 30, 50_000] + [rng.randrange(1, 400_000) for _ in range(4)]:
            assert_walks_as_requests(log, end, budget)


@pytest.mark.parametrize("key_format", ["K{:06d}", "K{}"])
def test_one_size_stretch_cut_by_the_limit_anywhere(tmp_path: Path, key_format: str) -> None:
    """The guessed stride never walks past ``stop`` or ``limit``, wherever they fall: the
    columns end where the record-at-a-time walk ends. ``K{}``: stretches of 10, 90, 900
    and 200 records of four sizes, each guessed in turn."""
    with MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)) as store:
        store.add_listener(lambda r: None)
        for i in range(1200):
            keys = key_format.format(i)
            store.put_message(Message("orders", b"x" * 40, tags="TagA", keys=keys))
        log = store.commit_log
        segment = log.segments.find(0)
        assert segment is not None
        buf = bytes(segment.buffer[: log.max_offset])
        size = int.from_bytes(buf[:4], "big")
        rng = random.Random(5)
        cuts = [len(buf), len(buf) - 1, size * 512, size * 512 + 1, size * 513 - 1, 90, 91]
        for limit in cuts + [rng.randrange(len(buf)) for _ in range(30)]:
            for stop in (limit, limit // 2, max(limit - size, 0)):
                out = Columns()
                reached = scan_columns(buf, 0, stop, limit, log.delay_levels_ms, out)
                rows: list[Row] = []
                pos, ended = _scan_records(buf, 0, stop, limit, log.delay_levels_ms, rows, 1 << 20)
                assert reached == (pos, ended == _BLANK)
                assert out.rows() == rows


def joined(
    properties: list[bytes],
) -> tuple[Sequence[str | None], Sequence[str | None], Sequence[str | None]] | None:
    """``_Run.joined_properties`` of records made of these PROPERTIES bytes only."""
    window = np.frombuffer(b"".join(properties), np.uint8)
    ends = np.cumsum([len(raw) for raw in properties], dtype=np.int64)
    run = _Run(window, np.zeros(len(properties), _HEADER_DTYPE), ends)
    run.properties_pos = ends - np.array([len(raw) for raw in properties], np.int64)
    return run.joined_properties()


def test_joined_properties_of_one_length() -> None:
    usual = [canonical("TagA", f"K{i:04d}", f"U{i:032d}") for i in range(9)]
    columns = joined(usual)
    assert columns is not None
    assert list(zip(*columns, strict=True)) == [_properties_of(raw) for raw in usual]
    assert joined([usual[0], usual[1][:-1] + b"x"]) is None  # not the usual layout
    assert joined([usual[0], usual[1] + b"x"]) is None  # not one length
    # Joined, these two read as two usual records, but the first ends inside its TAGS pair.
    second = b"KEYS\x01b\x02UNIQ_KEY\x01c\x02\x02" + canonical("d", "e", "f")
    first = b"TAGS\x01" + b"a" * (len(second) - 5)
    assert joined([first, second]) is None


def keyless(uniq: str) -> bytes:
    return f"UNIQ_KEY\x01{uniq}\x02".encode()


def test_joined_properties_of_a_keyless_run() -> None:
    """A keyless run (UNIQ_KEY alone, one width) is read as one fixed-width column; runs
    that only look like one parse as the text pass or record by record would."""
    usual = [keyless(f"C0A8000100002A9F{i:016X}") for i in range(50)]
    columns = joined(usual)
    assert columns is not None
    assert isinstance(columns[2], FixedKeys)
    assert list(zip(*columns, strict=True)) == [_properties_of(raw) for raw in usual]
    odd_ones = [
        b"UNIQ_KEY\x01" + b"\x01" * 32 + b"\x02",  # \x01 in the value
        b"UNIQ_KEY\x01" + b"a" * 15 + b"\x02" + b"b" * 16 + b"\x02",  # \x02 in the value
        b"UNIQ_KEY\x01" + "é".encode() * 16 + b"\x02",  # not ASCII
        b"UNIQ_KEY\x01" + b"\xff" * 32 + b"\x02",  # not UTF-8
        b"UNIQ_KEY\x01" + b"a" * 33,  # no trailing separator
        b"UNIQ_KEY\x02" + b"a" * 32 + b"\x02",  # no \x01
    ]
    for odd in odd_ones:
        assert len(odd) == len(usual[0])
        run = [*usual[:20], odd, *usual[20:]]
        columns = joined(run)
        if columns is not None:  # the text pass took it
            assert not isinstance(columns[2], FixedKeys)
            assert list(zip(*columns, strict=True)) == [_properties_of(raw) for raw in run]
        assert list(zip(*_properties_of_run(run), strict=True)) == [
            _properties_of(raw) for raw in run
        ]
    empty = [b"UNIQ_KEY\x01\x02"] * 3  # empty values: never a fixed-width column
    columns = joined(empty)
    assert columns is None or not isinstance(columns[2], FixedKeys)


def keyed(keys: str, uniq: str, tags: str | None = None) -> bytes:
    text = f"KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}\x02"
    return (text if tags is None else f"TAGS\x01{tags}\x02{text}").encode()


@pytest.mark.parametrize("tagged", [False, True])
@pytest.mark.parametrize("key_format", ["order-{}", "order-{:06d}"])
def test_joined_properties_of_a_keyed_run(tagged: bool, key_format: str) -> None:
    """A keyed run (``[TAGS] KEYS UNIQ_KEY``, UNIQ_KEYs of one width) is read as byte
    columns (``keyed_properties.py``): KEYS of one length as a ``FixedKeys``, of several as
    a ``RaggedKeys``. A run with any record the byte columns cannot take (non-ASCII, a
    space, a separator in a value, an empty value, another layout or UNIQ_KEY width, no
    trailing separator) parses as the text pass or record by record would."""
    tags = ["TagA", "TagBB", "T"] if tagged else [None]
    usual = [
        keyed(key_format.format(i * 37), f"C0A8000100002A9F{i:016X}", tags[i % len(tags)])
        for i in range(60)
    ]
    columns = joined(usual)
    assert columns is not None
    kind = FixedKeys if key_format.endswith("d}") else RaggedKeys
    assert isinstance(columns[1], kind)
    assert isinstance(columns[2], FixedKeys)
    assert list(zip(*columns, strict=True)) == [_properties_of(raw) for raw in usual]
    uniq = "C0A8000100002A9F" + "F" * 16
    tag = tags[0]
    odd_ones = [
        keyed("ключ", uniq, tag),  # not ASCII
        keyed("a b", uniq, tag),  # two keys
        keyed(" a", uniq, tag),  # an empty key, then one
        keyed("a\x01b", uniq, tag),  # \x01 in the value: the text path keeps it
        keyed("a", uniq + "\x01", tag),
        keyed("", uniq, tag),  # empty KEYS
        keyed("a", "", tag),  # empty UNIQ_KEY
        keyed("a", uniq + "0", tag),  # another UNIQ_KEY width
        keyed("a", uniq, "TagA" if tag is None else None),  # the other layout
        keyed("a", uniq, tag)[:-1] + b"0",  # no trailing separator
        keyed("a", uniq, tag).replace(b"KEYS", b"KEYX"),
        keyed("a", uniq, tag).replace(b"UNIQ_KEY", b"UNIQ_KEX"),
        keyed("a", uniq, tag) + keyed("b", uniq),  # a pair twice: the last wins
        keyless(uniq),
        b"\xff" + keyed("a", uniq, tag),  # not UTF-8
    ]
    if tag is not None:
        odd_ones.append(keyed("a", uniq, "x y"))  # a space in TAGS only: still one key
    for odd in odd_ones:
        for at in (0, 17, len(usual)):
            run = [*usual[:at], odd, *usual[at:]]
            columns = joined(run)
            expected = [_properties_of(raw) for raw in run]
            if columns is not None:
                assert list(zip(*columns, strict=True)) == expected, odd
            assert list(zip(*_properties_of_run(run), strict=True)) == expected


def test_columns_merge_and_slice_as_rows() -> None:
    """Parts of a batch (framed runs, records walked one by one, keyless grids and key
    lists) concatenate, and slices of the whole keep each record's fields."""
    rng = random.Random(9)
    out = Columns()
    rows: list[Row] = []
    for part in range(12):
        count = rng.choice([1, 5, 40])
        topic = rng.choice(["a", "b"])
        part_rows: list[Row] = [
            (topic, rng.randrange(3), len(rows) + k, 1000 * (len(rows) + k), 90, 0, T0,
             None, f"U{len(rows) + k:031d}", 0)
            for k in range(count)
        ]  # fmt: skip
        if part % 3:
            grid = np.frombuffer("".join(str(r[8]) for r in part_rows).encode(), np.uint8)
            numbers = np.array([[r[i] for r in part_rows] for i in (1, 2, 3, 4, 5, 6, 9)])
            out.add_run(numbers, [(0, topic)], [None] * count, FixedKeys(grid.reshape(count, 32)))
        else:
            out.extend_rows(part_rows)
        rows += part_rows
    assert len(out) == len(rows)
    for start, stop in [(0, len(rows)), (3, 50), (len(rows) - 1, len(rows) + 5), (7, 7)]:
        part = out.slice(start, stop)
        assert part.rows() == rows[start:stop]
        assert part.topics == [row[0] for row in rows[start:stop]]
        assert part.phys_offsets.tolist() == [row[3] for row in rows[start:stop]]
    assert out.rows() == rows
    assert [first for first, _ in out.topic_changes] == [
        k for k in range(len(rows)) if k == 0 or rows[k][0] != rows[k - 1][0]
    ]


def test_a_keyless_stretch_is_one_fixed_width_column(tmp_path: Path) -> None:
    """Thousands of keyless records (several runs of the column walk, and a segment roll)
    come out as one ``FixedKeys`` column with the rows of the record walk."""
    store = MessageStore(tmp_path, CONFIG, clock=FakeClock(T0)).open()
    for i in range(30):
        store.put_messages([Message("orders", b"x" * (100 + i % 2)) for _ in range(400)], 0)
    log = store.commit_log
    end = log.confirm_offset
    columns, reached = dispatch_columns(log, 0, end, 1 << 30, log.delay_levels_ms)
    rows, walked = walk_requests(log, 0, end, 1 << 30)
    assert reached == walked == end
    assert isinstance(columns.uniq_keys, FixedKeys)
    assert [DispatchRow(*row) for row in columns.rows()] == rows
    store.close()
