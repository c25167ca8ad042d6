"""Idempotent producers: producer ids, and per-partition sequence state to drop retried
batches (kafka-protocol.md sections 2.5 and 2.13).

An idempotent producer (kafka-python's default; aiokafka and librdkafka when enabled) asks
InitProducerId for an id, then stamps every batch with ``(producer_id, producer_epoch,
base_sequence)``; the sequence starts at 0 per partition and grows by the record count. On
a retry (the reply was lost) it sends the same batch again. What Kafka does, and this
module does per ``(producer_id, topic, partition)``:

==========================================  ===========================================
batch                                       answer
==========================================  ===========================================
epoch older than the known one              INVALID_PRODUCER_EPOCH (47)
same sequences as one of the last 5 batches NONE with that batch's original base offset,
                                            nothing stored again
base_sequence == last sequence + 1          store it (sequences wrap at 2**31 - 1 → 0)
anything else                               OUT_OF_ORDER_SEQUENCE_NUMBER (45)
no state yet, or a newer epoch              store it (the state is in memory only, so
                                            after a broker restart a producer carries on)
==========================================  ===========================================

Producer ids are ``max(last + 1, now_ms << 16)``: never reused after a restart (unless the
clock goes back), without a file; 65,536 ids per millisecond before they run ahead.

State is kept for the 100,000 most recently used partitions of producers (LRU).

Thread-safety: every method is thread-safe. A caller that checks, stores and records one
batch holds :meth:`lock` for that producer across the three steps.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from mqcore.clock import Clock

from .errors import ErrorCode

MAX_REMEMBERED_BATCHES = 5  # Kafka keeps the last 5 batches per producer and partition
SEQUENCE_MODULUS = 1 << 31
_LOCK_STRIPES = 64

Key = tuple[int, str, int]  # (producer_id, topic, partition)


@dataclass(slots=True)
class PartitionSequences:
    """What one producer last wrote to one partition."""

    epoch: int
    last_sequence: int
    batches: deque[tuple[int, int, int]] = field(
        default_factory=lambda: deque(maxlen=MAX_REMEMBERED_BATCHES)
    )  # (first sequence, last sequence, base offset)


class ProducerStates:
    """Producer ids and sequence state (see the module docstring)."""

    def __init__(self, clock: Clock, max_entries: int = 100_000) -> None:
        self.clock = clock
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._last_id = 0
        self._states: OrderedDict[Key, PartitionSequences] = OrderedDict()

    def new_producer_id(self) -> int:
        """A fresh producer id (positive int64)."""
        with self._lock:
            self._last_id = max(self._last_id + 1, self.clock.now_ms() << 16)
            return self._last_id

    def lock(self, producer_id: int) -> threading.Lock:
        """The lock serialising check → store → record for one producer."""
        return self._stripes[producer_id % _LOCK_STRIPES]

    def check(
        self, key: Key, epoch: int, base_sequence: int, count: int
    ) -> tuple[ErrorCode, int | None]:
        """Judge a batch before storing it.

        Returns:
            ``(NONE, None)``: store it; ``(NONE, base_offset)``: a duplicate already
            stored at ``base_offset``; ``(error, None)``: refuse it.
        """
        with self._lock:
            state = self._states.get(key)
        if state is None or epoch > state.epoch:
            return ErrorCode.NONE, None
        if epoch < state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        last = (base_sequence + count - 1) % SEQUENCE_MODULUS
        for first_seq, last_seq, base_offset in state.batches:
            if first_seq == base_sequence and last_seq == last:
                return ErrorCode.NONE, base_offset
        if base_sequence != (state.last_sequence + 1) % SEQUENCE_MODULUS:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def record(
        self, key: Key, epoch: int, base_sequence: int, count: int, base_offset: int
    ) -> None:
        """Remember a stored batch."""
        last = (base_sequence + count - 1) % SEQUENCE_MODULUS
        with self._lock:
            state = self._states.get(key)
            if state is None or state.epoch != epoch:
                state = self._states[key] = PartitionSequences(epoch, last)
            state.last_sequence = last
            state.batches.append((base_sequence, last, base_offset))
            self._states.move_to_end(key)
            while len(self._states) > self.max_entries:
                self._states.popitem(last=False)
