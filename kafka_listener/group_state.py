"""The coordinator's data: group states, members, groups and the replies it builds.

Plain data, no behaviour beyond small lookups: :mod:`kafka_listener.coordinator` owns every
transition. Replies are the response fields of JoinGroup and SyncGroup (without
``throttle_time_ms``), as dicts the handlers pass to the connection unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mqcore.errors import RemoteProtocolError

from .errors import ErrorCode
from .primitives import Reader

Respond = Callable[[dict[str, Any]], None]


class GroupState(StrEnum):
    """Kafka's group states, spelled as DescribeGroups reports them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """The JoinGroup fields the coordinator needs (``client_host`` as Kafka shows it:
    ``/127.0.0.1``). ``require_known_member_id`` is true for JoinGroup v4+."""

    group_id: str
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Sequence[tuple[str, bytes]]
    group_instance_id: str | None = None
    require_known_member_id: bool = True


@dataclass(slots=True)
class Member:
    """One group member."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline_ms: float = 0.0
    join_respond: Respond | None = None
    sync_respond: Respond | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""


@dataclass(slots=True)
class Group:
    """One group's membership state."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, float] = field(default_factory=dict)  # member id -> expiry (ms)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    join_deadline_ms: float = 0.0
    initial_delay_until_ms: float | None = None
    initial_start_ms: float = 0.0
    sync_deadline_ms: float = 0.0
    synced: set[str] = field(default_factory=set)


def join_error(code: ErrorCode, member_id: str = "") -> dict[str, Any]:
    return {
        "error_code": int(code),
        "generation_id": -1,
        "protocol_name": "",
        "leader": "",
        "member_id": member_id,
        "members": [],
    }


def sync_reply(code: ErrorCode, assignment: bytes = b"") -> dict[str, Any]:
    return {"error_code": int(code), "assignment": assignment}


def subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocol subscription (a ``consumer`` member's JoinGroup
    metadata: int16 version, then an array of topic names, whatever the version), or None
    when it cannot be read."""
    reader = Reader(metadata)
    try:
        if reader.int16() < 0:
            return None
        return [reader.string() for _ in range(reader.array_length(nullable=False))]
    except RemoteProtocolError:
        return None
