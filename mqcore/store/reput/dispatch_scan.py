"""Reput's fast walk: the fields ConsumeQueue and IndexFile need, for a run of records.

``CommitLog.iter_dispatch`` yields one :class:`~mqcore.format.record.DispatchRequest` per
record (a frozen object with all properties, for listeners and tools) from a generator,
and reput then sorts out each item. When nobody listens, reput needs only ten fields:
:func:`dispatch_columns` (reput's walk, ``MessageStore.reput_once``) and :func:`scan_columns`
collect them as :class:`~mqcore.store.reput.reput_columns.Columns` (numbers as int64 arrays, the
topic where it changes, keys as sequences), which ``dispatch_write.write_columns`` hands to
``ConsumeQueue.put_run`` and ``IndexService.build_index_many`` (``IndexColumns``) as they
are. A run of up to 512 records is framed with numpy (the
TOTALSIZE chain, then one gather of all headers and vectorised framing checks, the topic
decoded only where it changes), and the properties of the run are decoded and split at once
(:func:`_properties_of_run`), or, for a keyless run (``UNIQ_KEY`` alone, one width: the
Kafka produce path's records), read as one fixed-width byte column with no text made
(:func:`_keyless`, ``key_column.py``), and for a keyed run (``[TAGS] KEYS UNIQ_KEY``, ASCII,
one key a record) split from the positions of its separator bytes, KEYS and UNIQ_KEYs as
byte columns (``keyed_properties.py``). ``Columns.rows()`` gives the same records as plain
tuples (:data:`Row`). The files come out byte for byte as from the
request path (``test_store_fast_paths.py``, ``test_dispatch_scan.py``,
``test_dispatch_columns.py``).

The framing checks are ``decode_dispatch``'s fast path, inlined; any record off that path
(IPv6 hosts, V2 topics, SCHEDULE_TOPIC_XXXX, anything malformed) goes through
``decode_dispatch`` itself, which alone decides what a bad record is.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import numpy.typing as npt

from mqcore.format.chain import walk
from mqcore.format.delay_levels import SCHEDULE_TOPIC
from mqcore.format.hashing import tag_code, tag_codes
from mqcore.format.layout import (
    HEADER_SIZES,
    HOST_V6_FLAGS,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    PROPERTIES_LENGTH,
    REPUT_HEADER_V1_IPV4,
    TOPIC_LENGTH_V1,
    V1_MAX_TOPIC_BYTES,
)
from mqcore.format.record import Blank, Corrupt, DispatchRequest, decode_dispatch
from mqcore.store.reput.key_column import FixedKeys
from mqcore.store.reput.keyed_properties import keyed_columns
from mqcore.store.reput.reput_columns import NUMBER_FIELDS, Columns, Row

__all__ = ["Columns", "DispatchRow", "Row", "dispatch_columns", "scan_columns"]

if TYPE_CHECKING:
    from mqcore.store.commit_log import CommitLog


class DispatchRow(NamedTuple):
    """What reput writes for one record: the ``DispatchRequest`` fields minus the
    properties and the prepared-transaction offset."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int


# REPUT_HEADER_V1_IPV4 without PREPARED_TRANSACTION_OFFSET (reput does not use it): one
# int object less per record.
assert REPUT_HEADER_V1_IPV4.format.endswith("qi")
_HEADER = struct.Struct(REPUT_HEADER_V1_IPV4.format[:-2] + "8xi")
_HEADER_SIZE = _HEADER.size
assert _HEADER_SIZE == HEADER_SIZES[0]
_LENGTH_SIZE = PROPERTIES_LENGTH.size


def _numpy_record(layout: struct.Struct, names: Sequence[str]) -> np.dtype[np.void]:
    """``layout`` (big-endian ``i``/``q`` fields and ``x`` pads) as a numpy record with these
    field names, so that numpy reads the same bytes as ``layout.unpack``."""
    sizes = {"i": 4, "q": 8}
    formats: list[str] = []
    offsets: list[int] = []
    offset = 0
    assert layout.format.startswith(">")
    for repeat, code in re.findall(r"(\d*)([iqx])", layout.format[1:]):
        if code == "x":
            offset += int(repeat or 1)
            continue
        assert not repeat
        formats.append(f">i{sizes[code]}")
        offsets.append(offset)
        offset += sizes[code]
    assert offset == layout.size and len(formats) == len(names)
    return np.dtype(
        {"names": list(names), "formats": formats, "offsets": offsets, "itemsize": layout.size}
    )


