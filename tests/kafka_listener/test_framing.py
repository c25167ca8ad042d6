"""FrameBuffer: complete frames only, size guard before buffering, in-place consumption."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_listener.framing import FrameBuffer
from mqcore.errors import RemoteProtocolError


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@given(
    st.lists(st.binary(max_size=50), max_size=10),
    st.lists(st.integers(1, 20), min_size=1, max_size=10),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(framed(p) for p in payloads)
    buf = FrameBuffer(max_frame_bytes=100)
    got: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        buf.feed(stream[pos : pos + step])
        got.extend(buf)
        pos += step
        i += 1
    assert got == payloads
    assert buf.buffered_bytes == 0


def test_partial_frame_is_held() -> None:
    buf = FrameBuffer()
    buf.feed(framed(b"abc")[:-1])
    assert buf.next_frame() is None
    assert buf.buffered_bytes == 6
    buf.feed(b"c" + framed(b"")[:2])
    assert buf.next_frame() == b"abc"
    assert buf.next_frame() is None
    buf.feed(b"\x00\x00")
    assert list(buf) == [b""]


def test_oversized_frame_raises_on_its_size_before_the_body() -> None:
    buf = FrameBuffer(max_frame_bytes=1000)
    with pytest.raises(RemoteProtocolError) as info:
        buf.feed(struct.pack(">i", 1001))  # only the size: no body was ever sent
    assert info.value.error_code == 42
    assert buf.buffered_bytes == 0
    with pytest.raises(RemoteProtocolError):
        buf.feed(b"more")  # the buffer stays broken


def test_oversized_second_frame_is_caught_in_the_same_feed() -> None:
    buf = FrameBuffer(max_frame_bytes=10)
    with pytest.raises(RemoteProtocolError):
        buf.feed(framed(b"ok") + struct.pack(">i", 11))


def test_negative_size_rejected() -> None:
    with pytest.raises(RemoteProtocolError):
        FrameBuffer().feed(b"\xff\xff\xff\xff")


def test_exact_limit_is_accepted() -> None:
    buf = FrameBuffer(max_frame_bytes=3)
    buf.feed(framed(b"abc"))
    assert buf.next_frame() == b"abc"
    with pytest.raises(ValueError):
        FrameBuffer(-1)
