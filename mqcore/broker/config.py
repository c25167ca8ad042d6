"""BrokerConfig: the broker-level settings (RocketMQ's ``BrokerConfig`` names where they exist)."""

from __future__ import annotations

from dataclasses import dataclass

from mqcore.errors import ValidationError


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Broker settings.

    Attributes:
        broker_name, cluster_name: identity shown wherever RocketMQ shows a broker; None
            takes the store's (``StoreConfig.broker_name`` / ``cluster_name``).
        broker_perm: ``brokerPermission``; without WRITE (2) every send is refused, without
            READ (4) every pull.
        auto_create_topics: create unknown topics on first send from ``TBW102``'s defaults
            (RocketMQ ``autoCreateTopicEnable``; off here by default: a typo in a topic name
            should be an error, not a new topic).
        default_topic_queue_nums: queue count asked for when auto-creating (RocketMQ
            producer ``defaultTopicQueueNums`` = 4; capped by TBW102's write queues).
        max_pull_wait_ms: longest long-poll a pull may ask for; longer waits are cut to it.
        long_poll_recheck_ms: a waiting pull also re-reads the queue this often, so that
            messages dispatched by another process (Celery reput) are seen without a
            notification.
        max_pull_count: most messages one pull may ask for.
        max_batch_bytes: most body bytes in one :meth:`Broker.send` call (RocketMQ checks a
            batch against ``maxMessageSize``, 4 MiB).
        max_browse_limit: most messages one browse page or key query may ask for.
        dispatch_on_send: dispatch (reput) inline after each send, so a pull right after
            sees the message without a reput service. For tests and embedded use; the
            broker process runs the reput service instead.
    """

    broker_name: str | None = None
    cluster_name: str | None = None
    broker_perm: int = 6
    auto_create_topics: bool = False
    default_topic_queue_nums: int = 4
    max_pull_wait_ms: int = 30_000
    long_poll_recheck_ms: int = 1_000
    max_pull_count: int = 1_024
    max_batch_bytes: int = 4 * 1024 * 1024
    max_browse_limit: int = 1_000
    dispatch_on_send: bool = False

    def __post_init__(self) -> None:
        checks = [
            ("broker_perm", 0 <= self.broker_perm <= 7, "must be 0..7"),
            ("default_topic_queue_nums", self.default_topic_queue_nums >= 1, "must be >= 1"),
            ("max_pull_wait_ms", self.max_pull_wait_ms >= 0, "must be >= 0"),
            ("long_poll_recheck_ms", self.long_poll_recheck_ms >= 1, "must be >= 1"),
            ("max_pull_count", self.max_pull_count >= 1, "must be >= 1"),
            ("max_batch_bytes", self.max_batch_bytes >= 1, "must be >= 1"),
            ("max_browse_limit", self.max_browse_limit >= 1, "must be >= 1"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValidationError(name, "range", f"BrokerConfig.{name} {rule}")
