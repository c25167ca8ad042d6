"""BODYCRC: zlib's CRC-32 of a record's body, masked to 31 bits (RocketMQ's ``UtilAll.crc32``).

The CRC is computed by ISA-L (the ``isal`` package) instead of the standard library's
``zlib.crc32``: the same function of the bytes (``test_body_crc.py`` compares them), folded
with SIMD carry-less multiplies. On a 100-byte body, the produce path's usual one, a call
costs ~45 ns against ~170 ns for ``zlib.crc32`` (``bench/engine.py``'s put rows; Python
3.12's zlib 1.2.13 here), and the put of such a body spends more on its CRC than on
anything else but the copy.

Thread-safety: pure functions.
"""

from __future__ import annotations

from isal.isal_zlib import crc32

__all__ = ["BODY_CRC_MASK", "body_crc", "crc32"]

BODY_CRC_MASK = 0x7FFFFFFF


def body_crc(data: bytes | bytearray | memoryview) -> int:
    """The masked CRC-32 of ``data``, as BODYCRC holds it (always ``>= 0``)."""
    return crc32(data) & BODY_CRC_MASK
