"""Placement: which queue of a topic each message of a send goes to.

What the front ends need:

* :class:`ToQueue` -- every message of the batch in one queue. The Kafka listener's produce:
  a partition is a queue, and a produced batch is stored contiguously in it.
* :data:`BY_MESSAGE` -- each message's own choice: its ``queue_id`` if it has one, else
  ``abs(hashCode(sharding_key)) % writeQueueNums`` (RocketMQ ``SelectMessageQueueByHash``:
  same key, same queue), else the topic's next round-robin queue. The REST API and the
  console, whose messages may each name a queue or a sharding key. Store messages built by a
  front end (:mod:`mqcore.broker.plain_sending`) name neither: they go round robin.

Internal deliveries (retry, DLQ, delay) are placed by the broker's services themselves
(:class:`~mqcore.broker.sending.Placed`) and do not use a placement.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ToQueue:
    """Every message of the batch in queue ``queue_id`` of the topic (range-checked by the
    send: ``0 <= queue_id < max(writeQueueNums, readQueueNums)``). A message's own
    ``queue_id`` or ``sharding_key`` is not consulted."""

    queue_id: int


@dataclass(frozen=True, slots=True)
class ByMessage:
    """Each message's ``queue_id``, else its ``sharding_key``'s hash, else round robin."""


BY_MESSAGE = ByMessage()

Placement = ToQueue | ByMessage
"""Where a send's messages go: :class:`ToQueue` or :data:`BY_MESSAGE`."""
