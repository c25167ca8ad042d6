"""The TOTALSIZE chain: where records start, followed from a known record start.

Records follow each other with no gap, so from a record start the next one is TOTALSIZE
bytes on (spec 1.1). A walk from ``start`` takes the record at position ``q`` while

* ``q < stop`` and fewer than ``max_records`` records are taken (``stop`` is the caller's:
  the last position a record may start at, plus one; 4 bytes from each ``q < stop`` must be
  readable), and
* its TOTALSIZE is at least ``MIN_RECORD_SIZE`` and, when ``end`` is given, the record ends
  at or before ``end`` (reput: the written bytes; the pipeline gives none, since a chunk's
  last record may run on past the bytes it read),

and answers the positions taken (relative to ``start``) and the position after the last one
(where the chain ended, or the first record not taken). Nothing else is checked here: the
callers check the magic codes and the rest of the framing of the records found (reput's
``_frame_run``, the pipeline's ``_cut``). Reput (``mqcore/store/reput/dispatch_scan.py``) and
the Spark pipeline (``pipeline/segments.py``) both walk with :func:`walk`.

Two forms of the one walk, which the tests keep equal on many shapes (``test_chain.py``):

* :func:`walk_reference`: record by record, the definition above in Python (~0.17 us a
  record).
* :func:`walk`: guess record starts, then check every guess against the chain itself, so a
  guess is only a place to look, never believed:

  - **Stretches of one size.** Records of one size come in long stretches (one producer's
    messages, one key length): the chain is guessed as that stride from the current start
    and checked with one gather of the TOTALSIZEs there; the leading run of matches is
    taken, and the next stride guessed (~3-5 us a guess, ~25 records in Python). Guessing
    goes on :data:`_GUESSES` times, then while the stretches stay long.
  - **Lanes**, for what is left when the stretches are short (sizes vary record to record)
    and the walk is an unbounded one over a large chunk whose absolute position ``base`` is
    known (the pipeline's 16 MiB chunks): see :func:`_lane_walk`. About 3x faster than
    Python for mixed sizes.
  - Whatever neither takes is walked by :func:`walk_reference`.

  The one rule that picks among them is in :func:`walk`.

Thread-safety: pure functions; arrays over ``data`` never outlive a call (an ``mmap`` cannot
be closed while exported).
"""

from __future__ import annotations

import mmap
from typing import Final

import numpy as np
import numpy.typing as npt

from mqcore.format.layout import (
    INT32,
    MAGIC_POSITION,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    PHYS_OFFSET_POSITION,
)

__all__ = ["candidates", "walk", "walk_reference"]

type I64 = npt.NDArray[np.int64]
type Data = bytes | bytearray | memoryview | mmap.mmap

_GUESSES: Final = 4
"""Stride guesses made at least; after that, guessing goes on while a guess held for
:data:`_STRETCH_MIN` records or more (keys ``order-{i}``: a stretch per key length)."""
_STRETCH_MIN: Final = 16
_STRETCH_MAX: Final = 2048
"""Records one stride guess checks at most: one gather that stays in the CPU caches, and
little lost when a guess breaks early."""

_MAGIC_BYTES = tuple(
    m.to_bytes(4, "big", signed=True) for m in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
)
# V1 and V2 magics share their first three bytes and differ in the last.
assert _MAGIC_BYTES[0][:3] == _MAGIC_BYTES[1][:3]
_LANE_RECORDS: Final = 16
"""Records per lane (nominal): the lane walk costs one numpy step per record of the widest
lane, plus per lane a window search; 16 balances them (8 and 32 are both ~20% slower)."""
_LANE_MIN_BYTES: Final = 16 * 1024
"""Below this many bytes left, lanes are not tried (too few lanes to be worth it)."""
_MAX_STEPS: Final = 16 * _LANE_RECORDS
"""A lane holding more records than this (records much smaller than the first, or lanes
merged because their windows held no record start) sends the rest to the reference walk."""
_PHYS_READ: Final = PHYS_OFFSET_POSITION + 8  # bytes a lane guess needs: magic and PHYSICALOFFSET


def walk_reference(
    data: Data, start: int, stop: int, *, end: int | None = None, max_records: int | None = None
) -> tuple[list[int], int]:
    """The TOTALSIZE chain from ``start``, record by record (module doc for the arguments).

    Returns:
        The record starts relative to ``start``, and the position after the last one.
    """
    positions: list[int] = []
    q = start
    count = len(data) if max_records is None else max_records
    total_of = INT32.unpack_from
    while q < stop and len(positions) < count:
        total = total_of(data, q)[0]
        if total < MIN_RECORD_SIZE or (end is not None and total > end - q):
            break
        positions.append(q - start)
        q += total
    return positions, q


