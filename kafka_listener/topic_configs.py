"""Kafka topic configs: what Cairn really does, and refusing what it cannot honour (issue 21).

Cairn's topics have no per-topic Kafka configs: retention and segment size are the
CommitLog's (one log shared by every topic, ``CAIRN_FILE_RESERVED_HOURS``,
``CAIRN_COMMITLOG_FILE_SIZE``), the message size limit is the store's, cleanup only deletes
whole expired segments (no compaction), record timestamps are the producer's and batches are
stored as the producer compressed them. :func:`effective_configs` says exactly that, for
DescribeConfigs (every entry read-only: nothing can be changed per topic).

CreateTopics must not pretend either (:func:`config_problem`): a name Kafka does not know is
INVALID_CONFIG ("unknown topic config"); a known one is accepted only with the value Cairn
already has (or null, "the default"), else INVALID_CONFIG naming what is not supported and
what Cairn does instead; the topic is then not created.
"""

from __future__ import annotations

from collections.abc import Mapping

from mqcore.store.config import StoreConfig

# Every topic config Kafka 4 knows (TopicConfig / LogConfig), so that a real config Cairn
# cannot honour is told apart from a typo.
KAFKA_TOPIC_CONFIGS: frozenset[str] = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "preallocate",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
        "unclean.leader.election.enable",
    }
)

# Why a known config cannot take another value (the end of the error message).
_WHY: Mapping[str, str] = {
    "cleanup.policy": "Cairn deletes whole expired CommitLog segments and does not compact",
    "compression.type": "batches are stored as the producer compressed them",
    "max.message.bytes": "the message size limit is the store's (one for every topic)",
    "message.timestamp.type": "records keep the producer's timestamp",
    "min.insync.replicas": "Cairn is a single node",
    "retention.bytes": "retention is by time, CommitLog-wide (CAIRN_FILE_RESERVED_HOURS)",
    "retention.ms": "retention is CommitLog-wide (CAIRN_FILE_RESERVED_HOURS)",
    "segment.bytes": "the CommitLog's segments are shared by every topic "
    "(CAIRN_COMMITLOG_FILE_SIZE)",
}
_NOT_PER_TOPIC = "Cairn has no per-topic setting for it"


def effective_configs(store: StoreConfig) -> dict[str, str]:
    """The Kafka topic configs every Cairn topic has, as Kafka spells their values."""
    return {
        "cleanup.policy": "delete",
        "compression.type": "producer",
        "max.message.bytes": str(store.max_message_size),
        "message.timestamp.type": "CreateTime",
        "min.insync.replicas": "1",
        "retention.bytes": "-1",
        "retention.ms": str(int(store.file_reserved_time_hours * 3_600_000)),
        "segment.bytes": str(store.commitlog_file_size),
    }


def config_problem(store: StoreConfig, name: str, value: str | None) -> str | None:
    """Why CreateTopics cannot take ``name=value`` (the INVALID_CONFIG message), or None
    when Cairn honours it: null (the default), or the value Cairn has anyway."""
    if name not in KAFKA_TOPIC_CONFIGS:
        return f"unknown topic config {name!r}"
    if value is None:
        return None
    actual = effective_configs(store).get(name)
    if actual is not None and _same(name, value, actual):
        return None
    why = _WHY.get(name, _NOT_PER_TOPIC)
    does = f"; every topic has {name}={actual}" if actual is not None else ""
    return f"topic config {name}={value} is not supported: {why}{does}"


def _same(name: str, value: str, actual: str) -> bool:
    if name == "cleanup.policy":
        return [p.strip() for p in value.split(",") if p.strip()] == [actual]
    return value.strip().lower() == actual.lower()
