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

Queue choice (:mod:`mqcore.broker.placement`): the send's :class:`ToQueue`, else each
message's ``queue_id``; else ``abs(hashCode(sharding_key)) % writeQueueNums`` (RocketMQ
``SelectMessageQueueByHash``: same key, same queue); else round robin per topic. A send is
stored with one put per queue (:func:`store_placed`). Messages without user properties and
without a delay level carry no properties dict and get their ``UNIQ_KEY`` from the store,
which then encodes them in its batch loop; their properties are still checked here, so the
whole send fails or none of it.

This module is the reference path of a send (``OutgoingMessage`` → ``Message`` →
``Placed`` → put), and the internal deliveries (retry, DLQ, delay) store their ``Placed``
through :func:`store_placed` too. A batch of store messages a front end built itself takes
the fast path, :mod:`mqcore.broker.plain_sending`, with the same rules and errors.

Delay hook (spec 9, ``HookUtils.handleScheduleMessage``): a message with delay level > 0 is
stored in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with ``REAL_TOPIC``/``REAL_QID`` holding
where it belongs; :mod:`mqcore.broker.delay_delivery` moves it there when due. The store does
the rest (the ConsumeQueue tag code of such a record is its deliver time).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, overload

from mqcore.broker.errors import NoPermissionError
from mqcore.broker.placement import Placement, ToQueue
from mqcore.broker.types import OutgoingMessage, SendResult, SendStatus
from mqcore.errors import (
    MessageIllegalError,
    NotFoundError,
    StoreError,
    StoreNotWritableError,
    ValidationError,
)
from mqcore.format.hashing import java_string_hash
from mqcore.format.msgid import HostAddress, UniqKeyGenerator
from mqcore.format.properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    encode_message_properties,
    encode_properties,
    is_system_property,
)
from mqcore.message import Message, plain_message
from mqcore.metadata import Metadata, TopicConfig
from mqcore.metadata.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    SCHEDULE_TOPIC,
    is_writeable,
)
from mqcore.store.results import BatchPutResults, PutResult, PutStatus
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


# Builders: the same slots as a frozen dataclass, assignable. Filled, then their
# ``__class__`` set to the dataclass (identical layouts), they are ordinary frozen instances.
# A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (~1.5 us
# for nine fields), a slot store costs ~20 ns, and this is per message on the send path
# (``mqcore.store.put.plain_batch`` does the same for PutResult).


class _PlacedBuilder:
    __slots__ = Placed.__slots__


class SendResultBuilder:
    __slots__ = SendResult.__slots__


assert _PlacedBuilder.__slots__ == tuple(f.name for f in fields(Placed))
assert SendResultBuilder.__slots__ == tuple(f.name for f in fields(SendResult))


# _plain_message sets every field of a Message itself: one added there must be added here.
assert tuple(f.name for f in fields(Message)) == (
    "topic", "body", "tags", "keys", "properties", "flag", "born_timestamp", "born_host",
    "reconsume_times", "sys_flag", "delay_level",
)  # fmt: skip


def placed_for(message: Message, queue_id: int) -> Placed:
    """``Placed(message, queue_id, message.topic, queue_id, False)``, built cheaply."""
    p: Any = _PlacedBuilder()
    p.message = message
    p.store_queue_id = p.real_queue_id = queue_id
    p.real_topic = message.topic
    p.delayed = False
    p.__class__ = Placed
    return p  # type: ignore[no-any-return]


