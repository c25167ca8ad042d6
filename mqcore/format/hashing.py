"""Java's ``String.hashCode``, as the store files use it.

RocketMQ derives two on-disk values from Java's ``String.hashCode()``:

* the ConsumeQueue **tag code** (``(long) TAGS.hashCode()``, spec 3.1), and
* the IndexFile **key hash** (``abs("topic#key".hashCode())``, spec 4.4).

Both must be bit-identical to the JVM's, so Python's randomised ``hash()`` is never used.
``String.hashCode()`` is the polynomial ``h = 31*h + unit`` over the string's **UTF-16 code
units** (a character outside the BMP contributes its two surrogates), wrapped to 32 bits and
read as a signed int::

    h(s) = sum(unit[i] * 31**(n-1-i) for i in range(n))  mod 2**32, then signed

Speed notes (CPython 3.12, one core of the CI box). A plain Python loop costs roughly 60 ns per
UTF-16 unit, so it is used only for strings of fewer than 8 units. Longer ASCII strings, which
is what index keys and tags nearly always are, are hashed by CPython's own base conversion:
write every byte ``u`` as two base-31 digits, ``u = 31*hi + lo`` (``hi <= 4`` for ASCII), then::

    h = 31 * int(hi digits, 31) + int(lo digits, 31)    (mod 2**32)

which is the same polynomial ``sum(u[i] * 31**(n-1-i))``. Both digit strings come from one
``bytes.translate`` each, so the whole hash is four C calls: ~0.5 us for a 32-character
UNIQ_KEY against 2.1 us for the dot product it replaces (tests compare both with the spec's
formula on random strings). ``int()`` is quadratic in the length and refuses more than
``sys.get_int_max_str_digits()`` digits (640 at the lowest), so strings are cut into chunks
of at most 256 bytes, combined as ``h = h * 31**len(chunk) + hash(chunk)``. Other strings use
a C-level dot product (``sum(map(mul, ...))``) with precomputed powers of 31 modulo 2**32
(short ones the loop). Nothing is cached per string: index keys are mostly unique, so a cache
would only grow.
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from collections.abc import Sequence
from itertools import compress
from operator import mul

import numpy as np
import numpy.typing as npt

__all__ = [
    "ascii_hash_u32",
    "index_hash_array",
    "index_hash_with_prefix",
    "index_hashes_of_grid",
    "index_hashes_of_ragged",
    "index_hashes_with_prefix",
    "index_key_hash",
    "java_hash_u32",
    "java_string_hash",
    "tag_code",
]

_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
_INT_MIN = -(1 << 31)
_LOW31 = 0x7FFFFFFF

# Native-order UTF-16, so that ``array("H", ...)`` yields the code units without swapping.
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"

# Below this many code units the unmasked loop beats the dot product (measured crossover
# is around 20 units; the loop's intermediate stays under ~100 bits until then).
_LOOP_MAX_UNITS = 20
# ASCII: below this many bytes the loop beats the base-31 conversion (crossover ~7 on the CI box).
_ASCII_LOOP_MAX = 7
# Longest chunk handed to int(): well under the lowest int_max_str_digits (640), and short
# enough that int()'s quadratic conversion stays cheap.
_ASCII_CHUNK = 256
_DIGITS31 = b"0123456789abcdefghijklmnopqrstu"
# bytes.translate tables: ASCII byte u -> base-31 digit of u // 31 and of u % 31. Non-ASCII
# bytes never reach them (callers check isascii first); they map to "0" to stay digits.
_HI_DIGITS = bytes(_DIGITS31[u // 31] if u < 128 else 48 for u in range(256))
_LO_DIGITS = bytes(_DIGITS31[u % 31] if u < 128 else 48 for u in range(256))

# _POWERS[k] == 31**k mod 2**32. Grown (by replacement, never in place) when a longer string
# shows up, so concurrent readers always see a complete list.
_POWERS: list[int] = [pow(31, k, 1 << 32) for k in range(256)]


def _powers(count: int) -> list[int]:
    """Return the powers table with at least ``count`` entries."""
    global _POWERS
    table = _POWERS
    if len(table) < count:
        size = max(count, 2 * len(table))
        table = [pow(31, k, 1 << 32) for k in range(size)]
        _POWERS = table
    return table


def ascii_hash_u32(data: bytes) -> int:
    """Java's ``String.hashCode()`` of ASCII text, as an unsigned 32-bit value.

    Args:
        data: ASCII bytes (every byte < 128; not checked): each byte is one UTF-16 unit.

    Returns:
        The hash modulo ``2**32``, in ``[0, 2**32 - 1]``.
    """
    n = len(data)
    if n <= _ASCII_LOOP_MAX:
        h = 0
        for unit in data:
            h = 31 * h + unit
        return h & _MASK32
    if n <= _ASCII_CHUNK:
        return (
            31 * int(data.translate(_HI_DIGITS), 31) + int(data.translate(_LO_DIGITS), 31)
        ) & _MASK32
    hi = data.translate(_HI_DIGITS)
    lo = data.translate(_LO_DIGITS)
    h = 0
    for start in range(0, n, _ASCII_CHUNK):
        stop = start + _ASCII_CHUNK
        chunk = 31 * int(hi[start:stop], 31) + int(lo[start:stop], 31)
        h = (h * pow(31, min(_ASCII_CHUNK, n - start), 1 << 32) + chunk) & _MASK32
    return h


def index_hash_with_prefix(prefix_hash: int, key: str) -> int:
    """``index_key_hash(prefix + key)`` given ``java_hash_u32(prefix)``.

    Java's hash is a polynomial in 31, so hash(p + k) = hash(p) * 31**len16(k) + hash(k)
    (mod 2**32), len16 counting UTF-16 code units: ``topic#`` is hashed once per topic.

    Returns:
        A value in ``[0, 2**31 - 1]``, as :func:`index_key_hash`.
    """
    if key.isascii():
        data = key.encode("ascii")
        units = len(data)
        key_hash = ascii_hash_u32(data)
    else:
        units = len(key.encode(_UTF16_NATIVE, "surrogatepass")) >> 1
        key_hash = java_hash_u32(key)
    power = _POWERS[units] if units < len(_POWERS) else pow(31, units, 1 << 32)
    return _index_abs((prefix_hash * power + key_hash) & _MASK32)


def _index_abs(h: int) -> int:
    """``Math.abs`` of the signed reading of unsigned ``h``; ``Integer.MIN_VALUE`` gives 0."""
    return h if h < _SIGN32 else ((1 << 32) - h) & _LOW31


# --- many index keys at once ---------------------------------------------------------------------
#
# Reput hashes every UNIQ_KEY and business key of every message (two or more keys a message).
# One key at a time costs ~0.7 us on the CI box, most of it interpreter overhead around four
# C calls. index_hashes_with_prefix runs Horner's rule for a whole group of equal-length keys
# at once with numpy, one character column at a time over uint32s (which wrap mod 2**32, as
# Java's int arithmetic does):
#
#     H = prefix hashes, one per key
#     for each character column i:    H = H * 31 + column_i      (mod 2**32)
#
# then Math.abs element-wise. A column costs two array operations over the group: ~75-95 ns
# a key in all for 16-32-character keys in groups of 4096, against ~190-320 ns for the
# big-int lanes this replaced and ~0.7-1.0 us one at a time. Groups below _LANES_MIN keys,
# keys longer than _LANES_MAX_UNITS and non-ASCII keys take index_hash_with_prefix.

_LANES_MIN = 48
_LANES_MAX_UNITS = 256
_THIRTY_ONE = np.uint32(31)
_SIGN = np.uint32(1 << 31)
_ABS_MASK = np.uint32(_LOW31)


def index_hashes_with_prefix(prefix_hashes: Sequence[int], keys: Sequence[str]) -> list[int]:
    """``index_hash_with_prefix(prefix_hashes[j], keys[j])`` for every ``j``, in one pass.

    Args:
        prefix_hashes: ``java_hash_u32`` of each key's prefix (``topic#``), each < 2**32.
        keys: the keys, same length as ``prefix_hashes``.

    Returns:
        The index key hashes, in the order of ``keys``.
    """
    count = len(keys)
    if count < _LANES_MIN:
        return list(map(index_hash_with_prefix, prefix_hashes, keys))
    lengths = list(map(len, keys))
    joined = "".join(keys)
    length = lengths[0]
    if length <= _LANES_MAX_UNITS and lengths.count(length) == count and joined.isascii():
        # Reput's usual group: one length (UNIQ_KEYs; business keys of one shape).
        same: list[int] = _column_hashes(prefix_hashes, joined.encode("ascii"), length).tolist()
        return same
    out = [0] * count
    if joined.isascii():
        scalar: list[int] = []
    else:  # rare: the non-ASCII keys go one by one, the rest by length as usual
        scalar = list(compress(range(count), map(_not_ascii, keys)))
        for j in scalar:
            lengths[j] = -1
    for length in set(lengths):
        if length < 0:
            continue
        if length == lengths[0] and lengths.count(length) == count:
            members: list[int] | range = range(count)
        else:
            members = list(compress(range(count), map(length.__eq__, lengths)))
        if len(members) < _LANES_MIN or length > _LANES_MAX_UNITS:
            scalar.extend(members)
            continue
        prefixes = list(map(prefix_hashes.__getitem__, members))
        group = keys if isinstance(members, range) else list(map(keys.__getitem__, members))
        hashes = _column_hashes(prefixes, "".join(group).encode("ascii"), length).tolist()
        deque(map(out.__setitem__, members, hashes), maxlen=0)  # scatter back, in C
    for j in scalar:
        out[j] = index_hash_with_prefix(prefix_hashes[j], keys[j])
    return out


def index_hash_array(prefix_hash: int, keys: Sequence[str]) -> npt.NDArray[np.int64]:
    """:func:`index_hashes_with_prefix` for keys of one topic (``prefix_hash``), as an int64
    array: reput's columns then stay arrays to the index file (``index_bulk.py``). Keys of
    one length go straight from the column scheme, with no int object per key."""
    count = len(keys)
    if count >= _LANES_MIN:
        joined = "".join(keys)
        length = len(keys[0])
        if length <= _LANES_MAX_UNITS and len(joined) == length * count and joined.isascii():
            if _all_of_length(keys, length):
                return _column_hashes([prefix_hash] * count, joined.encode("ascii"), length).astype(
                    np.int64
                )
    return np.array(index_hashes_with_prefix([prefix_hash] * count, keys), np.int64)


def _all_of_length(keys: Sequence[str], length: int) -> bool:
    lengths = list(map(len, keys))
    return lengths.count(length) == len(lengths)


def _not_ascii(key: str) -> bool:
    return not key.isascii()


def _column_hashes(
    prefix_hashes: Sequence[int], text: bytes, length: int
) -> npt.NDArray[np.uint32]:
    """Index hashes of ``len(prefix_hashes)`` ASCII keys of ``length`` bytes each, stored
    back to back in ``text`` (the column scheme described above)."""
    grid = np.frombuffer(text, np.uint8).reshape(len(prefix_hashes), length)
    return _grid_hashes(prefix_hashes, grid)


def index_hashes_of_grid(prefix_hash: int, grid: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """:func:`index_hash_array` for ASCII keys given as the rows of ``grid`` (one key a row,
    all of one length: ``key_column.FixedKeys``), with no ``str`` made.

    Args:
        prefix_hash: ``java_hash_u32`` of the keys' prefix (``topic#``).
        grid: ``(count, length)`` uint8, every byte < 128 (not checked), ``length >= 1``.

    Returns:
        The index key hashes, one per row.
    """
    if not len(grid):
        return np.zeros(0, np.int64)
    return _grid_hashes([prefix_hash] * len(grid), grid).astype(np.int64)


def index_hashes_of_ragged(
    prefix_hash: int, grid: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """:func:`index_hashes_of_grid` for ASCII keys of several lengths, right-aligned in the
    rows of ``grid`` and zero-padded on the left (``key_column.RaggedKeys``).

    Horner's rule from 0 over a row gives hash(key) whatever zeros come first; the prefix
    then adds ``prefix_hash * 31**len(key)``. One pass over the widest key's columns hashes
    every length at once, where grouping by length (index_hash_array) cost ~0.3 us a key
    for ``order-{i}`` keys of 7-10 characters (CI box).

    Args:
        prefix_hash: ``java_hash_u32`` of the keys' prefix (``topic#``).
        grid: ``(count, width)`` uint8, every byte < 128 (not checked).
        lengths: each key's length, ``1..width``.

    Returns:
        The index key hashes, one per row.
    """
    count, width = grid.shape
    if not count:
        return np.zeros(0, np.int64)
    powers = np.array(_powers(width + 1)[: width + 1], np.uint32)  # 31**k mod 2**32
    lanes = powers[lengths] * np.uint32(prefix_hash)
    hashes = np.zeros(count, np.uint32)
    for column in grid.T.astype(np.uint32):
        hashes *= _THIRTY_ONE
        hashes += column
    lanes += hashes
    negative = lanes >= _SIGN
    lanes[negative] = (np.uint32(0) - lanes[negative]) & _ABS_MASK
    return lanes.astype(np.int64)


def _grid_hashes(
    prefix_hashes: Sequence[int], grid: npt.NDArray[np.uint8]
) -> npt.NDArray[np.uint32]:
    """Index hashes of the ASCII keys in the rows of ``grid``, one prefix hash a row.

    The characters every key starts with are hashed once: hash(prefix + common + rest) =
    hash(prefix + common) * 31**len(rest) + hash(rest), so the columns start from
    hash(prefix + common) at column ``len(common)``. UNIQ_KEYs of one producer share ~28 of
    their 32 characters, business keys often a long stem."""
    count, length = grid.shape
    same = (grid == grid[0]).all(axis=0)  # the columns every key agrees on
    skip = length if same.all() else int(same.argmin())
    first = prefix_hashes[0]
    if prefix_hashes.count(first) == count:
        lanes = np.full(count, first, np.uint32)
    else:
        lanes = np.array(prefix_hashes, np.uint32)
    if skip:
        lanes *= np.uint32(pow(31, skip, 1 << 32))
        lanes += np.uint32(ascii_hash_u32(grid[0, :skip].tobytes()))
    # One row per character column (a contiguous copy: each step then reads one row).
    columns = grid[:, skip:].T.astype(np.uint32)
    for column in columns:
        lanes *= _THIRTY_ONE
        lanes += column
    # _index_abs: negative readings (bit 31 set) become (2**32 - h) & 0x7FFFFFFF.
    negative = lanes >= _SIGN
    lanes[negative] = (np.uint32(0) - lanes[negative]) & _ABS_MASK
    return lanes


def java_hash_u32(s: str) -> int:
    """Java's ``String.hashCode()`` of ``s`` as an unsigned 32-bit value (``h & 0xFFFFFFFF``).

    Args:
        s: any Python string; characters outside the BMP count as two UTF-16 units.

    Returns:
        The hash modulo ``2**32``; ``0`` for the empty string.
    """
    if s.isascii():
        return ascii_hash_u32(s.encode("ascii"))
    units = array("H", s.encode(_UTF16_NATIVE, "surrogatepass"))
    count = len(units)
    if count <= _LOOP_MAX_UNITS:
        h = 0
        for unit in units:
            h = 31 * h + unit
        return h & _MASK32
    dot: int = sum(map(mul, units[::-1], _powers(count)))
    return dot & _MASK32


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` of ``s``.

    Args:
        s: any Python string; characters outside the BMP count as two UTF-16 units.

    Returns:
        The signed 32-bit hash, in ``[-2**31, 2**31 - 1]``; ``0`` for the empty string.
    """
    h = java_hash_u32(s)
    return h - (1 << 32) if h & _SIGN32 else h


def index_key_hash(key: str) -> int:
    """IndexFile key hash (``IndexFile.indexKeyHashMethod``, spec 4.4).

    ``abs(key.hashCode())``, except that Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative,
    which RocketMQ maps to ``0``.

    Returns:
        A value in ``[0, 2**31 - 1]``.
    """
    h = java_string_hash(key)
    if h == _INT_MIN:
        return 0
    return -h if h < 0 else h


def tag_code(tags: str | None) -> int:
    """ConsumeQueue tag code of a ``TAGS`` value (spec 3.1): its hash, or 0 when absent/empty."""
    if not tags:
        return 0
    return java_string_hash(tags)