#: _HEADER for numpy (_frame_run): the headers of a run are copied out as opaque items of
#: _HEADER_ITEM (a memcpy each, several times faster than gathering a dtype with fields),
#: then seen through _HEADER_DTYPE.
_HEADER_DTYPE = _numpy_record(
    _HEADER,
    ("total", "magic", "queue_id", "queue_offset", "phys_offset", "sys_flag",
     "store_timestamp", "body_length"),
)  # fmt: skip
_HEADER_ITEM = np.dtype((np.void, _HEADER_SIZE))
#: The header field of each row of a run's numbers (``reput_columns``' order); the tag
#: codes come from the properties.
_NUMBER_NAMES = (
    "queue_id", "queue_offset", "phys_offset", "total", "", "store_timestamp", "sys_flag",
)  # fmt: skip
_TAGS_ROW = _NUMBER_NAMES.index("")
assert len(_NUMBER_NAMES) == NUMBER_FIELDS
assert PROPERTIES_LENGTH.format == ">h"
_PROPERTIES_LENGTH_ITEM = np.dtype(">i2")

type _Bytes = npt.NDArray[np.uint8]
type _Ints = npt.NDArray[np.int64]
type _Grid = npt.NDArray[np.uint8]

# How _scan_records ended.
_GOING, _BLANK, _ENDED = 0, 1, 2

# Topics by their bytes: a decode saved per record (a broker has few topics).
_TOPICS: dict[bytes, str] = {}
_TOPICS_MAX = 4096


def _three(segments: list[str]) -> tuple[str | None, str | None, str | None]:
    """TAGS, KEYS and UNIQ_KEY of a properties string split on \\x02, with
    ``properties.decode_properties``'s rule (the last valid pair of a name wins)."""
    props: dict[str, str] = {}
    for segment in segments:
        name, _, value = segment.partition("\x01")
        if name and value:  # Java: first \x01 neither first nor last in the segment
            props[name] = value
    return props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY")


def _row_of(request: DispatchRequest) -> Row:
    return (
        request.topic,
        request.queue_id,
        request.queue_offset,
        request.phys_offset,
        request.size,
        request.tags_code,
        request.store_timestamp,
        request.keys,
        request.uniq_key,
        request.sys_flag,
    )


def _scan_records(
    buf: mmap.mmap | bytes,
    pos: int,
    stop: int,
    limit: int,
    delay_levels_ms: Sequence[int],
    rows: list[Row],
    budget: int,
    skip_corrupt: bool = True,
) -> tuple[int, int]:
    """The walk one record at a time, for at most ``budget`` records (the records the column
    walk leaves: anything off its path, and the ones right after).

    Returns:
        ``(position reached, how the walk ended)``: :data:`_GOING` (budget spent or ``stop``
        reached), :data:`_BLANK` (a blank record: on to the next segment) or :data:`_ENDED`
        (a record not fully written, or corrupt with no size, or with one and not
        ``skip_corrupt``).
    """
    unpack = _HEADER.unpack_from
    unpack_length = PROPERTIES_LENGTH.unpack_from
    append = rows.append
    topics = _TOPICS
    for _ in range(budget):
        if pos >= stop:
            break
        if limit - pos >= MIN_RECORD_SIZE:
            total, magic, queue_id, queue_offset, phys_offset, sys_flag, store_timestamp, body_length = unpack(buf, pos)  # fmt: skip
            end = pos + total
            topic_pos = pos + _HEADER_SIZE + body_length + 1
            if (
                magic == MESSAGE_MAGIC_CODE
                and not sys_flag & HOST_V6_FLAGS
                and MIN_RECORD_SIZE <= total <= limit - pos
                and body_length >= 0
                and topic_pos + _LENGTH_SIZE <= end
            ):
                topic_end = topic_pos + buf[topic_pos - 1]
                properties_pos = topic_end + _LENGTH_SIZE
                if (
                    topic_end - topic_pos <= V1_MAX_TOPIC_BYTES
                    and properties_pos <= end
                    and properties_pos + unpack_length(buf, topic_end)[0] == end
                ):
                    raw_topic = buf[topic_pos:topic_end]
                    topic = topics.get(raw_topic)
                    if topic is None:
                        topic = str(raw_topic, "utf-8", "replace")
                        if topic == SCHEDULE_TOPIC:  # tag code from the delay level
                            topic = ""
                        elif len(topics) < _TOPICS_MAX:
                            topics[raw_topic] = topic
                    if topic:
                        tags, keys, uniq_key = _properties_of(buf[properties_pos:end])
                        tags_code = tag_code(tags)
                        append(
                            (
                                topic,
                                queue_id,
                                queue_offset,
                                phys_offset,
                                total,
                                tags_code,
                                store_timestamp,
                                keys,
                                uniq_key,
                                sys_flag,
                            )  # fmt: skip
                        )
                        pos = end
                        continue
        result = decode_dispatch(buf, pos, limit, delay_levels_ms=delay_levels_ms)
        if isinstance(result, DispatchRequest):
            append(_row_of(result))
            pos += result.size
        elif isinstance(result, Blank):
            return pos, _BLANK
        elif isinstance(result, Corrupt) and result.size > 0 and skip_corrupt:
            pos += result.size
        else:  # NeedMore, or Corrupt with nothing to skip: wait for recovery
            return pos, _ENDED
    return pos, _GOING


