"""Java's ``String.hashCode``, as the store files use it: one scalar and one vectorised form.

RocketMQ derives two on-disk values from Java's ``String.hashCode()``:

* the ConsumeQueue **tag code** (``(long) TAGS.hashCode()``, spec 3.1), and
* the IndexFile **key hash** (``abs("topic#key".hashCode())``, spec 4.4);

a broker also picks a queue by ``abs(hashCode(sharding key)) % queues``. All must be
bit-identical to the JVM's, so Python's randomised ``hash()`` is never used.
``String.hashCode()`` is the polynomial ``h = 31*h + unit`` over the string's **UTF-16 code
units** (a character outside the BMP contributes its two surrogates), wrapped to 32 bits and
read as a signed int::

    h(s) = sum(unit[i] * 31**(n-1-i) for i in range(n))  mod 2**32, then signed

Everything here is one of two forms; the rest are readings of their value (signed, ``abs``,
with a ``topic#`` prefix, cached for tags):

* **Scalar**, :func:`java_hash_u32` (one string). A plain Python loop costs roughly 60 ns per
  UTF-16 unit, so it is used only for short strings. Longer ASCII strings, which is what
  index keys and tags nearly always are, are hashed by CPython's own base conversion: write
  every byte ``u`` as two base-31 digits, ``u = 31*hi + lo`` (``hi <= 4`` for ASCII), then::

      h = 31 * int(hi digits, 31) + int(lo digits, 31)    (mod 2**32)

  which is the same polynomial ``sum(u[i] * 31**(n-1-i))``. Both digit strings come from one
  ``bytes.translate`` each, so the whole hash is four C calls (about 4x faster than a dot
  product for a 32-character UNIQ_KEY). ``int()`` is quadratic in the length and refuses
  more than ``sys.get_int_max_str_digits()`` digits (640 at the lowest), so strings are cut
  into chunks of at most 256 bytes, combined as ``h = h * 31**len(chunk) + hash(chunk)``.
  Other strings use a C-level dot product (``sum(map(mul, ...))``) with precomputed powers
  of 31 modulo 2**32 (short ones the loop).
* **Vectorised**, :func:`_rows_u32` (many ASCII keys at once, for reput's index writes):
  Horner's rule with numpy, one character column at a time over uint32s (which wrap mod
  2**32, as Java's int arithmetic does), the keys right-aligned in the rows of a zero-padded
  grid (leading zeros leave Horner's sum unchanged), so keys of every length go in one pass.
  A column costs two array operations over all keys: about 10x less a key than one at a
  time. Keys given as ``str`` are laid into such a grid; groups of fewer than
  :data:`_LANES_MIN` keys, non-ASCII keys and keys over :data:`_LANES_MAX_UNITS` take the
  scalar form.

Nothing is cached per key (index keys are mostly unique, so a cache would only grow); tag
codes are (a small vocabulary), up to :data:`_TAG_CODES_MAX` tags.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from operator import mul

import numpy as np
import numpy.typing as npt

__all__ = [
    "index_hash_array",
    "index_hash_with_prefix",
    "index_hashes_of_grid",
    "index_hashes_of_ragged",
    "index_hashes_with_prefix",
    "index_key_hash",
    "java_hash_u32",
    "java_string_hash",
    "tag_code",
    "tag_codes",
]

_MASK32 = 0xFFFFFFFF
_SIGN32 = 0x80000000
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


def _ascii_u32(data: bytes) -> int:
    """:func:`java_hash_u32` of ASCII text given as bytes (the base-31 conversion above).

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


# --- the scalar form and its readings -------------------------------------------------------------


def java_hash_u32(s: str) -> int:
    """Java's ``String.hashCode()`` of ``s`` as an unsigned 32-bit value (``h & 0xFFFFFFFF``).

    Args:
        s: any Python string; characters outside the BMP count as two UTF-16 units.

    Returns:
        The hash modulo ``2**32``; ``0`` for the empty string.
    """
    if s.isascii():
        return _ascii_u32(s.encode("ascii"))
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
    return _index_abs(java_hash_u32(key))


