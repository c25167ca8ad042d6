"""Service step: deliver delayed messages when due (spec 9, ``ScheduleMessageService``).

A message sent with delay level L sits in ``SCHEDULE_TOPIC_XXXX`` queue ``L - 1``; its
ConsumeQueue tag code is its deliver time (spec 3.1), so due-ness is read from the queue
alone. For each level the step walks that queue from ``delayOffset[L]``:

* deliver time later than ``now + delay(L)`` (the clock went back, or the record came from
  a broker with other levels): treated as due now, as RocketMQ's
  ``correctDeliverTimestamp`` does;
* deliver time in the future: stop this level (its later units are due later still, since
  one queue holds one delay and store times grow);
* else rebuild the message (same body, flag, sysflag, born time and host, reconsume times,
  every property except ``DELAY``/``TIMER_DELIVER_MS``/``TIMER_DELAY_SEC``; ``REAL_TOPIC``
  and ``REAL_QID`` stay), store it in ``REAL_TOPIC`` queue ``REAL_QID`` and advance
  ``delayOffset[L]``. A record with no real topic, or whose real topic is the transaction
  half topic, is skipped.

Progress lives in :class:`~mqcore.metadata.DelayOffsetManager` (memory; written to
``delayOffset.json`` by :mod:`mqcore.broker.offsets_persist`). A crash between a delivery and
the next persist delivers those messages again: at-least-once, like RocketMQ.

Run it about every 100 ms (RocketMQ re-checks a level 100 ms after finding nothing due);
``progressed`` asks the runner to call again at once while a backlog is being delivered.
Time comes from the broker's Clock, so tests drive it with a FakeClock.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mqcore.broker.sending import Placed
from mqcore.format.layout import HOST_V6_FLAGS
from mqcore.format.properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_WAIT,
)
from mqcore.message import Message, MessageExt
from mqcore.metadata.topics import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from mqcore.services.result import StepResult
from mqcore.store.consume_queue import ConsumeQueue

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.1
DEFAULT_MAX_MESSAGES = 1_000
_CHUNK = 64


def step(broker: Broker, *, max_messages: int = DEFAULT_MAX_MESSAGES) -> StepResult:
    """Deliver up to ``max_messages`` due messages over all levels. Thread-safe if only one
    runner calls it at a time (the runner's job, as for every service)."""
    levels_ms = broker.store.delay_levels_ms
    delivered = skipped = 0
    for level in range(1, len(levels_ms) + 1):
        queue = broker.store.queues.get(SCHEDULE_TOPIC, level - 1)
        if queue is None:
            continue
        budget = max_messages - delivered
        if budget <= 0:
            break
        done, dropped = _deliver_level(broker, queue, level, levels_ms[level - 1], budget)
        delivered += done
        skipped += dropped
    return StepResult(
        "delay_delivery",
        progressed=delivered >= max_messages,
        detail={"delivered": delivered, "skipped": skipped},
    )


def _deliver_level(
    broker: Broker, queue: ConsumeQueue, level: int, delay_ms: int, budget: int
) -> tuple[int, int]:
    offsets = broker.metadata.delay_offsets
    offset = max(queue.min_offset, min(offsets.get(level), queue.max_offset))
    delivered = skipped = 0
    now = broker.clock.now_ms()
    while offset < queue.max_offset and delivered < budget:
        units = queue.units(offset, min(_CHUNK, budget - delivered))
        if not units:
            break
        for unit in units:
            deliver_ms = unit.tags_code
            if deliver_ms > now + delay_ms:
                deliver_ms = now
            if deliver_ms > now:
                offsets.update(level, offset)
                return delivered, skipped
            message = broker.store.commit_log.message_at(unit.phys_offset, unit.size)
            placed = _rebuild(message) if message is not None else None
            if placed is None:
                skipped += 1
            else:
                broker.deliver_internal([placed])
                delivered += 1
            offset = unit.queue_offset + 1
            offsets.update(level, offset)
    return delivered, skipped


def _rebuild(message: MessageExt) -> Placed | None:
    props = dict(message.properties)
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    try:
        real_queue_id = int(props.get(PROPERTY_REAL_QID, ""))
    except ValueError:
        real_queue_id = -1
    if not real_topic or real_queue_id < 0 or real_topic == TRANS_HALF_TOPIC:
        log.warning(
            "delayed record at %d has no usable REAL_TOPIC/REAL_QID; skipped", message.phys_offset
        )
        return None
    for name in (PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC):
        props.pop(name, None)
    props[PROPERTY_WAIT] = "false"
    rebuilt = Message(
        real_topic,
        message.body,
        properties=props,
        flag=message.flag,
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        reconsume_times=message.reconsume_times,
        sys_flag=message.sys_flag & ~HOST_V6_FLAGS,
    )
    return Placed(rebuilt, real_queue_id, real_topic, real_queue_id, False)