def _properties_of(raw: bytes) -> tuple[str | None, str | None, str | None]:
    """TAGS, KEYS and UNIQ_KEY of one record's PROPERTIES bytes (``decode_properties``'
    rule), with Cairn's own layout recognised first."""
    segments = str(raw, "utf-8", "replace").split("\x02")
    # Cairn's own order (plain_batch), exactly: TAGS, KEYS, UNIQ_KEY, each with a value,
    # and the trailing separator. Names hold no \x01, so each value is all after the
    # name's \x01, as partition gives it.
    if (
        len(segments) == 4
        and not segments[3]
        and segments[0].startswith("TAGS\x01")
        and segments[1].startswith("KEYS\x01")
        and segments[2].startswith("UNIQ_KEY\x01")
    ):
        tags = segments[0][5:]
        keys = segments[1][5:]
        uniq_key = segments[2][9:]
        if tags and keys and uniq_key:
            return tags, keys, uniq_key
    return _three(segments)


# --- the column walk ------------------------------------------------------------------------------
#
# _scan_records builds ~15 objects per record: the properties decoded and split into segments,
# their values, a row tuple that the writer then takes apart again. _scan_run leaves all of it
# to passes over the whole run: the TOTALSIZE chain (mqcore.format.chain.walk), the headers
# gathered and checked as numpy columns (_frame_run, ~1 us per record less than a header
# unpack, checks and slices per record in Python), the topic decoded where it changes, and
# the properties of all records joined, decoded and split at once (_properties_of_run;
# joined by numpy when they have one length). The framing checks are
# _scan_records' own; a record off that path ends the run, and _scan_records takes it.

#: What comes before TAGS' value (after the previous record's \x02 and the joiner), before
#: KEYS' and before UNIQ_KEY's, in a run of Cairn-layout properties joined on \x02.
# The property layouts Cairn's put paths write (names in order), each with the text before
# each value when records are joined on \x02: the joiner and the previous record's trailing
# \x02 before the first name, one \x02 before the others.
_LAYOUTS: dict[tuple[str, ...], tuple[str, ...]] = {
    names: tuple(("\x02\x02" if j == 0 else "\x02") + name + "\x01" for j, name in enumerate(names))
    for names in (
        ("TAGS", "KEYS", "UNIQ_KEY"),
        ("KEYS", "UNIQ_KEY"),
        ("TAGS", "UNIQ_KEY"),
        ("UNIQ_KEY",),
    )
}
_SEPARATOR = b"\x02"[0]
#: What a keyless run's PROPERTIES start with (its only property), and the bytes a
#: fixed-width UNIQ_KEY column may not hold: the separators (the text pass would split
#: there) and non-ASCII (the text pass decodes UTF-8).
_UNIQ_ONLY = np.frombuffer(b"UNIQ_KEY\x01", np.uint8)
_NOT_IN_KEY = np.array([byte in (1, 2) or byte >= 128 for byte in range(256)], np.bool_)
_LAST = itemgetter(-1)
#: Records per run at most: the run's columns and text stay in the CPU caches between passes
#: (the passes over a run of 16k records cost ~2x those over 512), while each run costs ~40
#: numpy calls whatever its length. Reput's thread CPU a record by run length (CI box, min of
#: 4): keyless Kafka records' scan 0.28 / 0.21 / 0.19 / 0.17 us at 512 / 1024 / 2048 / 4096;
#: bench/engine's records (TAGS, KEYS, UNIQ_KEY) in all 1.42 / 1.32 / 1.28 / 1.40 us.
_RUN = range(2048)


