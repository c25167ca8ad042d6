"""The send path: producer-facing validation (spec 11), queue choice, the delay hook (spec 9).

Validation runs in spec 11's order and stops at the first broken rule, with one error per
rule (``field``, ``rule``, a sentence):

====  ==========================================  ===================  ========================
step  check                                       raises               rule
====  ==========================================  ===================  ========================
1     broker started                              BrokerNotStarted     ``not_started``
2     broker perm has WRITE                       NoPermissionError    ``broker_not_writable``
3     topic name (8.7)                            ValidationError      ``blank`` ``characters``
                                                                       ``max_length``
3     topic not a system topic producers may not  NoPermissionError    ``not_allowed_send``
      use (SCHEDULE_TOPIC_XXXX, ...)
4     topic exists (or auto-created)              NotFoundError        ``not_found``
5     explicit ``queue_id < max(write, read)``    ValidationError      ``range``
6     topic perm has WRITE (RocketMQ leaves this  NoPermissionError    ``topic_not_writable``
      to the producer's route; Cairn is the
      route, so it checks)
8     at least one message; per message: body     ValidationError /    ``empty`` ``max_size``
      non-empty and <= max_message_size;          MessageIllegalError  ``range``
      delay level >= 0; no reserved property                           ``reserved_name``
      names; encoded properties <= 32767 bytes                         ``max_batch_bytes``
      (9); batch body bytes <= max_batch_bytes
====  ==========================================  ===================  ========================

In a batch, per-message fields are named ``messages[i].body`` and so on. Nothing is stored
unless every message passes.

Queue choice: explicit ``queue_id``; else ``abs(hashCode(sharding_key)) % writeQueueNums``
(RocketMQ ``SelectMessageQueueByHash``: same key, same queue); else round robin per topic.

Delay hook (spec 9, ``HookUtils.handleScheduleMessage``): a message with delay level > 0 is
stored in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with ``REAL_TOPIC``/``REAL_QID`` holding
where it belongs; :mod:`mqcore.broker.delay_delivery` moves it there when due. The store does
the rest (the ConsumeQueue tag code of such a record is its deliver time).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from mqcore.broker.errors import NoPermissionError
from mqcore.broker.types import OutgoingMessage, SendResult, SendStatus
from mqcore.errors import (
    MessageIllegalError,
    NotFoundError,
    StoreError,
    StoreNotWritableError,
    ValidationError,
)
from mqcore.message import Message
from mqcore.metadata import Metadata, TopicConfig
from mqcore.metadata.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    SCHEDULE_TOPIC,
    is_writeable,
)
from mqcore.store.hashing import java_string_hash
from mqcore.store.msgid import HostAddress, UniqKeyGenerator
from mqcore.store.properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    encode_properties,
    is_system_property,
)
from mqcore.store.results import PutResult, PutStatus
from mqcore.store.store import MessageStore
from mqcore.validation import (
    RETRY_GROUP_TOPIC_PREFIX,
    validate_body,
    validate_properties_size,
    validate_topic,
)


@dataclass(frozen=True, slots=True)
class Placed:
    """A message ready for the store: where it is stored and where it belongs."""

    message: Message
    store_queue_id: int
    real_topic: str
    real_queue_id: int
    delayed: bool


class QueueSelector:
    """Round-robin counters per topic, and the key hash. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, itertools.count[int]] = {}

    def select(self, topic: TopicConfig, queue_id: int | None, sharding_key: str | None) -> int:
        """The queue for one message (``queue_id`` already range-checked)."""
        if queue_id is not None and queue_id >= 0:
            return queue_id
        writable = max(1, topic.write_queue_nums)
        if sharding_key:
            return abs(java_string_hash(sharding_key)) % writable
        with self._lock:
            counter = self._counters.get(topic.topic_name)
            if counter is None:
                counter = self._counters[topic.topic_name] = itertools.count()
            return next(counter) % writable


def resolve_topic(
    metadata: Metadata,
    topic: str,
    *,
    auto_create: bool,
    default_queue_nums: int,
) -> TopicConfig:
    """Spec 11 steps 3-4: the topic's name and existence (or auto-creation). The WRITE bit
    (step 6) is checked by :func:`place_messages`, after the queue ids (step 5).

    Raises:
        ValidationError: a bad topic name.
        NoPermissionError: ``not_allowed_send``.
        NotFoundError: no such topic and it may not be created.
    """
    validate_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise NoPermissionError(
            "topic", "not_allowed_send", f"topic {topic!r} is a system topic producers may not use"
        )
    config = metadata.topics.get(topic)
    if config is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        config = metadata.topics.create_retry_topic(topic[len(RETRY_GROUP_TOPIC_PREFIX) :])
    if config is None and auto_create:
        config = metadata.topics.auto_create_from_default(topic, default_queue_nums)
    if config is None:
        raise NotFoundError(
            "topic",
            "not_found",
            f"topic {topic!r} does not exist; create it first"
            + ("" if auto_create else " (topic auto-creation is off)"),
        )
    return config


def check_queue_id(config: TopicConfig, queue_id: int | None, field: str = "queue_id") -> None:
    """Spec 11 step 5: an explicit queue must be below max(write, read) queue counts."""
    if queue_id is None or queue_id < 0:
        return
    limit = max(config.write_queue_nums, config.read_queue_nums)
    if queue_id >= limit:
        raise ValidationError(
            field,
            "range",
            f"{field}: topic {config.topic_name!r} has queues 0..{limit - 1} (got {queue_id})",
        )


def check_writable(config: TopicConfig) -> None:
    if not is_writeable(config.perm):
        raise NoPermissionError(
            "topic",
            "topic_not_writable",
            f"topic {config.topic_name!r} does not accept messages (perm {config.perm})",
        )


