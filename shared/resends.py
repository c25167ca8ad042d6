"""What was resent from a group's dead-letter queue, by msgId, from the audit log.

Every resend writes one ``message.dlq_resend`` entry whose target is the message's msgId (the
``UNIQ_KEY`` the lists show) and whose new value names the group and the DLQ record's
offsetMsgId. Entries written before that named the DLQ record's offsetMsgId as the target;
both ids are looked up, so those count too. The REST API and the console warn before a
message is resent a second time (see :func:`previous_resends`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from accounts.models import AuditEntry
from mqcore.message import MessageExt

ACTION = "message.dlq_resend"


def ids_of(message: MessageExt) -> tuple[str, str]:
    """(msgId, offsetMsgId) of a DLQ record."""
    return message.msg_id, message.offset_msg_id


def previous_resends(group: str, messages: Iterable[MessageExt]) -> dict[str, list[dict[str, Any]]]:
    """``{msgId: [{at (epoch ms), at_text, username, front_end, topic, queue_id,
    queue_offset}]}`` of the given
    DLQ records of ``group`` that were resent before, oldest first; the others are left out."""
    by_id: dict[str, str] = {}
    for message in messages:
        msg_id, offset_msg_id = ids_of(message)
        by_id[msg_id] = msg_id
        by_id[offset_msg_id] = msg_id
    if not by_id:
        return {}
    found: dict[str, list[dict[str, Any]]] = {}
    entries = AuditEntry.objects.filter(action=ACTION, target__in=list(by_id)).order_by("id")
    for entry in entries:
        new = entry.new_value if isinstance(entry.new_value, dict) else {}
        if new.get("group") != group:
            continue
        found.setdefault(by_id[entry.target], []).append(
            {
                "at": _ms(entry.timestamp),
                "at_text": f"{entry.timestamp:%Y-%m-%d %H:%M:%S} UTC",
                "username": entry.username,
                "front_end": entry.front_end,
                "topic": new.get("topic"),
                "queue_id": new.get("queue_id"),
                "queue_offset": new.get("queue_offset"),
            }
        )
    return found


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def impact(group: str, message: MessageExt, before: list[dict[str, Any]]) -> dict[str, Any]:
    """The confirmation a second resend needs (:func:`api.confirm.confirmation_required`)."""
    last = before[-1]
    times = len(before)
    return {
        "change": ACTION,
        "group": group,
        "msg_id": message.msg_id,
        "dlq_offset_msg_id": message.offset_msg_id,
        "resent": before,
        "at_risk": True,
        "summary": f"Message {message.msg_id} was resent from the DLQ of {group} "
        f"{'once' if times == 1 else f'{times} times'} already (last by {last['username']}, "
        f"to {last['topic']} queue {last['queue_id']} offset {last['queue_offset']}): "
        "resending it again delivers it again.",
    }


def audit_value(group: str, message: MessageExt | None, sent: dict[str, Any]) -> dict[str, Any]:
    """The new value of a resend's audit entry: the group, the DLQ record it came from and
    where it was stored."""
    value = {"group": group, **sent}
    if message is not None:
        value["dlq_offset_msg_id"] = message.offset_msg_id
    return value