def _scan_run(
    buf: mmap.mmap | bytes, pos: int, stop: int, limit: int, out: Columns
) -> tuple[int, bool]:
    """Append the columns of the records from ``pos`` while ``pos < stop``, up to the first one
    off the column path (anything :func:`_scan_records` does not take on its fast path: a
    blank record, IPv6 hosts, a V2 or SCHEDULE_TOPIC_XXXX topic, bad framing, the end of
    the written bytes). Same fields as :func:`_scan_records`.

    The TOTALSIZE chain is followed by :func:`mqcore.format.chain.walk`; the framing checks
    and the header fields of the whole run are numpy passes (:func:`_frame_run`), and the topic is decoded
    where it changes.

    Returns:
        The position of the first record not taken, and whether the run took its full
        ``len(_RUN)`` records (the next record may then be on the column path too).
    """
    if pos >= stop or limit - pos < MIN_RECORD_SIZE:
        return pos, False
    # The readable bytes from ``pos``, not copied: every array over them is gone when this
    # returns (an mmap cannot be closed while exported).
    window = np.frombuffer(buf, np.uint8, limit - pos, pos)
    at, reached = walk(
        buf, pos, min(stop, limit - MIN_RECORD_SIZE + 1), end=limit, max_records=len(_RUN)
    )
    if not len(at):
        return reached, False
    run = _frame_run(window[: reached - pos], at)
    count = len(run.heads)
    changes: list[tuple[int, str]] = []  # (first record, topic) of each stretch of one topic
    for k in run.topic_changes():
        topic_pos = int(run.topic_pos[k])
        raw_topic = window[topic_pos : topic_pos + int(run.topic_lengths[k])].tobytes()
        topic = _TOPICS.get(raw_topic) or _cache_topic(raw_topic)
        if topic is None:  # SCHEDULE_TOPIC_XXXX: its tag code is a delivery time
            count = k
            break
        changes.append((k, topic))
    if count < len(at):
        reached = pos + int(at[count])
    if count:
        _append_run(buf, pos, run, count, changes, out)
    return reached, count == len(_RUN)


class _Run:
    """The records of a run that pass the column path's framing checks (a prefix of those
    walked), positions relative to the run's first record."""

    __slots__ = ("heads", "ends", "topic_pos", "topic_lengths", "properties_pos", "window")

    def __init__(self, window: _Bytes, heads: npt.NDArray[np.void], ends: _Ints) -> None:
        self.window = window
        self.heads = heads
        self.ends = ends
        self.topic_pos = ends[:0]
        self.topic_lengths = ends[:0]
        self.properties_pos = ends[:0]

    def keep(self, count: int) -> None:
        """Only the first ``count`` records."""
        for name in ("heads", "ends", "topic_pos", "topic_lengths", "properties_pos"):
            column = getattr(self, name)
            if len(column) > count:
                setattr(self, name, column[:count])

    def joined_properties(
        self,
    ) -> tuple[Sequence[str | None], Sequence[str | None], Sequence[str | None]] | None:
        """:func:`_properties_of_run` for a run whose records' PROPERTIES all have one length
        (the usual run: fixed-width keys), joined with numpy instead of a bytes object per
        record; None for any other run, or when the joined text is not the usual layout."""
        lengths = self.ends - self.properties_pos
        width = int(lengths[0])
        if not width or not (lengths == width).all():
            return keyed_columns(*self.padded_properties(lengths))
        count = len(lengths)
        items = np.dtype((np.void, width))
        properties = np.ndarray((len(self.window) - width + 1,), items, self.window, 0, (1,))
        gathered = properties[self.properties_pos].view(np.uint8).reshape(count, width)
        if width > len(_UNIQ_ONLY) + 1 and (gathered[:, : len(_UNIQ_ONLY)] == _UNIQ_ONLY).all():
            keyless = _keyless(gathered)
            if keyless is not None:
                return keyless
        keyed = keyed_columns(gathered, lengths)
        if keyed is not None:
            return keyed
        joined = np.empty((count, width + 1), np.uint8)
        joined[:, :width] = gathered
        joined[:, width] = _SEPARATOR
        ends = int(np.count_nonzero(joined[:, width - 1] == _SEPARATOR))
        return _properties_of_text(joined.reshape(-1)[:-1].tobytes(), count, ends)

    def padded_properties(self, lengths: _Ints) -> tuple[_Grid, _Ints]:
        """Each record's PROPERTIES as a row, zero past its ``lengths`` (for
        ``keyed_properties``: runs of keys of several lengths), and ``lengths``."""
        columns = np.arange(int(lengths.max()))
        at = self.properties_pos[:, None] + columns
        np.minimum(at, len(self.window) - 1, out=at)
        grid = self.window[at]
        grid[columns >= lengths[:, None]] = 0
        return grid, lengths

    def topic_changes(self) -> list[int]:
        """The records whose topic is not the one before (always the first)."""
        lengths = self.topic_lengths
        if len(lengths) < 2:
            return [0] if len(lengths) else []
        width = int(lengths[0])
        if (lengths == width).all():  # the usual run: each topic one opaque item, compared
            items = np.dtype((np.void, width))
            topics = np.ndarray((len(self.window) - width + 1,), items, self.window, 0, (1,))
            topics = topics[self.topic_pos]
            return [0, *(np.flatnonzero(topics[1:] != topics[:-1]) + 1).tolist()]
        # Each topic as a row of its bytes, zeroed past its length: equal rows and lengths
        # are equal topics.
        columns = np.arange(int(lengths.max()))
        at = self.topic_pos[:, None] + columns
        np.minimum(at, len(self.window) - 1, out=at)
        grid = self.window[at]
        grid[columns >= lengths[:, None]] = 0
        changed = (grid[1:] != grid[:-1]).any(axis=1) | (lengths[1:] != lengths[:-1])
        return [0, *(np.flatnonzero(changed) + 1).tolist()]


