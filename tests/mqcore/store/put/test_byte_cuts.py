"""``byte_cuts.cut`` gives exactly the slices, through the struct format and the fallback."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.store.put.byte_cuts import cut


def _slices(buf: bytes, starts: list[int], lengths: list[int]) -> list[bytes]:
    return [buf[a : a + n] for a, n in zip(starts, lengths, strict=True)]


def _cut(buf: bytes, starts: list[int], lengths: list[int]) -> list[bytes]:
    return list(cut(buf, np.array(starts, np.int64), np.array(lengths, np.int64)))


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 60)), max_size=200), st.data())
def test_pieces_in_order_are_the_slices(layout: list[tuple[int, int]], data: st.DataObject) -> None:
    starts, lengths, pos = [], [], 0
    for gap, length in layout:
        starts.append(pos + gap)
        lengths.append(length)
        pos += gap + length
    buf = data.draw(st.binary(min_size=pos, max_size=pos + 20))
    assert _cut(buf, starts, lengths) == _slices(buf, starts, lengths)


@pytest.mark.parametrize(
    ("starts", "lengths"),
    [
        ([0, 10_000], [9_999, 12_000]),  # a piece past the table's four digits
        ([0, 20_500], [10, 3]),  # a gap past it
        ([5, 0], [3, 4]),  # out of order
        ([0, 2], [4, 4]),  # overlapping
        ([0, 0, 0], [0, 0, 0]),  # empty pieces at one place
    ],
)
def test_the_slices_cases(starts: list[int], lengths: list[int]) -> None:
    buf = bytes(range(256)) * 200
    assert _cut(buf, starts, lengths) == _slices(buf, starts, lengths)


def test_nothing_to_cut() -> None:
    assert _cut(b"abc", [], []) == []