def index_hash_with_prefix(prefix_hash: int, key: str) -> int:
    """``index_key_hash(prefix + key)`` given ``java_hash_u32(prefix)``.

    Java's hash is a polynomial in 31, so hash(p + k) = hash(p) * 31**len16(k) + hash(k)
    (mod 2**32), len16 counting UTF-16 code units: ``topic#`` is hashed once per topic.

    Returns:
        A value in ``[0, 2**31 - 1]``, as :func:`index_key_hash`.
    """
    if key.isascii():
        units = len(key)
        key_hash = _ascii_u32(key.encode("ascii"))
    else:
        units = len(key.encode(_UTF16_NATIVE, "surrogatepass")) >> 1
        key_hash = java_hash_u32(key)
    power = _POWERS[units] if units < len(_POWERS) else pow(31, units, 1 << 32)
    return _index_abs((prefix_hash * power + key_hash) & _MASK32)


def _index_abs(h: int) -> int:
    """``Math.abs`` of the signed reading of unsigned ``h``; ``Integer.MIN_VALUE`` gives 0."""
    return h if h < _SIGN32 else ((1 << 32) - h) & _LOW31


# Tag codes by tag: a small vocabulary, so one lookup instead of a hash. None and "" (no
# TAGS) are code 0, so a column of tags maps in one pass with ``map(_TAG_CODES.get, ...)``.
_TAG_CODES: dict[str | None, int] = {None: 0, "": 0}
_TAG_CODES_MAX = 4096


def tag_code(tags: str | None) -> int:
    """ConsumeQueue tag code of a ``TAGS`` value (spec 3.1): its hash, or 0 when absent/empty."""
    code = _TAG_CODES.get(tags)
    if code is None:
        code = java_string_hash(tags)  # type: ignore[arg-type]  # None is in the cache
        if len(_TAG_CODES) < _TAG_CODES_MAX:
            _TAG_CODES[tags] = code
    return code


def tag_codes(tags: Sequence[str | None]) -> list[int]:
    """:func:`tag_code` of each of ``tags`` (reput's column of a run)."""
    codes = list(map(_TAG_CODES.get, tags))
    if None in codes:
        return list(map(tag_code, tags))
    return codes  # type: ignore[return-value]  # None ruled out


# --- the vectorised form --------------------------------------------------------------------------

_LANES_MIN = 48
_LANES_MAX_UNITS = 256
_THIRTY_ONE = np.uint32(31)
_SIGN = np.uint32(1 << 31)
_ABS_MASK = np.uint32(_LOW31)

type _U32 = npt.NDArray[np.uint32]
type _I64 = npt.NDArray[np.int64]


def _rows_u32(prefixes: int | _U32, grid: npt.NDArray[np.uint8], lengths: _I64 | None) -> _U32:
    """``java_hash_u32(prefix + key)`` of the ASCII keys right-aligned in the rows of ``grid``.

    Args:
        prefixes: ``java_hash_u32`` of the keys' prefix (``topic#``): one, or one per row.
        grid: ``(count, width)`` uint8, ``count >= 1``, every byte < 128 (not checked), each
            key in the last ``length`` columns of its row, zeros before it.
        lengths: each key's length, ``0..width``; None when every key is ``width`` long.

    Horner's rule from 0 over a row gives hash(key) whatever zeros come first, and
    hash(prefix + key) = hash(prefix) * 31**len(key) + hash(key). The columns every row agrees
    on are hashed once when the keys have one length (UNIQ_KEYs of one producer share ~28 of
    their 32 characters, business keys often a long stem): the rows start from that hash at
    the first column that differs.
    """
    count, width = grid.shape
    skip = 0
    if lengths is None:  # right-aligned keys of several lengths seldom agree on a column
        same = (grid == grid[0]).all(axis=0)  # the columns every key agrees on
        skip = width if same.all() else int(same.argmin())
    lanes = np.full(count, _ascii_u32(grid[0, :skip].tobytes()), np.uint32)
    # One row per character column (a contiguous copy: each step then reads one row).
    for column in grid[:, skip:].T.astype(np.uint32):
        lanes *= _THIRTY_ONE
        lanes += column
    if lengths is None and isinstance(prefixes, int):
        lanes += np.uint32(prefixes * pow(31, width, 1 << 32) & _MASK32)
    elif lengths is None:
        lanes += prefixes * np.uint32(pow(31, width, 1 << 32))
    else:
        shifts = np.array(_powers(width + 1)[: width + 1], np.uint32)[lengths]
        lanes += shifts * (np.uint32(prefixes) if isinstance(prefixes, int) else prefixes)
    return lanes


def _index_abs_array(lanes: _U32) -> _I64:
    """:func:`_index_abs` of each of ``lanes``, as int64 (modifies ``lanes``)."""
    negative = lanes >= _SIGN
    lanes[negative] = (np.uint32(0) - lanes[negative]) & _ABS_MASK
    return lanes.astype(np.int64)


