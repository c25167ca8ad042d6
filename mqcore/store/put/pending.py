"""A message of the general put path as the record to append: ``pending_record``.

The general path (``MessageStore.put_batch`` for anything ``plain_batch.py`` does not take:
user properties, a second topic, a transaction type, ...) turns each message into a
``PendingRecord``: its checks (body, properties size), its properties with the UNIQ_KEY
(kept if the producer set one, else a new one), whether a sync flush must wait for it
(``WAIT``), its born host flag and its size. The topic is checked by the store beforehand
(once per topic).

Thread-safety: a pure function but for the UNIQ_KEY generator and the clock it is given.
"""

from __future__ import annotations

from mqcore.clock import Clock
from mqcore.format.layout import (
    BORNHOST_V6_FLAG,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    V1_MAX_TOPIC_BYTES,
    record_size,
)
from mqcore.format.msgid import HostAddress, UniqKeyGenerator
from mqcore.format.properties import (
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    encode_message_properties,
    encode_properties,
)
from mqcore.message import Message
from mqcore.store.commit_log import PendingRecord
from mqcore.validation import validate_body, validate_properties_size

DEFAULT_BORN_HOST = HostAddress("127.0.0.1", 0)


def pending_record(
    msg: Message,
    queue_id: int,
    *,
    uniq: UniqKeyGenerator,
    clock: Clock,
    max_message_size: int,
    store_host: HostAddress,
) -> tuple[PendingRecord, str, bool]:
    """The record of ``msg`` for queue ``queue_id``, its UNIQ_KEY, and whether a sync flush
    waits for it.

    Raises:
        ValidationError / MessageIllegalError: the body or the properties break a rule.
    """
    if not msg.body or len(msg.body) > max_message_size:
        validate_body(msg.body, max_message_size)
    if msg.properties:
        props = msg.all_properties()
        uniq_key = props.get(PROPERTY_UNIQ_KEY) or uniq.next_id()
        props[PROPERTY_UNIQ_KEY] = uniq_key
        encoded = encode_properties(props)
        wait = props.get(PROPERTY_WAIT, "true") != "false"
    else:  # the usual message: the same bytes without building the dict
        uniq_key = uniq.next_id()
        encoded = encode_message_properties(msg.tags, msg.keys_value(), msg.delay_level, uniq_key)
        wait = True
    validate_properties_size(encoded)
    born_host = msg.born_host or DEFAULT_BORN_HOST
    sys_flag = msg.sys_flag & ~BORNHOST_V6_FLAG
    if ":" in born_host.ip:
        sys_flag |= BORNHOST_V6_FLAG
    store_host_flag = STOREHOSTADDRESS_V6_FLAG if ":" in store_host.ip else 0
    topic_bytes = len(msg.topic.encode())
    size = record_size(
        len(msg.body),
        topic_bytes,
        len(encoded),
        sys_flag=sys_flag | store_host_flag,
        v2=topic_bytes > V1_MAX_TOPIC_BYTES,
    )
    tx = sys_flag & TRANSACTION_TYPE_MASK
    record = PendingRecord(
        topic=msg.topic,
        queue_id=queue_id,
        flag=msg.flag,
        sys_flag=sys_flag,
        born_timestamp=msg.born_timestamp if msg.born_timestamp is not None else clock.now_ms(),
        born_host=born_host,
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=0,
        body=msg.body,
        properties=encoded,
        size=size,
        takes_queue_offset=tx in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE),
    )
    return record, uniq_key, wait
