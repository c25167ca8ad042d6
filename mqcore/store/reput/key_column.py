"""A column of fixed-width ASCII keys kept as one byte grid: reput's UNIQ_KEYs.

A keyless Kafka record's PROPERTIES are ``UNIQ_KEY\\x01<32 hex digits>\\x02``, the same
length for every record of a run, so reput's scan (``dispatch_scan.py``) can read the
UNIQ_KEYs of a run as the columns of one ``(count, width)`` uint8 array, and the index
(``IndexService.build_index_many``) can hash them straight from it
(``hashing.index_hashes_of_grid``): no ``str`` per record at all. A ``str`` per key costs
~60 ns to make and, in a batch of thousands, a cache miss or two each time a later pass
touches it again (``map(len, keys)`` over 20k such keys took ~130 ns a key).

:class:`FixedKeys` is still a ``Sequence[str]``: anything else that reads it (the rows of a
mixed run, tools, tests) gets the strings, made on first use, all at once.

A keyed run's KEYS (``keyed_properties.py``) are a :class:`FixedKeys` when they all have
one length (``order-000123``), else a :class:`RaggedKeys`: right-aligned rows with their
lengths, hashed in one pass whatever the lengths (``hashing.index_hashes_of_ragged``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

_JOINER = 2  # \x02: no key of a FixedKeys holds it (the scan checks)


class _KeyGrid(Sequence[str]):
    """What both key columns share: a ``Sequence[str]`` whose strings are made on first
    use, all at once (:meth:`_make_strings`), and whose slices stay columns (:meth:`_rows`).
    ``in`` and ``count`` of a non-string (``None in uniq_keys``) need no strings."""

    __slots__ = ("grid", "_strings")

    def __init__(self, grid: npt.NDArray[np.uint8]) -> None:
        self.grid = grid
        self._strings: list[str] | None = None

    def _make_strings(self) -> list[str]:
        raise NotImplementedError

    def _rows(self, index: slice) -> Sequence[str]:
        raise NotImplementedError

    def strings(self) -> list[str]:
        """The keys as ``str``, made once."""
        if self._strings is None:
            self._strings = self._make_strings()
        return self._strings

    def __len__(self) -> int:
        return len(self.grid)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return self._rows(index)
        return self.strings()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings())

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        return value in self.strings()

    def count(self, value: object) -> int:
        if not isinstance(value, str):
            return 0
        return self.strings().count(value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _KeyGrid | list | tuple):
            return list(other) == self.strings()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-like, as a list


class FixedKeys(_KeyGrid):
    """Keys of one width, as the rows of ``grid`` (ASCII, no \x01 or \x02: the caller
    checks). Immutable."""

    __slots__ = ()

    @staticmethod
    def concatenate(parts: Sequence[FixedKeys]) -> FixedKeys:
        """The keys of ``parts`` (all of one width) in order, as one column."""
        return FixedKeys(np.concatenate([part.grid for part in parts]))

    @property
    def width(self) -> int:
        """The length of every key."""
        return int(self.grid.shape[1])

    def _make_strings(self) -> list[str]:
        # One decode and one split for the column.
        count, width = self.grid.shape
        joined = np.empty((count, width + 1), np.uint8)
        joined[:, :width] = self.grid
        joined[:, width] = _JOINER
        return joined.tobytes().decode("ascii").split("\x02")[:count]

    def _rows(self, index: slice) -> FixedKeys:
        return FixedKeys(self.grid[index])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FixedKeys):
            return bool(np.array_equal(self.grid, other.grid))
        return super().__eq__(other)

    def __repr__(self) -> str:
        return f"FixedKeys({len(self)} x {self.width})"


class RaggedKeys(_KeyGrid):
    """Keys of several lengths (reput's keyed runs: ``order-9``, ``order-10``), as the rows of
    ``grid`` right-aligned and zero-padded on the left, with each key's length: Java's hash
    is Horner's rule, so the zeros before a key add nothing to a hash started at 0
    (``hashing.index_hashes_of_ragged``), and one pass over the columns hashes every
    length at once. ASCII, no \x01, \x02 or space (the caller checks). Immutable."""

    __slots__ = ("lengths",)

    def __init__(self, grid: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> None:
        super().__init__(grid)
        self.lengths = lengths

    @staticmethod
    def concatenate(parts: Sequence[FixedKeys | RaggedKeys]) -> RaggedKeys:
        """The keys of ``parts`` in order, as one column (each right-aligned again to the
        widest)."""
        width = max(int(part.grid.shape[1]) for part in parts)
        grids = []
        lengths = []
        for part in parts:
            grid = part.grid
            pad = width - grid.shape[1]
            if pad:
                grid = np.concatenate((np.zeros((len(grid), pad), np.uint8), grid), axis=1)
            grids.append(grid)
            if isinstance(part, RaggedKeys):
                lengths.append(part.lengths)
            else:
                lengths.append(np.full(len(grid), part.width, np.int64))
        return RaggedKeys(np.concatenate(grids), np.concatenate(lengths))

    def _make_strings(self) -> list[str]:
        # The key bytes, each followed by \x02, picked out with one mask, decoded and
        # split once.
        count, width = self.grid.shape
        joined = np.empty((count, width + 1), np.uint8)
        joined[:, :width] = self.grid
        joined[:, width] = _JOINER
        keep = np.ones((count, width + 1), np.bool_)
        keep[:, :width] = np.arange(width) >= (width - self.lengths)[:, None]
        return joined[keep].tobytes().decode("ascii").split("\x02")[:count]

    def _rows(self, index: slice) -> RaggedKeys:
        return RaggedKeys(self.grid[index], self.lengths[index])

    def __repr__(self) -> str:
        return f"RaggedKeys({len(self)} up to {self.grid.shape[1]})"