class QueueSelector:
    """Round-robin counters per topic, and the key hash. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}

    def select(self, topic: TopicConfig, queue_id: int | None, sharding_key: str | None) -> int:
        """The queue for one message (``queue_id`` already range-checked)."""
        if queue_id is not None and queue_id >= 0:
            return queue_id
        writable = max(1, topic.write_queue_nums)
        if sharding_key:
            return abs(java_string_hash(sharding_key)) % writable
        return self.reserve(topic.topic_name, 1) % writable

    def reserve(self, topic: str, count: int) -> int:
        """Take ``count`` consecutive round-robin positions of ``topic`` (one lock for a
        batch); returns the first. Position ``p`` is queue ``p % writeQueueNums``."""
        with self._lock:
            first = self._counters.get(topic, 0)
            self._counters[topic] = first + count
        return first


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


def message_field(name: str, index: int, batch: bool) -> str:
    return f"messages[{index}].{name}" if batch else name


def renamed_error(exc: ValidationError, field: str) -> ValidationError:
    return type(exc)(field, exc.rule, str(exc).replace(exc.field, field, 1))


def place_messages(
    config: TopicConfig,
    messages: Sequence[OutgoingMessage],
    placement: Placement,
    *,
    selector: QueueSelector,
    uniq: UniqKeyGenerator,
    born_host: HostAddress | None,
    max_message_size: int,
    max_batch_bytes: int,
    max_delay_level: int,
) -> list[Placed]:
    """Validate every message (spec 11 steps 5 and 8-9), then choose queues (``placement``:
    a :class:`ToQueue` queue stands for every message's ``queue_id``) and apply the delay
    hook. Raises on the first broken rule; see the module docstring.

    One pass per message, in the order of the rules; field names (``messages[i].body``) are
    only formatted for an error: this loop runs for every message of a batch."""
    batch = len(messages) > 1
    round_robin = 0  # messages whose queue is the topic's next round-robin position
    queue_limit = max(config.write_queue_nums, config.read_queue_nums)
    fixed = placement.queue_id if isinstance(placement, ToQueue) else None
    for i, out in enumerate(messages):
        queue_id = out.queue_id if fixed is None else fixed
        if queue_id is not None and queue_id >= 0:
            if queue_id >= queue_limit:  # the field name is only formatted for the error
                check_queue_id(config, queue_id, message_field("queue_id", i, batch))
        elif not out.sharding_key:
            round_robin += 1
    check_writable(config)
    if not messages:
        raise ValidationError("messages", "empty", "messages: send at least one message")
    topic = config.topic_name
    writable = max(1, config.write_queue_nums)
    position = selector.reserve(topic, round_robin) if round_robin else 0
    # Stands in for the UNIQ_KEY the store will give a message without properties, when its
    # encoded properties are measured (same length as the ids of this process).
    id_placeholder = "0" * len(uniq.next_id())
    total = 0
    placed = []
    for i, out in enumerate(messages):
        body = out.body
        if body is None or not 0 < len(body) <= max_message_size:
            try:
                validate_body(body, max_message_size)
            except ValidationError as exc:
                raise renamed_error(exc, message_field("body", i, batch)) from None
        total += len(body)
        if out.delay_level < 0:
            raise ValidationError(
                message_field("delay_level", i, batch),
                "range",
                f"{message_field('delay_level', i, batch)}: must be 0 (none) or a level from 1 to "
                f"{max_delay_level} (got {out.delay_level})",
            )
        queue_id = out.queue_id if fixed is None else fixed
        if queue_id is None or queue_id < 0:
            if out.sharding_key:
                queue_id = abs(java_string_hash(out.sharding_key)) % writable
            else:
                queue_id = position % writable
                position += 1
        if not out.properties and out.delay_level <= 0:
            placed.append(
                placed_for(
                    _plain_message(topic, out, born_host, i, batch, id_placeholder), queue_id
                )
            )
        else:
            message = _to_message(topic, out, uniq, born_host, message_field("", i, batch))
            placed.append(to_schedule(message, queue_id, max_delay_level))
    if total > max_batch_bytes:
        raise MessageIllegalError(
            "messages",
            "max_batch_bytes",
            f"messages: a send may carry at most {max_batch_bytes} body bytes (got {total})",
        )
    return placed


# Keys this short, ASCII and without separators, and no tags, cannot make the properties of
# a plain message overflow MAX_PROPERTIES_BYTES (``KEYS``, ``UNIQ_KEY`` and separators add
# under 100 bytes): the exact encoding is only measured for the others.
SAFE_KEYS_CHARS = 8000


class ColumnSendResults(Sequence[SendResult]):
    """The SendResults of one put whose results came back as columns (``BatchPutResults``:
    one status, topic and queue for the batch), each made when read. The Kafka produce reads
    only the first of a batch of thousands; a reader of all of them iterates, which makes
    every offsetMsgId in one pass.

    Raises (when built): as :func:`send_status_of`, for a put the store refused.
    """

    __slots__ = ("_puts", "_broker_name", "_status")

    def __init__(self, puts: BatchPutResults, broker_name: str) -> None:
        self._status = send_status_of(puts.status, puts)
        self._puts = puts
        self._broker_name = broker_name

    def __len__(self) -> int:
        return len(self._puts.msg_ids)

    @overload
    def __getitem__(self, index: int) -> SendResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[SendResult]: ...

    def __getitem__(self, index: int | slice) -> SendResult | list[SendResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("send result index out of range")
        puts = self._puts
        return self._result(
            puts.msg_ids[index], puts.offset_msg_id_at(index), puts.queue_offsets[index]
        )

    def __iter__(self) -> Iterator[SendResult]:
        return iter(self.as_list())

    def as_list(self) -> list[SendResult]:
        """Every SendResult, in order (every offsetMsgId made in one pass)."""
        puts = self._puts
        status = self._status
        topic = puts.topic
        queue_id = puts.queue_id
        store_timestamp = puts.store_timestamp
        broker_name = self._broker_name
        new_result = SendResultBuilder
        results: list[Any] = []
        append = results.append
        r: Any
        # _result's SendResult, inline: this loop runs for every message of a batch.
        for msg_id, offset_msg_id, queue_offset in zip(
            puts.msg_ids, puts.offset_msg_ids, puts.queue_offsets, strict=True
        ):
            r = new_result()
            r.status = status
            r.msg_id = msg_id
            r.offset_msg_id = offset_msg_id
            r.topic = topic
            r.queue_id = queue_id
            r.queue_offset = queue_offset
            r.broker_name = broker_name
            r.store_timestamp = store_timestamp
            r.delayed = False
            r.__class__ = SendResult
            append(r)
        return results

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and self.as_list() == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColumnSendResults({self.as_list()!r})"

    def _result(self, msg_id: str, offset_msg_id: str, queue_offset: int) -> SendResult:
        puts = self._puts
        r: Any = SendResultBuilder()
        r.status = self._status
        r.msg_id = msg_id
        r.offset_msg_id = offset_msg_id
        r.topic = puts.topic
        r.queue_id = puts.queue_id
        r.queue_offset = queue_offset
        r.broker_name = self._broker_name
        r.store_timestamp = puts.store_timestamp
        r.delayed = False
        r.__class__ = SendResult
        return r  # type: ignore[no-any-return]


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
        raise renamed_error(exc, f"{prefix}properties") from None
    return message


def _plain_message(
    topic: str,
    out: OutgoingMessage,
    born_host: HostAddress | None,
    index: int,
    batch: bool,
    id_placeholder: str,
) -> Message:
    """A message without user properties and not delayed: no properties dict, and no
    ``UNIQ_KEY`` (the store gives it one, as it does to every message without one), so the
    store can encode the batch in its plain loop (``mqcore.store.put.plain_batch``). Its
    properties are checked here all the same, as the store will encode them (with an id as
    long as the store's), so a bad one fails the whole send before anything is stored."""
    message = plain_message(
        topic, out.body, out.keys, out.born_timestamp, born_host, out.tag or None, out.flag
    )
    if not surely_fits(message.tags, message.keys):
        try:
            validate_properties_size(
                encode_message_properties(message.tags, message.keys_value(), 0, id_placeholder)
            )
        except ValidationError as exc:
            raise renamed_error(exc, message_field("properties", index, batch)) from None
    return message


def surely_fits(tags: str | None, keys: Sequence[str] | str) -> bool:
    """Whether the properties of a plain message with these tags and keys surely encode
    within MAX_PROPERTIES_BYTES (see ``SAFE_KEYS_CHARS``), so measuring them can be
    skipped: no tags, and keys absent or short ASCII text without separators."""
    if tags or not isinstance(keys, str):
        return False
    return not keys or (
        len(keys) <= SAFE_KEYS_CHARS
        and keys.isascii()
        and "\x01" not in keys
        and "\x02" not in keys
    )


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
    """Put the messages, those for the same stored queue as one batch (one lock, consecutive
    offsets in the order given), queues in the order they first appear. A round-robin batch
    spreads over the queues message by message; putting it queue by queue gives every
    message the same queue offset as putting it one by one, in one put per queue instead of
    one per message. Raises on a refused put; returns the SendResults in the order given."""
    if len(placed) == 1:
        only = placed[0]
        (put,) = store.put_messages([only.message], only.store_queue_id)
        return [send_result_of(only, put, broker_name)]
    # Keyed by the stored queue id alone for the first message's stored topic (a send's
    # topic: every message but the delayed ones), by (topic, queue id) for any other: no
    # tuple per message in the usual batch. The two kinds of key never compare equal.
    topic = placed[0].message.topic
    groups: dict[object, list[int]] = {}
    for index, p in enumerate(placed):
        key: object = p.store_queue_id
        if p.message.topic != topic:
            key = (p.message.topic, key)
        group = groups.get(key)
        if group is None:
            groups[key] = [index]
        else:
            group.append(index)
    results: list[Any] = [None] * len(placed)
    for indexes in groups.values():
        members = [placed[i] for i in indexes]
        puts = store.put_batch([p.message for p in members], members[0].store_queue_id)
        if isinstance(puts, BatchPutResults) and all(_as_stored(p, puts.topic) for p in members):
            sent: Sequence[SendResult] = ColumnSendResults(puts, broker_name)
        else:
            sent = put_send_results(members, puts, broker_name)
        for i, result in zip(indexes, sent, strict=True):
            results[i] = result
    return results


def put_send_results(
    placed: Sequence[Placed], puts: Sequence[PutResult], broker_name: str
) -> list[SendResult]:
    """The SendResults of one put's PutResult objects, each reported where ``placed`` says
    it belongs. Raises on a refused put."""
    # One put's results share a status (one lock, one flush): mapped once, from the first;
    # a result that differs goes through send_result_of all the same.
    put_status = puts[0].status
    status = send_status_of(puts[0].status, puts[0])
    new_result = SendResultBuilder
    results: list[Any] = []
    append = results.append
    r: Any
    for p, put in zip(placed, puts, strict=True):
        if put.status is not put_status:
            append(send_result_of(p, put, broker_name))
            continue
        # send_result_of's SendResult, inline: this loop runs for every message of a batch.
        r = new_result()
        r.status = status
        r.msg_id = put.msg_id
        r.offset_msg_id = put.offset_msg_id
        r.topic = p.real_topic
        r.queue_id = p.real_queue_id
        r.queue_offset = put.queue_offset
        r.broker_name = broker_name
        r.store_timestamp = put.store_timestamp
        r.delayed = p.delayed
        r.__class__ = SendResult
        append(r)
    return results


def _as_stored(p: Placed, topic: str) -> bool:
    """Whether ``p`` is reported where it is stored (not a delayed message)."""
    return not p.delayed and p.real_topic == topic and p.real_queue_id == p.store_queue_id


def send_status_of(status: PutStatus, put: object) -> SendStatus:
    """The SendStatus of a put's ``status``; raises for a put the store refused."""
    if status is PutStatus.PUT_OK:
        return SendStatus.SEND_OK
    if status is PutStatus.FLUSH_DISK_TIMEOUT:
        return SendStatus.FLUSH_DISK_TIMEOUT
    if status is PutStatus.SERVICE_NOT_AVAILABLE:  # the store's reason: "disk full: ..."
        reason = getattr(put, "reason", "") or "the store does not accept writes now"
        raise StoreNotWritableError(f"{reason} (SERVICE_NOT_AVAILABLE)")
    if status in (PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED):
        raise MessageIllegalError("message", "illegal", f"the store refused the message: {put}")
    raise StoreError(f"the store could not write the message ({status})")


def send_result_of(placed: Placed, put: PutResult, broker_name: str) -> SendResult:
    status = send_status_of(put.status, put)
    r: Any = SendResultBuilder()
    r.status = status
    r.msg_id = put.msg_id
    r.offset_msg_id = put.offset_msg_id
    r.topic = placed.real_topic
    r.queue_id = placed.real_queue_id
    r.queue_offset = put.queue_offset
    r.broker_name = broker_name
    r.store_timestamp = put.store_timestamp
    r.delayed = placed.delayed
    r.__class__ = SendResult
    return r  # type: ignore[no-any-return]