def _field(name: str, index: int, batch: bool) -> str:
    return f"messages[{index}].{name}" if batch else name


def _renamed(exc: ValidationError, field: str) -> ValidationError:
    return type(exc)(field, exc.rule, str(exc).replace(exc.field, field, 1))


def place_messages(
    config: TopicConfig,
    messages: Sequence[OutgoingMessage],
    *,
    selector: QueueSelector,
    uniq: UniqKeyGenerator,
    born_host: HostAddress | None,
    max_message_size: int,
    max_batch_bytes: int,
    max_delay_level: int,
) -> list[Placed]:
    """Validate every message (spec 11 steps 5 and 8-9), then choose queues and apply the
    delay hook. Raises on the first broken rule; see the module docstring."""
    batch = len(messages) > 1
    for i, out in enumerate(messages):
        check_queue_id(config, out.queue_id, _field("queue_id", i, batch))
    check_writable(config)
    if not messages:
        raise ValidationError("messages", "empty", "messages: send at least one message")
    total = 0
    placed = []
    for i, out in enumerate(messages):
        try:
            validate_body(out.body, max_message_size)
        except ValidationError as exc:
            raise _renamed(exc, _field("body", i, batch)) from None
        total += len(out.body)
        if out.delay_level < 0:
            raise ValidationError(
                _field("delay_level", i, batch),
                "range",
                f"{_field('delay_level', i, batch)}: must be 0 (none) or a level from 1 to "
                f"{max_delay_level} (got {out.delay_level})",
            )
        message = _to_message(config.topic_name, out, uniq, born_host, _field("", i, batch))
        queue_id = selector.select(config, out.queue_id, out.sharding_key)
        placed.append(to_schedule(message, queue_id, max_delay_level))
    if total > max_batch_bytes:
        raise MessageIllegalError(
            "messages",
            "max_batch_bytes",
            f"messages: a send may carry at most {max_batch_bytes} body bytes (got {total})",
        )
    return placed


def _to_message(
    topic: str,
    out: OutgoingMessage,
    uniq: UniqKeyGenerator,
    born_host: HostAddress | None,
    prefix: str,
) -> Message:
    props = dict(out.properties) if out.properties else {}
    for name in props:
        if is_system_property(name):
            field = f"{prefix}properties"
            raise ValidationError(
                field,
                "reserved_name",
                f"{field}: {name!r} is reserved by the broker; use the message's own fields"
                " (tag, keys, delay_level) instead",
            )
    props[PROPERTY_UNIQ_KEY] = uniq.next_id()
    message = Message(
        topic,
        out.body,
        tags=out.tag or None,
        keys=out.keys,
        properties=props,
        flag=out.flag,
        born_timestamp=out.born_timestamp,
        born_host=born_host,
        delay_level=out.delay_level,
    )
    # Room for REAL_TOPIC/REAL_QID if delayed: encode what will be stored.
    final = message.all_properties()
    if out.delay_level > 0:
        final[PROPERTY_REAL_TOPIC] = topic
        final[PROPERTY_REAL_QID] = "0000000000"
    try:
        validate_properties_size(encode_properties(final))
    except ValidationError as exc:
        raise _renamed(exc, f"{prefix}properties") from None
    return message


def to_schedule(message: Message, queue_id: int, max_delay_level: int) -> Placed:
    """The delay hook: park a message with delay level > 0 in ``SCHEDULE_TOPIC_XXXX``."""
    level = min(message.delay_level, max_delay_level)
    if level <= 0:
        return Placed(message, queue_id, message.topic, queue_id, False)
    props = message.all_properties()
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_REAL_TOPIC] = message.topic
    props[PROPERTY_REAL_QID] = str(queue_id)
    parked = Message(
        SCHEDULE_TOPIC,
        message.body,
        properties=props,
        flag=message.flag,
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        reconsume_times=message.reconsume_times,
        sys_flag=message.sys_flag,
    )
    return Placed(parked, level - 1, message.topic, queue_id, True)


def store_placed(
    store: MessageStore, placed: Sequence[Placed], broker_name: str
) -> list[SendResult]:
    """Put the messages, consecutive runs for the same stored queue as one batch (one lock,
    consecutive offsets). Raises on a refused put; maps the rest to SendResults."""
    results: list[SendResult] = []
    i = 0
    while i < len(placed):
        j = i + 1
        key = (placed[i].message.topic, placed[i].store_queue_id)
        while j < len(placed) and (placed[j].message.topic, placed[j].store_queue_id) == key:
            j += 1
        run = placed[i:j]
        puts = store.put_messages([p.message for p in run], key[1])
        results += [_send_result(p, put, broker_name) for p, put in zip(run, puts, strict=True)]
        i = j
    return results


def _send_result(placed: Placed, put: PutResult, broker_name: str) -> SendResult:
    if put.status is PutStatus.PUT_OK:
        status = SendStatus.SEND_OK
    elif put.status is PutStatus.FLUSH_DISK_TIMEOUT:
        status = SendStatus.FLUSH_DISK_TIMEOUT
    elif put.status is PutStatus.SERVICE_NOT_AVAILABLE:
        raise StoreNotWritableError("the store does not accept writes now (SERVICE_NOT_AVAILABLE)")
    elif put.status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
        raise MessageIllegalError("message", "illegal", f"the store refused the message: {put}")
    else:
        raise StoreError(f"the store could not write the message ({put.status})")
    return SendResult(
        status=status,
        msg_id=put.msg_id,
        offset_msg_id=put.offset_msg_id,
        topic=placed.real_topic,
        queue_id=placed.real_queue_id,
        queue_offset=put.queue_offset,
        broker_name=broker_name,
        store_timestamp=put.store_timestamp,
        delayed=placed.delayed,
    )
