"""Message detail: a message and where it stands for every group consuming its topic.

For one group the deciding record is the **newest** (highest phys offset) of the message's
copies that concern that group (see :mod:`mqcore.broker.copies`):

=================================================  ===========================================
newest copy                                        state
=================================================  ===========================================
in ``%DLQ%<group>``                                DLQ
parked in SCHEDULE_TOPIC_XXXX for ``%RETRY%<g>``   RETRYING
in ``%RETRY%<group>``                              CONSUMED if the group's committed offset on
                                                   that retry queue is past it, else RETRYING
in the home topic                                  CONSUMED if the committed offset is past
                                                   its queue offset, else PENDING
parked in SCHEDULE_TOPIC_XXXX for the home topic   PENDING (delayed, not yet due)
=================================================  ===========================================

The groups shown are those with committed offsets on the home topic or a subscription to
it in their config. A message resent from a DLQ has a newer home copy, so every group is
judged on that copy (a group that had consumed the first one shows PENDING until it passes
the resent one).
"""

from __future__ import annotations

from mqcore.broker import copies
from mqcore.broker.reader import StoreReader
from mqcore.broker.types import ConsumeState, GroupConsumeStatus, MessageView
from mqcore.format.properties import PROPERTY_UNIQ_KEY
from mqcore.message import MessageExt
from mqcore.metadata import Metadata
from mqcore.metadata.topics import SCHEDULE_TOPIC, dlq_topic_name, retry_topic_name


def subscribed_groups(metadata: Metadata, topic: str) -> list[str]:
    """Groups with offsets on ``topic`` or a subscription to it, sorted."""
    groups = set(metadata.offsets.groups_of_topic(topic))
    for config in metadata.groups.list():
        for item in config.subscription_data_set or ():
            if item.get("topic") == topic:
                groups.add(config.group_name)
    return sorted(groups)


def view_message(
    store: StoreReader, metadata: Metadata, broker_name: str, msg_id: str
) -> MessageView | None:
    """See the module docstring. None when no record has that id."""
    found = copies.find(store, msg_id)
    if found is None:
        return None
    uniq = found.properties.get(PROPERTY_UNIQ_KEY)
    home = copies.home_topic(found)
    home_copies = copies.copies(store, home, uniq) if uniq else []
    parked_home = copies.scheduled_copies(store, uniq, home)
    if not uniq:
        home_copies = [found] if found.topic == home else []
    primary = copies.newest(home_copies) or copies.newest(parked_home) or found
    candidates = [(m, "home") for m in home_copies] + [(m, "parked_home") for m in parked_home]
    statuses = tuple(
        _group_status(store, metadata, group, uniq, candidates)
        for group in subscribed_groups(metadata, home)
    )
    return MessageView(primary, primary.msg_id, primary.offset_msg_id, home, broker_name, statuses)


def _group_status(
    store: StoreReader,
    metadata: Metadata,
    group: str,
    uniq: str | None,
    shared: list[tuple[MessageExt, str]],
) -> GroupConsumeStatus:
    retry, dlq = retry_topic_name(group), dlq_topic_name(group)
    candidates = list(shared)
    candidates += [(m, "retry") for m in copies.copies(store, retry, uniq)]
    candidates += [(m, "parked_retry") for m in copies.scheduled_copies(store, uniq, retry)]
    candidates += [(m, "dlq") for m in copies.copies(store, dlq, uniq)]
    if not candidates:
        return GroupConsumeStatus(group, ConsumeState.PENDING, None, 0)
    message, kind = max(candidates, key=lambda pair: pair[0].phys_offset)
    topic = SCHEDULE_TOPIC if kind.startswith("parked") else message.topic
    committed = metadata.offsets.query(group, topic, message.queue_id)
    if kind == "dlq":
        state = ConsumeState.DLQ
    elif kind == "parked_retry":
        state = ConsumeState.RETRYING
    elif kind == "parked_home":
        state = ConsumeState.PENDING
    else:
        done = committed is not None and committed > message.queue_offset
        waiting = ConsumeState.RETRYING if kind == "retry" else ConsumeState.PENDING
        state = ConsumeState.CONSUMED if done else waiting
    if kind.startswith("parked"):
        committed = None
    return GroupConsumeStatus(group, state, committed, message.reconsume_times)