def _keyless(properties: _Grid) -> tuple[list[None], list[None], FixedKeys] | None:
    """:func:`_properties_of_text`'s columns for a run whose PROPERTIES (the rows of
    ``properties``, one width, each starting ``UNIQ_KEY\x01``) are all ``UNIQ_KEY\x01<value>
    \x02`` with an ASCII value free of \x01 and \x02 (a keyless Kafka run; the text
    pass would find the layout ``("UNIQ_KEY",)`` and these values): the UNIQ_KEYs as one
    fixed-width column, read where they lie with no text made (``key_column.py``); None
    for any other run. ~0.05 us a record against ~0.35 us for the text pass (CI box)."""
    if not (properties[:, -1] == _SEPARATOR).all():
        return None
    values = properties[:, len(_UNIQ_ONLY) : -1]
    # Two reductions rule out the bytes the text pass would treat otherwise in nearly every
    # run (digits and letters); a run with a byte below 3 (\x00 is allowed) looks closer.
    if int(values.min()) < 3 or int(values.max()) >= 128:
        if _NOT_IN_KEY[values].any():
            return None
    absent = [None] * len(properties)
    return absent, absent, FixedKeys(values)


def _leading(ok: npt.NDArray[np.bool_]) -> int:
    """How many of ``ok`` are true before the first false."""
    return len(ok) if ok.all() else int(ok.argmin())


def _frame_run(window: _Bytes, at: _Ints) -> _Run:
    """:func:`_scan_records`' framing checks for the records starting at ``at`` in ``window``
    (walked by TOTALSIZE, each within ``MIN_RECORD_SIZE..`` the bytes left), as numpy
    passes; the records up to the first that fails are kept."""
    # Each header copied out as one opaque item (a memcpy each), then seen field by field.
    items = np.ndarray((len(window) - _HEADER_SIZE + 1,), _HEADER_ITEM, window, 0, (1,))
    heads = items[at].view(_HEADER_DTYPE)
    ends = at + heads["total"]
    body_lengths = heads["body_length"].astype(np.int64)
    topic_pos = at + (_HEADER_SIZE + TOPIC_LENGTH_V1.size) + body_lengths
    run = _Run(window, heads, ends)
    ok = (
        (heads["magic"] == MESSAGE_MAGIC_CODE)
        & ((heads["sys_flag"] & HOST_V6_FLAGS) == 0)
        & (body_lengths >= 0)
        & (topic_pos + _LENGTH_SIZE <= ends)
    )
    count = _leading(ok)
    run.keep(count)
    topic_pos = topic_pos[:count]
    lengths = window[topic_pos - TOPIC_LENGTH_V1.size].astype(np.int64)
    properties_pos = topic_pos + lengths + _LENGTH_SIZE
    ok = (lengths > 0) & (lengths <= V1_MAX_TOPIC_BYTES) & (properties_pos <= run.ends)
    count = _leading(ok)
    run.keep(count)
    topic_pos, lengths, properties_pos = topic_pos[:count], lengths[:count], properties_pos[:count]
    shorts = np.ndarray((max(len(window) - 1, 0),), _PROPERTIES_LENGTH_ITEM, window, 0, (1,))
    ok = properties_pos + shorts[properties_pos - _LENGTH_SIZE] == run.ends
    count = _leading(ok)
    run.topic_pos = topic_pos
    run.topic_lengths = lengths
    run.properties_pos = properties_pos
    run.keep(count)
    return run


