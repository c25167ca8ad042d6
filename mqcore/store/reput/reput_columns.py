"""The columns reput's scan collects (``dispatch_scan.py``) and its writer reads
(``dispatch_write.write_columns``): one batch of records in CommitLog order.

The numeric fields stay numpy arrays from the scan to the files: the scan gathers them
from the record headers as arrays, the ConsumeQueue packs them as one record array
(``ConsumeQueue.put_run``) and the index takes them as they are (``index_bulk.py``). The
lists these replaced cost ~10 ns a field a record to make (``tolist``) and ~30 ns a field a
record to pack again. Topics are kept as the stretches of one topic (a batch is usually one
stretch), and a keyless run's UNIQ_KEYs as one byte grid (``key_column.FixedKeys``), a keyed
run's KEYS as one too (``FixedKeys`` or ``RaggedKeys``, ``keyed_properties.py``).

Internally a batch is a list of parts (one per run the scan framed, or per record it
walked one by one), concatenated on first read.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, groupby
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from mqcore.store.reput.key_column import FixedKeys, RaggedKeys

type Ints = npt.NDArray[np.int64]
type Keys = Sequence[str | None]

Row = tuple[str, int, int, int, int, int, int, str | None, str | None, int]
"""One record for reput, as a plain tuple (built in ~60 ns): the fields of
``dispatch_scan.DispatchRow``, in its order."""

#: The rows of a part's numbers array.
QUEUE_ID, QUEUE_OFFSET, PHYS_OFFSET, SIZE, TAGS_CODE, STORE_TIMESTAMP, SYS_FLAG = range(7)
NUMBER_FIELDS = 7


class _Part(NamedTuple):
    numbers: Ints  # (NUMBER_FIELDS, count)
    changes: list[tuple[int, str]]  # (first record, topic) of each stretch of one topic
    keys: Keys
    uniq_keys: Keys


class Columns:
    """The ``DispatchRow`` fields of a batch of records: numbers as int64 arrays, topics
    as stretches, keys as sequences. Not thread-safe (one reput thread builds and reads it).
    """

    __slots__ = ("_parts", "_count")

    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    # -- building ---------------------------------------------------------------------------

    def add_run(
        self, numbers: Ints, changes: list[tuple[int, str]], keys: Keys, uniq_keys: Keys
    ) -> None:
        """Append a run: ``numbers`` is ``(NUMBER_FIELDS, count)``, ``changes`` the first
        record (relative to the run) and topic of each stretch of one topic."""
        self._parts.append(_Part(numbers, changes, keys, uniq_keys))
        self._count += numbers.shape[1]

    def extend_rows(self, rows: Sequence[Row]) -> None:
        """Append rows (the records ``dispatch_scan._scan_records`` decoded)."""
        if not rows:
            return
        topics, *numbers_head, keys, uniq_keys, sys_flags = zip(*rows, strict=True)
        numbers = np.array([*numbers_head, sys_flags], np.int64)
        changes: list[tuple[int, str]] = []
        start = 0
        for topic, stretch in groupby(topics):
            changes.append((start, topic))
            start += sum(1 for _ in stretch)
        self.add_run(numbers, changes, list(keys), list(uniq_keys))

    def _whole(self) -> _Part:
        """The parts as one (concatenated once, then kept)."""
        parts = self._parts
        if len(parts) == 1:
            return parts[0]
        if not parts:
            empty = np.zeros((NUMBER_FIELDS, 0), np.int64)
            return _Part(empty, [], [], [])
        changes: list[tuple[int, str]] = []
        start = 0
        for part in parts:
            for first, topic in part.changes:
                if not changes or changes[-1][1] != topic:
                    changes.append((start + first, topic))
            start += part.numbers.shape[1]
        uniq = [part.uniq_keys for part in parts]
        whole = _Part(
            np.concatenate([part.numbers for part in parts], axis=1),
            changes,
            _concatenate_keys([part.keys for part in parts]),
            _concatenate_keys(uniq),
        )
        self._parts = [whole]
        return whole

    # -- reading ----------------------------------------------------------------------------

    def field(self, row: int) -> Ints:
        """One numeric field (``QUEUE_ID`` .. ``SYS_FLAG``) of every record."""
        column: Ints = self._whole().numbers[row]
        return column

    @property
    def queue_ids(self) -> Ints:
        return self.field(QUEUE_ID)

    @property
    def queue_offsets(self) -> Ints:
        return self.field(QUEUE_OFFSET)

    @property
    def phys_offsets(self) -> Ints:
        return self.field(PHYS_OFFSET)

    @property
    def sizes(self) -> Ints:
        return self.field(SIZE)

    @property
    def tags_codes(self) -> Ints:
        return self.field(TAGS_CODE)

    @property
    def store_timestamps(self) -> Ints:
        return self.field(STORE_TIMESTAMP)

    @property
    def sys_flags(self) -> Ints:
        return self.field(SYS_FLAG)

    @property
    def topic_changes(self) -> list[tuple[int, str]]:
        """``(first record, topic)`` of each stretch of one topic, in order."""
        return self._whole().changes

    @property
    def topics(self) -> list[str]:
        """Each record's topic."""
        whole = self._whole()
        topics: list[str] = []
        if not whole.changes:
            return topics
        ends = [first for first, _ in whole.changes[1:]] + [self._count]
        for (first, topic), end in zip(whole.changes, ends, strict=True):
            topics += [topic] * (end - first)
        return topics

    @property
    def keys(self) -> Keys:
        return self._whole().keys

    @property
    def uniq_keys(self) -> Keys:
        """A ``FixedKeys`` when every record of the batch came from a keyless run."""
        return self._whole().uniq_keys

    def lists(self) -> tuple[list[str], list[int], list[int], list[int], list[int], list[int], list[int], list[str | None], list[str | None], list[int]]:  # fmt: skip
        """The ten fields as lists, in ``DispatchRow`` order."""
        whole = self._whole()
        numbers: list[list[int]] = whole.numbers.tolist()
        queue_ids, queue_offsets, phys_offsets, sizes, tags_codes, times, sys_flags = numbers
        return (
            self.topics, queue_ids, queue_offsets, phys_offsets, sizes, tags_codes, times,
            list(whole.keys), list(whole.uniq_keys), sys_flags,
        )  # fmt: skip

    def rows(self) -> list[Row]:
        """The records as :data:`Row` tuples."""
        return list(zip(*self.lists(), strict=True))

    def slice(self, start: int, stop: int) -> Columns:
        """The records ``start:stop`` as new columns."""
        whole = self._whole()
        stop = min(stop, self._count)
        start = min(start, stop)
        changes = [(max(first - start, 0), topic) for first, topic in whole.changes if first < stop]
        while len(changes) > 1 and changes[1][0] == 0:  # stretches that end before start
            del changes[0]
        part = Columns()
        if stop > start:
            part.add_run(
                whole.numbers[:, start:stop],
                changes,
                whole.keys[start:stop],
                whole.uniq_keys[start:stop],
            )
        return part


def _concatenate_keys(parts: list[Keys]) -> Keys:
    """One key column of ``parts``: a ``FixedKeys`` if they all are, of one width; a
    ``RaggedKeys`` if they are all byte columns (keyed runs); else a list."""
    first = parts[0]
    if isinstance(first, FixedKeys) and all(
        isinstance(part, FixedKeys) and part.width == first.width for part in parts
    ):
        return FixedKeys.concatenate(parts)  # type: ignore[arg-type]  # all FixedKeys
    if all(isinstance(part, FixedKeys | RaggedKeys) for part in parts):
        return RaggedKeys.concatenate(parts)  # type: ignore[arg-type]  # all byte columns
    return list(chain.from_iterable(parts))
