"""Key lookups beyond the CommitLog's retention: the REST key query and the console's key
search fall back to the data pipeline's Parquet archive (``pipeline.archive_lookup``).

:func:`query_by_key` is the broker's ``query_by_key`` plus, when fewer than ``limit`` live
messages were found and the range starts before the oldest message still in the CommitLog,
the archived matches of that older part (messages already found live are not repeated).
The archive lives at ``CAIRN["ARCHIVE_DIR"]`` (``CAIRN_ARCHIVE_DIR``, by default where
``manage.py pipeline archive`` writes it). Without pyarrow/the pipeline or without an
archive, it is the live query alone.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple

from django.conf import settings

from mqcore.broker import Broker
from mqcore.format.msgid import HostAddress
from mqcore.format.record import MESSAGE_MAGIC_CODE_V1
from mqcore.message import MessageExt

log = logging.getLogger(__name__)

__all__ = ["KeyMatch", "archive_dir", "oldest_store_time", "query_by_key"]


class KeyMatch(NamedTuple):
    message: MessageExt
    archived: bool


def archive_dir() -> Path:
    return Path(settings.CAIRN["ARCHIVE_DIR"])


def oldest_store_time(broker: Broker) -> int | None:
    """Store time of the oldest message still in the CommitLog (None: the log is empty)."""
    commit_log = broker.store.commit_log
    low = commit_log.min_offset
    if low >= commit_log.max_offset:
        return None
    ts = commit_log.store_time_of(low, 64)
    return ts if ts >= 0 else None


def _host(text: str) -> HostAddress:
    ip, _, port = text.rpartition(":")
    return HostAddress(ip.removeprefix("[").removesuffix("]"), int(port or 0))


def _message(row: dict[str, Any]) -> MessageExt:
    """An archive row as the MessageExt ``mqcore`` would have decoded."""
    return MessageExt(
        store_size=row["store_size"],
        magic_code=MESSAGE_MAGIC_CODE_V1,
        body_crc=row["body_crc"],
        queue_id=row["queue_id"],
        flag=row["flag"],
        queue_offset=row["queue_offset"],
        phys_offset=row["phys_offset"],
        sys_flag=row["sys_flag"],
        born_timestamp=row["born_timestamp"],
        born_host=_host(row["born_host"]),
        store_timestamp=row["store_timestamp"],
        store_host=_host(row["store_host"]),
        reconsume_times=row["reconsume_times"],
        prepared_transaction_offset=row["prepared_transaction_offset"],
        body=row["body"] or b"",
        topic=row["topic"],
        properties=dict(row["properties"] or {}),
    )


def _archived(topic: str, key: str, begin: int, end: int, limit: int) -> list[MessageExt]:
    root = archive_dir()
    if not root.is_dir():
        return []
    try:
        from pipeline.archive_lookup import lookup
    except ImportError:  # no pyarrow: the spark extra is not installed
        return []
    try:
        rows = lookup(root, topic, key, begin, end, limit)
    except (OSError, ValueError) as exc:  # an unreadable archive must not fail the live query
        log.warning("archive key lookup in %s failed: %s", root, exc)
        return []
    return [_message(row) for row in rows]


def query_by_key(
    broker: Broker, topic: str, key: str, begin: int, end: int, limit: int
) -> list[KeyMatch]:
    """Live matches, plus archived ones older than the CommitLog, oldest first, at most
    ``limit``."""
    live = broker.query_by_key(topic, key, begin, end, limit)
    matches = [KeyMatch(m, False) for m in live]
    if len(live) >= limit:
        return matches
    oldest = oldest_store_time(broker)
    archive_end = end if oldest is None else min(end, oldest)
    if begin > archive_end:
        return matches
    seen = {m.msg_id for m in live} | {m.offset_msg_id for m in live}
    for message in _archived(topic, key, begin, archive_end, limit + len(live)):
        if message.msg_id not in seen and message.offset_msg_id not in seen:
            seen.add(message.msg_id)
            matches.append(KeyMatch(message, True))
    matches.sort(key=lambda m: (m.message.store_timestamp, m.message.phys_offset))
    return matches[:limit]
