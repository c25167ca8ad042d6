"""Split a byte stream into Kafka frames (``int32 size`` + ``size`` bytes), h2-style.

Layout of one frame (both directions)::

    0       4                    4 + size
    | size  | header + body ...  |
      int32 big-endian, counts the bytes after itself

Invariants:

* :meth:`FrameBuffer.feed` appends to one ``bytearray`` and cuts every complete frame out
  of it; the consumed prefix is deleted in place once per feed (not once per frame, which
  would be quadratic for many small pipelined requests).
* The size of the next frame is checked **as soon as its 4 bytes arrive**, before any of
  its body is buffered beyond the chunk that carried it: a negative size or one above
  ``max_frame_bytes`` raises :class:`~mqcore.errors.RemoteProtocolError`, so a peer cannot
  make us hold 2 GiB by announcing it (Kafka's ``socket.request.max.bytes``, default
  104857600, guards the same way and closes the connection).
* After an error the buffer stays broken: every later call raises again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from mqcore.errors import RemoteProtocolError

from .errors import ErrorCode
from .primitives import INT32

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # Kafka's socket.request.max.bytes default
SIZE_BYTES = INT32.size


class FrameBuffer:
    """Accumulates received bytes and yields complete frame payloads (without the size).

    Not thread-safe; one per connection.
    """

    __slots__ = ("_buf", "_frames", "_error", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._frames: deque[bytes] = deque()
        self._error: RemoteProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held that do not yet form a complete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes; complete frames become available through iteration.

        Raises:
            RemoteProtocolError: a frame size is negative or above ``max_frame_bytes``
                (``error_code`` INVALID_REQUEST); the buffer is unusable afterwards.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= SIZE_BYTES:
            (size,) = INT32.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame_bytes:
                self._error = RemoteProtocolError(
                    f"frame size {size} outside 0..{self.max_frame_bytes}",
                    ErrorCode.INVALID_REQUEST,
                )
                del buf[:]
                raise self._error
            stop = pos + SIZE_BYTES + size
            if stop > end:
                break
            with memoryview(buf) as view:  # one copy of the payload (a slice would be two)
                self._frames.append(bytes(view[pos + SIZE_BYTES : stop]))
            pos = stop
        if pos:
            del buf[:pos]

    def next_frame(self) -> bytes | None:
        """Pop the oldest complete frame payload, or ``None`` if there is none yet."""
        return self._frames.popleft() if self._frames else None

    def __iter__(self) -> Iterator[bytes]:
        """Yield and remove every complete frame currently buffered."""
        frames = self._frames
        while frames:
            yield frames.popleft()
