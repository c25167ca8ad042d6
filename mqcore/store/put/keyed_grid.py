"""Plain columns whose keys have several lengths, encoded as one numpy grid.

``plain_grid.py`` takes batches whose records all have one shape. A Kafka producer's keys
are usually of several lengths (``order-1`` ... ``order-99999``), which makes each tail
(topic field, PROPERTIESLENGTH, ``KEYS\\x01<key>\\x02UNIQ_KEY\\x01<id>\\x02``) as long as
its key, so the pieces between the bodies are no longer one width. Here every piece is a
row of one ``(count + 1, W)`` byte grid, right-aligned, its padding on the left::

    row r:  | padding | topic, PLENGTH | KEYS\\x01 key \\x02 | UNIQ_KEY\\x01 id \\x02 | header |
            '- window: V = P + max key + 6 bytes -----------'- suffix: S -----------'- H ---'
             tail of record r - 1 (its key right-aligned)                          record r

so everything after the key (the suffix with its UNIQ_KEY digits, the next header) sits in
fixed columns and is written as 2-D column blocks as ``plain_grid`` writes them. Only the
window's two varying parts are placed per record, each with one boolean mask: the key pairs
(``"KEYS\\x01" + "\\x02KEYS\\x01".join(keys) + "\\x02"``, made by one C join, right-aligned
against the suffix) and, just before them, topic field + PROPERTIESLENGTH (P bytes a row).
Row 0 holds only the first header, row ``count`` only the last tail. The pieces (a row from
its padding on) are cut with one ``struct`` call (``byte_cuts.cut``: the paddings are its
gaps) and interleaved with the bodies, so the record is two parts as on the one-shape grid.

Measured on 9,082 records of 100-byte values keyed ``order-{i}`` (a 1 MB Kafka batch,
timeit of ``encode_plain_columns``, best of 5, loaded machine): the list path (``struct.pack``
of every header, properties f-strings) 1.07-1.22 us a record, this grid 0.49-0.60; keys of
one length on ``plain_grid`` 0.37-0.38. In-process produce (decode, ``Broker.send``,
thread time): send 1.13-1.81 -> 0.56-0.87 us a message, one-length keys 0.44-0.69. What this
grid pays more than ``plain_grid``: the cut (its ``struct`` format written and compiled for
each batch, ~60-120 ns a record more than ``plain_grid``'s, which is cached by batch size),
the key mask and the prefixes' index. Byte for byte what ``encode_plain`` writes
(``test_plain_columns.py`` compares every batch, and which path took it).

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from mqcore.format.layout import PROPERTIES_LENGTH
from mqcore.store.put.byte_cuts import cut
from mqcore.store.put.plain_grid import (
    HEX_DIGITS,
    KEYS_OPEN,
    PAIR_END,
    UNIQ_OPEN,
    hex4_grid,
    properties_size,
    row_dtype,
    write_headers,
)

I64s = npt.NDArray[np.int64]

_KEY_PAIR_BYTES = len(KEYS_OPEN) + len(PAIR_END)  # what a key pair adds to its key
_KEYS_GLUE = (PAIR_END + KEYS_OPEN).decode("ascii")
_KEYS_OPEN_TEXT = KEYS_OPEN.decode("ascii")
_PAIR_END_TEXT = PAIR_END.decode("ascii")


def encode_keyed_grid(
    bodies: Sequence[bytes],
    body_lengths: I64s,
    body_crcs: I64s,
    born_timestamps: I64s,
    pairs: bytes,
    key_lengths: I64s,
    header: bytes,
    topic_field: bytes,
    uniq_head: str,
    uniq_first: int,
    phys_offset: int,
    queue_offset: int,
) -> tuple[list[bytes], list[int], int]:
    """The records of ``bodies`` as parts to join, their positions and the end position.

    Args:
        bodies: at least two.
        body_lengths, body_crcs, born_timestamps: one per body (CRCs already masked).
        pairs, key_lengths: :func:`key_pairs` of the keys (one per body, not empty, ASCII,
            without the pair separator ``\\x02``; ``PlainColumns.key_pairs``).
        header: the batch's header template (``ENCODE_HEADERS[variant].pack(...)`` with its
            constant fields set; the varying ones are overwritten).
        topic_field: TOPICLENGTH + TOPIC.
        uniq_head, uniq_first: ``UniqKeyGenerator.reserve(len(bodies))``.
        phys_offset, queue_offset: the first record's.
    """
    count = len(bodies)
    head = uniq_head.encode("ascii")
    suffix = UNIQ_OPEN + head + bytes(HEX_DIGITS) + PAIR_END
    prefix_size = len(topic_field) + PROPERTIES_LENGTH.size
    longest = int(key_lengths.max())
    window = prefix_size + longest + _KEY_PAIR_BYTES
    header_size, suffix_size = len(header), len(suffix)
    width = window + suffix_size + header_size
    tail_sizes = key_lengths + (prefix_size + _KEY_PAIR_BYTES + suffix_size)
    grid = np.empty((count + 1, width), np.uint8)
    grid[:, window:] = np.frombuffer(suffix + header, np.uint8)
    # The tails (rows 1..count): the UNIQ_KEY counters, then the window's two parts.
    counters = (np.arange(uniq_first, uniq_first + count, dtype=np.int64)) & 0xFFFF
    hex_at = width - header_size - len(PAIR_END) - HEX_DIGITS
    # Through a 4-byte field of each row: ~2 ns a record where a (count, 4) column block
    # took ~17.
    hex_field = np.dtype(
        {"names": ["hex"], "formats": ["V4"], "offsets": [hex_at], "itemsize": width}
    )
    grid[1:].view(hex_field).reshape(count)["hex"] = hex4_grid().view("V4").reshape(-1)[counters]
    pads = longest - key_lengths  # where each tail starts in its row
    columns = np.arange(window)
    tails = grid[1:, :window]
    # The key pairs by a mask (~2.4 ns a window byte), right-aligned against the suffix.
    tails[columns >= (pads + prefix_size)[:, None]] = np.frombuffer(pairs, np.uint8)
    # Topic field + PROPERTIESLENGTH before them, by index: ~22 ns a record where the two
    # comparisons of a mask took ~130.
    prefixes = np.empty((count, prefix_size), np.uint8)
    prefixes[:] = np.frombuffer(topic_field + bytes(PROPERTIES_LENGTH.size), np.uint8)
    properties = properties_size(1, len(head) + HEX_DIGITS) - 1 + key_lengths
    prefixes[:, len(topic_field) :] = properties.astype(">i2").view(np.uint8).reshape(count, -1)
    at = np.arange(width, width * (count + 1), width) + pads
    grid.reshape(-1)[at[:, None] + np.arange(prefix_size)] = prefixes
    # The headers (rows 0..count-1), as plain_grid writes them.
    rows = grid[:count].view(row_dtype(header_size, width, width - header_size)).reshape(count)
    starts, end = write_headers(
        rows, body_lengths + tail_sizes + header_size, body_lengths, body_crcs,
        born_timestamps, phys_offset, queue_offset,
    )  # fmt: skip
    # The pieces: row 0's header, then each row from its tail's start (the next header
    # included, but for the last row, which has none).
    piece_starts = np.empty(count + 1, np.int64)
    piece_starts[0] = width - header_size
    piece_starts[1:] = at
    piece_lengths = np.empty(count + 1, np.int64)
    piece_lengths[0] = header_size
    piece_lengths[1:] = tail_sizes + header_size
    piece_lengths[-1] -= header_size
    parts: list[bytes] = [b""] * (2 * count + 1)
    parts[0::2] = cut(grid.tobytes(), piece_starts, piece_lengths)
    parts[1::2] = bodies
    return parts, starts.tolist(), end


def key_pairs(keys: Sequence[str]) -> tuple[bytes, I64s]:
    """``KEYS\\x01<key>\\x02`` of every key back to back (one C join) and each key's
    length, read off where the pairs end (~10 ns a key where ``np.fromiter(map(len,
    keys))`` took ~50).

    Args:
        keys: at least one, ASCII, without the pair separator ``\\x02``.
    """
    pairs = f"{_KEYS_OPEN_TEXT}{_KEYS_GLUE.join(keys)}{_PAIR_END_TEXT}".encode("ascii")
    ends = np.flatnonzero(np.frombuffer(pairs, np.uint8) == PAIR_END[0])
    lengths = np.diff(ends, prepend=-1)
    lengths -= _KEY_PAIR_BYTES
    return pairs, lengths