def _append_run(
    buf: mmap.mmap | bytes,
    first: int,
    run: _Run,
    count: int,
    changes: list[tuple[int, str]],
    out: Columns,
) -> None:
    """The columns of the first ``count`` records of a run :func:`_scan_run` framed."""
    run.keep(count)
    heads = run.heads
    columns = run.joined_properties()
    if columns is None:
        properties = list(
            map(
                buf.__getitem__,
                map(slice, (run.properties_pos + first).tolist(), (run.ends + first).tolist()),
            )
        )
        columns = _properties_of_run(properties)
    tags, keys, uniq_keys = columns
    numbers = np.empty((NUMBER_FIELDS, count), np.int64)  # reput_columns' field order
    for row, name in enumerate(_NUMBER_NAMES):
        if name:
            numbers[row] = heads[name]
    if tags.count(None) == count:  # no TAGS (a Kafka run): code 0, as tag_code has it
        numbers[_TAGS_ROW] = 0
    else:
        numbers[_TAGS_ROW] = tag_codes(tags)
    out.add_run(numbers, changes, keys, uniq_keys)


def _cache_topic(raw: bytes) -> str | None:
    """``raw`` decoded as _scan_records does (and remembered); None for SCHEDULE_TOPIC_XXXX."""
    topic = str(raw, "utf-8", "replace")
    if topic == SCHEDULE_TOPIC or not topic:
        return None
    if len(_TOPICS) < _TOPICS_MAX:
        _TOPICS[raw] = topic
    return topic


def _properties_of_run(
    properties: list[bytes],
) -> tuple[Sequence[str | None], Sequence[str | None], Sequence[str | None]]:
    """:func:`_properties_of` for each record's PROPERTIES bytes, as three columns.

    The usual run (valid UTF-8, each record in Cairn's own layout) is decoded and split once
    for all records, joined on an extra \x02: with each \x01 made a \x02 too, the run splits
    into TAGS, t, KEYS, k, UNIQ_KEY, u and an empty segment per record. Those values are
    right iff the canonical text rebuilt from them is the joined text (names and separators
    in place, the doubled \x02 only between records, since values hold no \x02), every
    record ends with its \x02 (so the doubled ones are the record boundaries), and no
    value is empty. Valid UTF-8 cannot span the ASCII joiner, so the strict decode of the
    run is each record's decode. Anything else: record by record.
    """
    count = len(properties)
    ends = -1 if b"" in properties else list(map(_LAST, properties)).count(_SEPARATOR)
    columns = _properties_of_text(b"\x02".join(properties), count, ends)
    if columns is not None:
        return columns
    tags_column, keys_column, uniq_column = zip(*map(_properties_of, properties), strict=True)
    return tags_column, keys_column, uniq_column


