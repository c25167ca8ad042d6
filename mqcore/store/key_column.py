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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

_JOINER = 2  # \x02: no key of a FixedKeys holds it (the scan checks)


class FixedKeys(Sequence[str]):
    """Keys of one width, as the rows of ``grid`` (ASCII, no \\x01 or \\x02: the caller
    checks). Immutable."""

    __slots__ = ("grid", "_strings")

    def __init__(self, grid: npt.NDArray[np.uint8]) -> None:
        self.grid = grid
        self._strings: list[str] | None = None

    @staticmethod
    def concatenate(parts: Sequence[FixedKeys]) -> FixedKeys:
        """The keys of ``parts`` (all of one width) in order, as one column."""
        return FixedKeys(np.concatenate([part.grid for part in parts]))

    @property
    def width(self) -> int:
        """The length of every key."""
        return int(self.grid.shape[1])

    def strings(self) -> list[str]:
        """The keys as ``str`` (made once: one decode and one split for the column)."""
        if self._strings is None:
            count, width = self.grid.shape
            joined = np.empty((count, width + 1), np.uint8)
            joined[:, :width] = self.grid
            joined[:, width] = _JOINER
            self._strings = joined.tobytes().decode("ascii").split("\x02")[:count]
        return self._strings

    def __len__(self) -> int:
        return len(self.grid)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return FixedKeys(self.grid[index])
        return self.strings()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.strings())

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False  # None above all: "None in uniq_keys" needs no strings
        return value in self.strings()

    def count(self, value: object) -> int:
        if not isinstance(value, str):
            return 0
        return self.strings().count(value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FixedKeys):
            return bool(np.array_equal(self.grid, other.grid))
        if isinstance(other, list | tuple):
            return list(other) == self.strings()
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-like, as a list

    def __repr__(self) -> str:
        return f"FixedKeys({len(self)} x {self.width})"
