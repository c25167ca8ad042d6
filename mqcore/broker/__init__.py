"""Broker semantics over the store: send, pull with long polling, groups and offsets, tags,
delay, retry and DLQ. Front ends use :class:`Broker` (its administration as
``broker.admin``), the placements of a send and the types in :mod:`.types`."""

from mqcore.broker.admin import BrokerAdmin
from mqcore.broker.broker import Broker, OffsetAt, QueueRef
from mqcore.broker.config import BrokerConfig
from mqcore.broker.errors import BrokerNotStartedError, NoPermissionError
from mqcore.broker.placement import BY_MESSAGE, ByMessage, Placement, ToQueue
from mqcore.broker.tags import TagFilter, parse_tag_expression
from mqcore.broker.types import (
    BrokerStatus,
    BrowsePage,
    ConsumeState,
    GroupConsumeStatus,
    GroupInfo,
    GroupLag,
    MessageView,
    OffsetResetPlan,
    OutgoingMessage,
    PullResult,
    PullStatus,
    QueueLag,
    QueueStatus,
    SendBackAction,
    SendBackResult,
    SendResult,
    SendStatus,
    TopicInfo,
    TopicKind,
    TopicStatus,
)

__all__ = [
    "BY_MESSAGE",
    "Broker",
    "BrokerAdmin",
    "BrokerConfig",
    "BrokerNotStartedError",
    "BrokerStatus",
    "BrowsePage",
    "ByMessage",
    "ConsumeState",
    "GroupConsumeStatus",
    "GroupInfo",
    "GroupLag",
    "MessageView",
    "NoPermissionError",
    "OffsetAt",
    "OffsetResetPlan",
    "OutgoingMessage",
    "Placement",
    "PullResult",
    "PullStatus",
    "QueueLag",
    "QueueRef",
    "QueueStatus",
    "SendBackAction",
    "SendBackResult",
    "SendResult",
    "SendStatus",
    "TagFilter",
    "ToQueue",
    "TopicInfo",
    "TopicKind",
    "TopicStatus",
    "parse_tag_expression",
]
