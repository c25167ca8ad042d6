"""BODYCRC: zlib's CRC-32 of a record's body, masked to 31 bits (RocketMQ's ``UtilAll.crc32``).

The one place a body's CRC is computed: every encoder, check and reader takes these
functions (one scalar, one over many bodies; hot loops that pack headers one by one take
:func:`crc32` and fold :data:`BODY_CRC_MASK` themselves, which saves a call a record).

The CRC is computed by ISA-L (the ``isal`` package) instead of the standard library's
``zlib.crc32``: the same function of the bytes (``test_body_crc.py`` compares them), folded
with SIMD carry-less multiplies, about 4x faster on a 100-byte body, the produce path's
usual one. A put of such a body spends more on its CRC than on anything else but the copy.

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from isal.isal_zlib import crc32

__all__ = ["BODY_CRC_MASK", "body_crc", "body_crc_array", "body_crcs", "crc32"]

BODY_CRC_MASK = 0x7FFFFFFF

type Buffer = bytes | bytearray | memoryview


def body_crc(data: Buffer) -> int:
    """The masked CRC-32 of ``data``, as BODYCRC holds it (always ``>= 0``)."""
    return crc32(data) & BODY_CRC_MASK


def body_crcs(bodies: Iterable[Buffer]) -> list[int]:
    """:func:`body_crc` of each body, as a list (for headers packed one by one)."""
    return [crc32(body) & BODY_CRC_MASK for body in bodies]


def body_crc_array(bodies: Iterable[Buffer], count: int) -> npt.NDArray[np.int64]:
    """:func:`body_crc` of each of ``count`` bodies, as an int64 array (for the columnar
    encoders and the pipeline's vectorised check)."""
    crcs = np.fromiter(map(crc32, bodies), np.int64, count)
    crcs &= BODY_CRC_MASK
    return crcs