def walk(
    data: Data,
    start: int,
    stop: int,
    *,
    end: int | None = None,
    max_records: int | None = None,
    base: int | None = None,
) -> tuple[I64, int]:
    """:func:`walk_reference`, vectorised (module doc): same arguments, same answer.

    Args:
        base: the absolute CommitLog offset of ``data[0]``, if known: lanes check their
            guesses' PHYSICALOFFSET against it.

    Returns:
        The record starts relative to ``start`` (int64), and the position after the last one.
    """
    cap = len(data) if max_records is None else max_records
    if start >= stop or cap <= 0:
        return np.zeros(0, np.int64), start
    octets = np.frombuffer(data, np.uint8)
    # TOTALSIZE at each position from ``start`` on: indexed by the relative positions found.
    totals = np.ndarray((len(octets) - start - 3,), ">i4", octets, start, (1,))
    q = start
    stretches: list[I64] = []
    taken = same = guesses = 0
    ended = False  # the chain ended: a TOTALSIZE that is not a record's
    while taken < cap and (guesses < _GUESSES or same >= _STRETCH_MIN):
        if q >= stop:
            break
        stride = int(totals[q - start])
        if stride < MIN_RECORD_SIZE or (end is not None and stride > end - q):
            ended = True
            break
        # Record i of the guess starts at q + i * stride: before stop and, being stride
        # long, ending by ``end``.
        count = min(cap - taken, _STRETCH_MAX, (stop - q + stride - 1) // stride)
        if end is not None:
            count = min(count, (end - q) // stride)
        guess = np.arange(q - start, q - start + count * stride, stride, dtype=np.int64)
        held = totals[guess] == stride
        same = count if held.all() else int(held.argmin())
        stretches.append(guess[:same])
        taken += same
        q += same * stride
        guesses += 1
        if same < _STRETCH_MIN and _lanes_apply(stop - q, max_records, base):
            break  # sizes vary: the lanes take the rest
    found = np.concatenate(stretches) if stretches else np.zeros(0, np.int64)
    if ended or taken == cap or q >= stop:
        return found, q
    if base is not None and _lanes_apply(stop - q, max_records, base):
        lanes = _lane_walk(octets[q:], stop - q - 1, base + q, None if end is None else end - q)
        if lanes is not None:
            at, q_end = lanes
            return np.concatenate((found, at + (q - start))), q + q_end
    rest, q_end = walk_reference(data, q, stop, end=end, max_records=cap - taken)
    if rest:
        found = np.concatenate((found, np.array(rest, np.int64) + (q - start)))
    return found, q_end


def _lanes_apply(left: int, max_records: int | None, base: int | None) -> bool:
    """The rule for lanes: an unbounded walk (no ``max_records``) over at least
    :data:`_LANE_MIN_BYTES` whose ``base`` is known (the guesses need it)."""
    return max_records is None and base is not None and left >= _LANE_MIN_BYTES


def _lane_starts(octets: npt.NDArray[np.uint8], limit: int, base: int, first: int) -> I64:
    """Lane starts: 0, then per lane the first self-located magic in its window.

    Lanes whose window holds no such position are left out (the lane before runs on).
    """
    width = _LANE_RECORDS * first
    window = min(width, 2 * first)
    # Window i covers [(i + 1) * width, + window): its candidates must be <= limit, and the
    # magic and PHYSICALOFFSET of each must be readable.
    last = min(limit, len(octets) - _PHYS_READ) - window + 1
    count = max(last // width, 0)
    if count == 0:
        return np.zeros(1, np.int64)
    grid = np.lib.stride_tricks.as_strided(
        octets[width + MAGIC_POSITION :], (count, window), (width, 1), writeable=False
    )
    # One flat search over the windows (np.nonzero of the 2-D grid is ~10x slower).
    lane, column = np.divmod(np.flatnonzero(grid == _MAGIC_BYTES[0][0]), window)
    at = (lane + 1) * width + column
    keep = (octets[at + MAGIC_POSITION + 1] == _MAGIC_BYTES[0][1]) & (
        octets[at + MAGIC_POSITION + 2] == _MAGIC_BYTES[0][2]
    )
    fourth = octets[at + MAGIC_POSITION + 3]
    keep &= (fourth == _MAGIC_BYTES[0][3]) | (fourth == _MAGIC_BYTES[1][3])
    lane, at = lane[keep], at[keep]
    phys = np.ndarray((len(octets) - 7,), ">i8", octets, 0, (1,))[at + PHYS_OFFSET_POSITION]
    self_located = phys == at + base
    lane, at = lane[self_located], at[self_located]
    # np.nonzero is row-major: the first hit of each lane is where its lane number changes.
    first_of_lane = np.ones(len(lane), np.bool_)
    first_of_lane[1:] = lane[1:] != lane[:-1]
    return np.concatenate(([0], at[first_of_lane]))


def _lane_walk(
    octets: npt.NDArray[np.uint8], limit: int, base: int, end: int | None
) -> tuple[I64, int] | None:
    """The chain from ``octets[0]`` (a record start) while at most ``limit``, by lanes:
    (record starts, position after the last), or None where the lanes cannot tell.

    The bytes are cut into lanes about :data:`_LANE_RECORDS` records wide. Each lane after
    the first starts at a *guess*: the first position in a small window at the lane's
    nominal start that has a message magic code 4 bytes on and whose PHYSICALOFFSET names
    that very position (``base`` is ``octets[0]``'s). All lanes are then walked together,
    one numpy step per record of a lane (~20 steps over ~3,500 lanes for a 16 MiB chunk of
    300-byte records; a lane leaves the walk when it ends), and every lane must end
    *exactly* on the next lane's start. Lane 0 starts at a true record start, so by
    induction every lane start is on the true chain and the concatenation is the chain
    itself. A lane that overshoots, or whose chain ends before the lane does, gives None.
    Cost: ~2 ms a 16 MiB chunk of 300-byte records, against ~8 ms record by record.
    """
    totals = np.ndarray((len(octets) - 3,), ">i4", octets, 0, (1,))
    first = int(totals[0])
    if first < MIN_RECORD_SIZE or first > limit // (2 * _LANE_RECORDS):
        return None
    starts = _lane_starts(octets, limit, base, first)
    if len(starts) < 2:
        return None
    # Lane i runs while below stop[i]; the last lane to the limit, or a chain end.
    stop = np.append(starts[1:], limit + 1)
    last = len(starts) - 1
    lanes, at = np.arange(len(starts)), starts
    q_end = -1
    walked: list[tuple[I64, I64]] = []  # per step: the lanes still going, their positions
    for _ in range(_MAX_STEPS + 1):
        if not len(lanes):
            break
        size = totals[at].astype(np.int64)
        short = size < MIN_RECORD_SIZE
        if end is not None:
            short |= size > end - at
        if short.any():
            if short[:-1].any() or lanes[-1] != last:
                return None  # the chain ends inside a lane: only the last lane may end so
            q_end = int(at[-1])  # not a record: the chain ends there
            lanes, at, size = lanes[:-1], at[:-1], size[:-1]
        walked.append((lanes, at))
        at = at + size
        going = at < stop[lanes]
        if not going.all():
            ended = ~going
            if lanes[-1] == last and ended[-1]:
                q_end = int(at[-1])  # past the limit
                ended[-1] = False
            if not (at[ended] == stop[lanes[ended]]).all():
                return None  # a lane overshot the next lane's start: that guess was no record
            lanes, at = lanes[going], at[going]
    else:
        return None
    # Lane-major order: lane l's record from step s goes to offset[l] + s.
    counts = np.bincount(np.concatenate([lanes for lanes, _ in walked]), minlength=last + 1)
    offset = np.zeros(last + 1, np.int64)
    np.cumsum(counts[:-1], out=offset[1:])
    found = np.empty(int(counts.sum()), np.int64)
    for step, (lanes, at) in enumerate(walked):
        found[offset[lanes] + step] = at
    return found, q_end


def candidates(data: Data) -> tuple[I64, I64]:
    """Likely record starts in ``data`` (a message magic code 4 bytes on) and their TOTALSIZE.

    For finding a first record where no chain is known (the pipeline's range starts): each
    candidate still needs checking, by its PHYSICALOFFSET and what follows it.
    """
    octets = np.frombuffer(data, np.uint8)
    if len(octets) < MIN_RECORD_SIZE:
        empty = np.zeros(0, np.int64)
        return empty, empty
    # The rare first byte is searched first.
    at = np.flatnonzero(octets[MAGIC_POSITION : len(octets) - 3] == _MAGIC_BYTES[0][0])
    for i in (1, 2):
        at = at[octets[at + MAGIC_POSITION + i] == _MAGIC_BYTES[0][i]]
    totals = np.ndarray((len(octets) - 3,), ">i4", octets, 0, (1,))[at].astype(np.int64)
    return at, totals
