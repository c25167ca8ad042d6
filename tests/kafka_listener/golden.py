"""Hand-built byte fixtures shared by the kafka_listener tests (from kafka-protocol.md)."""

from __future__ import annotations


def h(text: str) -> bytes:
    """Hex with spaces and newlines allowed."""
    return bytes.fromhex("".join(text.split()))


def text(s: str) -> str:
    return s.encode().hex()


# kafka-protocol.md section 3.4: 2 records, no compression, built by kafka-python.
SPEC_BATCH = h(
    """00000000 00000000  0000004a  00000000  02  35b75e8c  0000  00000001
    0000018bcfe56800  0000018bcfe56805  ffffffffffffffff  ffff  ffffffff  00000002
    18 00 00 00 02 6b 02 76 02 02 68 02 78
    16 00 0a 02 01 0a 68656c6c6f 00"""
)
