"""Flow control of Kafka connections, sans I/O: a cap on the request bytes all connections
hold together, and idleness.

**Buffered bytes.** A connection holds request bytes from the moment they are read until
the request they belong to has been handled: the incomplete frame in its
``FrameBuffer`` (up to ``max_frame_bytes``, 100 MiB by default) and the requests decoded
from the last read. Without a cap, three clients sending 60 MiB frames slowly hold
180 MiB of broker memory, and nothing stops thirty. :class:`BufferBudget` counts the bytes
of every connection (``CAIRN_KAFKA_MAX_BUFFERED_BYTES``, 256 MiB by default; Kafka bounds
the same thing with ``queued.max.request.bytes`` and its memory pool) and decides who
reads next:

* at or under the cap, every connection reads;
* over it, a connection that *adds* to the total (holds part of a frame) is paused: the
  server stops reading its socket (``transport.pause_reading``), so its client's sends
  block in TCP, and it is never closed for it. A connection that holds no partial frame
  reads on (small requests, heartbeats and fetches keep flowing; a read adds at most
  ``READ_BYTES`` before it counts as adding);
* so that the total always falls, one connection over the cap is *let through*: the
  first one to add while nobody is, then the longest-paused one each time the one let
  through has handed off all it held. Its frame completes, is handled, and its bytes go.
  The total stays under the cap plus one frame plus a read per connection (Kafka's memory
  pool likewise lets one allocation exceed what is left);
* once the total is back at or under the cap, every paused connection resumes.

**Idleness.** A connection with no request in flight whose last request or response is
``idle_ms`` old (``CAIRN_KAFKA_IDLE_MS``, 10 minutes by default: Kafka's
``connections.max.idle.ms``) is closed by the server. A paused connection is not idle
(its silence is the broker's doing); its clock restarts when it resumes.

Thread-safety: none; used from the listener's event loop only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024
DEFAULT_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms


class Flow:
    """One connection's share of the budget.

    Attributes:
        held: request bytes it holds (partial frame + requests read but not handled).
        paused: it must not read until resumed.
        last_active: when it last received a request or sent a response, or resumed
            (seconds on the caller's clock).
        in_flight: how many of its requests have no response sent yet (the server's
            answer, asked when looking for idle connections).
    """

    __slots__ = ("held", "paused", "last_active", "in_flight")

    def __init__(self, now: float, in_flight: Callable[[], int]) -> None:
        self.held = 0
        self.paused = False
        self.last_active = now
        self.in_flight = in_flight

    def touch(self, now: float) -> None:
        self.last_active = now


class BufferBudget:
    """The request bytes of all connections of a listener (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self.total = 0
        self.flows: set[Flow] = set()
        self._paused: deque[Flow] = deque()
        self._let_through: Flow | None = None

    def register(self, now: float, in_flight: Callable[[], int]) -> Flow:
        flow = Flow(now, in_flight)
        self.flows.add(flow)
        return flow

    @property
    def paused_count(self) -> int:
        return len(self._paused)

    def update(self, flow: Flow, held: int, adding: bool, now: float) -> tuple[bool, list[Flow]]:
        """``flow`` now holds ``held`` bytes; ``adding``: part of them is an incomplete
        frame (its next reads add to the total).

        Returns:
            ``(pause, resume)``: whether ``flow`` must stop reading now, and the paused
            connections that may read again (already marked resumed).
        """
        self.total += held - flow.held
        flow.held = held
        if flow is self._let_through and held == 0:
            self._let_through = None
        if self.total <= self.max_bytes:
            return False, self._resume_all(now)
        if flow.paused:  # handing off what it read before it was paused: stays paused
            return True, []
        if not adding:
            return False, [] if self._let_through is not None else self._let_next_through(now)
        if self._let_through is None or self._let_through is flow:
            self._let_through = flow
            return False, []
        flow.paused = True
        self._paused.append(flow)
        return True, []

    def close(self, flow: Flow, now: float) -> list[Flow]:
        """``flow``'s connection is gone: its bytes leave the total.

        Returns:
            The paused connections that may read again.
        """
        self.flows.discard(flow)
        if flow.paused:
            self._paused.remove(flow)
            flow.paused = False
        _pause, resume = self.update(flow, 0, False, now)
        return resume

    def _resume_all(self, now: float) -> list[Flow]:
        resumed = list(self._paused)
        self._paused.clear()
        for flow in resumed:
            flow.paused = False
            flow.touch(now)
        return resumed

    def _let_next_through(self, now: float) -> list[Flow]:
        if not self._paused:
            return []
        flow = self._paused.popleft()
        flow.paused = False
        flow.touch(now)
        self._let_through = flow
        return [flow]

    def idle(self, now: float, idle_s: float) -> Iterable[Flow]:
        """The connections to close for idleness (module docstring)."""
        return [
            flow
            for flow in self.flows
            if not flow.paused and now - flow.last_active >= idle_s and flow.in_flight() == 0
        ]