def index_hashes_of_grid(prefix_hash: int, grid: npt.NDArray[np.uint8]) -> _I64:
    """:func:`index_hash_with_prefix` of ASCII keys of one length given as the rows of
    ``grid`` (``key_column.FixedKeys``), with no ``str`` made.

    Args:
        prefix_hash: ``java_hash_u32`` of the keys' prefix (``topic#``).
        grid: ``(count, length)`` uint8, every byte < 128 (not checked).

    Returns:
        The index key hashes, one per row.
    """
    if not len(grid):
        return np.zeros(0, np.int64)
    return _index_abs_array(_rows_u32(prefix_hash, grid, None))


def index_hashes_of_ragged(prefix_hash: int, grid: npt.NDArray[np.uint8], lengths: _I64) -> _I64:
    """:func:`index_hashes_of_grid` for ASCII keys of several lengths, right-aligned in the
    rows of ``grid`` and zero-padded on the left (``key_column.RaggedKeys``).

    Args:
        prefix_hash: ``java_hash_u32`` of the keys' prefix (``topic#``).
        grid: ``(count, width)`` uint8, every byte < 128 (not checked).
        lengths: each key's length, ``1..width``.

    Returns:
        The index key hashes, one per row.
    """
    if not len(grid):
        return np.zeros(0, np.int64)
    return _index_abs_array(_rows_u32(prefix_hash, grid, lengths))


def index_hashes_with_prefix(prefix_hashes: Sequence[int], keys: Sequence[str]) -> list[int]:
    """``index_hash_with_prefix(prefix_hashes[j], keys[j])`` for every ``j``, in one pass.

    Args:
        prefix_hashes: ``java_hash_u32`` of each key's prefix (``topic#``), each < 2**32.
        keys: the keys, same length as ``prefix_hashes``.

    Returns:
        The index key hashes, in the order of ``keys``.
    """
    if len(keys) < _LANES_MIN:
        return list(map(index_hash_with_prefix, prefix_hashes, keys))
    hashes: list[int] = _keys_hashes(prefix_hashes, keys).tolist()
    return hashes


def index_hash_array(prefix_hash: int, keys: Sequence[str]) -> _I64:
    """:func:`index_hashes_with_prefix` for keys of one topic (``prefix_hash``), as an int64
    array: reput's columns then stay arrays to the index file (``index_bulk.py``)."""
    if len(keys) < _LANES_MIN:
        return np.array([index_hash_with_prefix(prefix_hash, key) for key in keys], np.int64)
    return _keys_hashes(prefix_hash, keys)


def _keys_hashes(prefix: int | Sequence[int], keys: Sequence[str]) -> _I64:
    """Index hashes of ``keys`` (``len(keys) >= 1``), with one prefix hash or one per key:
    the regular keys (ASCII, at most :data:`_LANES_MAX_UNITS`) laid into one grid, the others
    one by one."""
    count = len(keys)
    joined = "".join(keys)
    lengths = list(map(len, keys))
    width = lengths[0]
    one_length = lengths.count(width) == count
    if not one_length:
        width = max(lengths)
    if joined.isascii() and width <= _LANES_MAX_UNITS:
        prefixes = prefix if isinstance(prefix, int) else np.array(prefix, np.uint32)
        text = np.frombuffer(joined.encode("ascii"), np.uint8)
        if one_length:  # reput's usual column (UNIQ_KEYs)
            return _index_abs_array(_rows_u32(prefixes, text.reshape(count, width), None))
        sizes = np.array(lengths, np.int64)
        grid = np.zeros((count, width), np.uint8)
        # Key j's bytes go to the last sizes[j] cells of row j.
        row_end = np.arange(1, count + 1, dtype=np.int64) * width
        shift = np.repeat(row_end - np.cumsum(sizes), sizes)
        grid.reshape(-1)[np.arange(len(text), dtype=np.int64) + shift] = text
        return _index_abs_array(_rows_u32(prefixes, grid, sizes))
    # Rare: the regular keys as above, the others one by one.
    each = [prefix] * count if isinstance(prefix, int) else prefix
    regular = [j for j, key in enumerate(keys) if key.isascii() and len(key) <= _LANES_MAX_UNITS]
    out = np.empty(count, np.int64)
    if regular:
        out[regular] = _keys_hashes([each[j] for j in regular], [keys[j] for j in regular])
    for j in sorted(set(range(count)).difference(regular)):
        out[j] = index_hash_with_prefix(each[j], keys[j])
    return out