def _properties_of_text(
    text: bytes, count: int, ends: int
) -> tuple[Sequence[str | None], Sequence[str | None], list[str]] | None:
    """:func:`_properties_of_run`'s one pass: ``text`` is the PROPERTIES of ``count`` records
    joined on \x02, ``ends`` how many of them end with \x02. None unless every record is
    in one of Cairn's own layouts, the same for the whole run (then the caller parses record
    by record): TAGS, KEYS, UNIQ_KEY; KEYS, UNIQ_KEY (a keyed Kafka record); TAGS, UNIQ_KEY;
    or UNIQ_KEY alone (a keyless Kafka record). A property a layout lacks is None."""
    if ends != count:
        return None
    try:
        run = str(text, "utf-8")
    except UnicodeDecodeError:
        return None
    parts = run.replace("\x01", "\x02").split("\x02")
    # A record of k pairs is 2k segments, the trailing \x02 and the joiner one more each
    # (the last record has no joiner): (2k + 1) * count segments in all.
    pairs, odd = divmod(len(parts) // count - 1, 2)
    if odd or len(parts) != (2 * pairs + 1) * count:
        return None
    names = tuple(parts[0 : 2 * pairs : 2])  # the first record's
    layout = _LAYOUTS.get(names)
    if layout is None:
        return None
    step = 2 * pairs + 1
    columns = [parts[2 * j + 1 :: step] for j in range(pairs)]
    for column in columns:
        if "" in column:
            return None
    # The text rebuilt from the values with the layout's names must be the text read: then
    # every record has exactly these names, in this order, with these values.
    again = [""] * (2 * pairs * count)
    for j, (separator, column) in enumerate(zip(layout, columns, strict=True)):
        again[2 * j :: 2 * pairs] = [separator] * count
        again[2 * j + 1 :: 2 * pairs] = column
    again[0] = names[0] + "\x01"  # the first record has no joiner before it
    if "".join(again) + "\x02" != run:
        return None
    by_name = dict(zip(names, columns, strict=True))
    absent = [None] * count
    return by_name.get("TAGS", absent), by_name.get("KEYS", absent), by_name["UNIQ_KEY"]


def scan_columns(
    buf: mmap.mmap | bytes,
    pos: int,
    stop: int,
    limit: int,
    delay_levels_ms: Sequence[int],
    out: Columns,
    *,
    skip_corrupt: bool = True,
) -> tuple[int, bool]:
    """Append the columns of each record in ``buf`` (a segment's mapping, or bytes: slices
    must be hashable) from ``pos`` while ``pos < stop`` (``limit``: end of the readable
    bytes, as ``decode_dispatch`` takes it), as ``CommitLog.iter_dispatch`` walks a segment:
    a corrupt record that states its size is skipped (unless ``skip_corrupt`` is False);
    a blank record, a record not fully written, or a corrupt one with no size ends the walk.

    Returns:
        ``(position reached, whether a blank record sent the walk to the next segment)``.
    """
    while pos < stop:
        pos, whole_run = _scan_run(buf, pos, stop, limit, out)
        if whole_run or pos >= stop:
            continue
        # The record at ``pos`` is off the column path: _scan_records decides what it is.
        rows: list[Row] = []
        pos, ended = _scan_records(buf, pos, stop, limit, delay_levels_ms, rows, 1, skip_corrupt)
        out.extend_rows(rows)
        if ended != _GOING:
            return pos, ended == _BLANK
    return pos, False


def dispatch_columns(
    commit_log: CommitLog,
    from_offset: int,
    end_offset: int,
    max_bytes: int,
    delay_levels_ms: Sequence[int],
    *,
    skip_corrupt: bool = True,
) -> tuple[Columns, int]:
    """:meth:`CommitLog.iter_dispatch`'s walk as columns (reput's): the same segments, stops,
    quarantined ranges jumped over and records (``skip_corrupt`` as there). Returns the
    columns and the offset the walk reached."""
    out = Columns()
    quarantine = commit_log.quarantine
    offset = max(from_offset, commit_log.min_offset)
    budget_end = offset + max_bytes
    while offset < end_offset and offset < budget_end:
        bad = None
        if quarantine.ranges:
            entry = quarantine.covering(offset)
            if entry is not None:
                quarantine.log_skip(entry, "reput", f"CommitLog {offset}..{entry.end}")
                offset = entry.end
                continue
            bad = quarantine.next_start(offset)
        segment = commit_log.segments.find(offset)
        if segment is None or not segment.hold():
            break
        base = segment.base_offset
        try:
            limit = min(segment.wrote_position, end_offset - base)
            if bad is not None:
                limit = min(limit, bad - base)
            stop = min(limit, budget_end - base)
            pos, to_next_segment = scan_columns(
                segment.buffer, offset - base, stop, limit, delay_levels_ms, out,
                skip_corrupt=skip_corrupt,
            )  # fmt: skip
        finally:
            segment.release()
        if to_next_segment:
            offset = base + commit_log.file_size
            continue
        offset = base + pos
        if bad is not None and offset == bad:
            continue  # at a quarantined range: jumped next round
        if offset < stop + base:
            quarantine.refresh()  # stopped at a bad record: another process may know it
        break
    return out, offset
