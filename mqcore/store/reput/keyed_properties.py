"""Reput's scan of keyed runs: TAGS, KEYS and UNIQ_KEY of a run's PROPERTIES, split with numpy.

A keyed record's PROPERTIES, as Cairn's put paths write them (``plain_batch``, the Kafka
produce path), are::

    [TAGS \\x01 <tags> \\x02]  KEYS \\x01 <keys> \\x02  UNIQ_KEY \\x01 <uniq key> \\x02

``dispatch_scan`` used to decode and split such a run as text (``_properties_of_text``): a
``str`` per value, then the index hashed the KEYS by length groups, ~1.1 us a record of
reput for ``order-{i}`` keys. :func:`keyed_columns` finds the layout from the positions of
the separator bytes (\\x01 and \\x02) of the whole run at once, and reads the KEYS and
UNIQ_KEYs as byte grids (``key_column.FixedKeys``, ``RaggedKeys``) that the index hashes with
no ``str`` made (``hashing.index_hashes_of_grid``, ``index_hashes_of_ragged``).

It takes a run only when every record is exactly that layout (one of the two, the same for
the run) with non-empty values, ASCII bytes only, no space in KEYS (several keys: the text
path splits them) and UNIQ_KEYs of one width; for such a record the text path's rule (the
last valid pair of a name wins, ``_three``) gives these very values. Anything else returns
None and the run takes the text path, which alone decides the odd cases (non-ASCII keys are
decoded as UTF-8 and hashed over UTF-16 units there).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from mqcore.store.reput.key_column import FixedKeys, RaggedKeys

__all__ = ["keyed_columns"]

type _Grid = npt.NDArray[np.uint8]
type _Ints = npt.NDArray[np.int64]

_TAGS = np.frombuffer(b"TAGS\x01", np.uint8)
_KEYS = np.frombuffer(b"KEYS\x01", np.uint8)
_UNIQ = np.frombuffer(b"\x02UNIQ_KEY\x01", np.uint8)
_KEYS_NAME = np.frombuffer(b"\x02KEYS\x01", np.uint8)
#: The separator bytes of a layout of k pairs, in order: \x01 after each name, \x02 after
#: each value.
_KINDS = {pairs: np.array([1, 2] * pairs, np.uint8) for pairs in (2, 3)}
_SPACE = ord(" ")
#: A text shorter than ``KEYS\x01k\x02UNIQ_KEY\x01u\x02`` is not the layout.
_SHORTEST = 18


def keyed_columns(
    properties: _Grid, lengths: _Ints
) -> tuple[Sequence[str | None], FixedKeys | RaggedKeys, FixedKeys] | None:
    """TAGS, KEYS and UNIQ_KEY of each record, as ``dispatch_scan._properties_of`` gives them,
    for a run in one of the layouts above (see the module docstring); None otherwise.

    Args:
        properties: ``(count, width)``: row i is record i's PROPERTIES, zero past
            ``lengths[i]``.
        lengths: each record's PROPERTIES length, at most ``width``.

    Returns:
        The TAGS as strings (or Nones, without TAGS), the KEYS as a byte column (a
        ``FixedKeys`` when all have one length), the UNIQ_KEYs as a ``FixedKeys``.

    ~0.25 us a record under cProfile (runs of 2048, ``order-{i:06d}`` keys); with the
    hashing from the bytes, reput of 200k Kafka records of 100 bytes (``/tmp/prof/
    produce.py``, interleaved runs on a busy 2-CPU box) went from 1.49-1.63 to 0.86-0.90 us
    a message for ``order-{i}`` keys and from 1.13-1.22 to 0.63-0.66 for ``order-{i:06d}``.
    """
    count, width = properties.shape
    if not count or width < _SHORTEST or int(lengths.min()) < _SHORTEST:
        return None
    if properties[0, 0] == _TAGS[0]:
        pairs, first = 3, _TAGS
    else:
        pairs, first = 2, _KEYS
    if not (properties[:, : len(first)] == first).all():
        return None
    # ASCII only: the text path decodes UTF-8 (and hashes non-ASCII over UTF-16 units).
    if int(properties.max()) >= 128:
        return None
    # The separators, row by row: 2 * pairs in each, \x01 and \x02 taking turns, the last
    # one the record's last byte. Padding is zero, so it is no separator.
    flat = properties.reshape(-1)
    separators = np.flatnonzero((properties - np.uint8(1)) < 2)
    if len(separators) != 2 * pairs * count:
        return None
    seats = separators.reshape(count, 2 * pairs)
    if not (flat[seats] == _KINDS[pairs]).all():
        return None
    row_starts = np.arange(0, count * width, width, dtype=np.int64)
    # Each row's block ends at its last byte (and so starts after the row before's):
    # a row with one separator more and the next with one fewer fails here.
    if not (seats[:, -1] == row_starts + lengths - 1).all():
        return None
    # Values not empty: each \x02 more than one byte after its \x01.
    if not (seats[:, 1::2] - seats[:, 0::2] > 1).all():
        return None
    # The names between a value's \x02 and the next \x01 (the first name checked above).
    if pairs == 3 and not _names_at(flat, seats[:, 1], seats[:, 2], _KEYS_NAME):
        return None
    if not _names_at(flat, seats[:, -3], seats[:, -2], _UNIQ):
        return None
    uniq_widths = seats[:, -1] - seats[:, -2] - 1
    uniq_width = int(uniq_widths[0])
    if not (uniq_widths == uniq_width).all():
        return None
    uniq = FixedKeys(flat[(seats[:, -2] + 1)[:, None] + np.arange(uniq_width)])
    keys = _right_aligned(flat, seats[:, -4] + 1, seats[:, -3])
    if keys is None:
        return None
    tags: Sequence[str | None] = (
        _strings(flat, seats[:, 0] + 1, seats[:, 1]) if pairs == 3 else [None] * count
    )
    return tags, keys, uniq


def _names_at(flat: _Grid, before: _Ints, after: _Ints, name: _Grid) -> bool:
    """Whether ``name`` (with its \\x02 and \\x01) lies from each ``before`` to ``after``."""
    if not (after - before == len(name) - 1).all():
        return False
    return bool((flat[before[:, None] + np.arange(len(name))] == name).all())


def _right_aligned(flat: _Grid, starts: _Ints, ends: _Ints) -> FixedKeys | RaggedKeys | None:
    """The bytes ``starts[i]:ends[i]`` of ``flat`` as a key column, right-aligned and zero
    padded (``RaggedKeys``), or a ``FixedKeys`` when all have one length; None when one
    holds a space (several keys: the text path)."""
    lengths = ends - starts
    width = int(lengths.max())
    at = ends[:, None] - width + np.arange(width)
    np.maximum(at, 0, out=at)
    grid = flat[at]
    ragged = int(lengths.min()) != width
    if ragged:  # the bytes before a shorter key are not its own
        grid[np.arange(width) < (width - lengths)[:, None]] = 0
    if (grid == _SPACE).any():
        return None
    if not ragged:
        return FixedKeys(grid)
    return RaggedKeys(grid, lengths)


def _strings(flat: _Grid, starts: _Ints, ends: _Ints) -> list[str]:
    """The bytes ``starts[i]:ends[i]`` of ``flat`` (ASCII, no \\x02) as strings: one decode
    and one split for the run. A run of one value (the usual TAGS) is made once."""
    lengths = ends - starts
    width = int(lengths.max())
    at = starts[:, None] + np.arange(width + 1)
    np.minimum(at, len(flat) - 1, out=at)
    grid = flat[at]
    grid[np.arange(width + 1) == lengths[:, None]] = 2  # each value's end
    keep = np.arange(width + 1) <= lengths[:, None]
    strings: list[str] = grid[keep].tobytes().decode("ascii").split("\x02")
    return strings[: len(starts)]
