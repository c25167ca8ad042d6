"""The classic consumer-group coordinator (kafka-protocol.md section 4), sans I/O.

One :class:`GroupCoordinator` holds every group's membership in memory; committed offsets
are not here (they live in ``consumerOffset.json`` through the broker, see
``handlers/groups.py``). It never touches a socket, a task or a real clock: requests that
must wait (JoinGroup until the join phase completes, a follower's SyncGroup until the
leader's arrives) pass a ``respond`` callback that is called exactly once with the
response fields, possibly later, from inside another call or :meth:`tick`. The server
calls :meth:`tick` a few times a second; it fires the timers, all measured on the injected
clock (tests drive a :class:`~mqcore.clock.FakeClock`).

States (Kafka's ``GroupState``) and what moves a group between them::

                 first member joins              every member has (re)joined, or
      Empty ───────────────────────▶ Preparing ─ the rebalance timeout expired ──▶ Completing
        ▲   (initial delay, extended  Rebalance  (generation + 1, leader answered     Rebalance
        │    per new member)            ▲  ▲      with the member list)                 │
        │                               │  │                                            │
        │ last member gone              │  └──── member joins/leaves/expires ───────────┤
        └───────────────────────────────┤                                              │
                                        └──── member joins/leaves/expires ── Stable ◀──┘
                                                                          leader's SyncGroup

* **Join phase.** A new member with an empty id on JoinGroup v4+ first gets
  MEMBER_ID_REQUIRED (79) with a generated id and is *pending* until it rejoins with it.
  The first member into an Empty group starts an initial delay
  (``initial_rebalance_delay_ms``; each new member extends it, capped by the rebalance
  timeout) so that consumers starting together land in one generation. Any other
  rebalance ends as soon as every member has rejoined and no pending id is outstanding,
  or when the largest rebalance timeout of the members expires; members that did not
  rejoin are then removed.
* **Protocol selection**: candidates are the protocols every member supports; each member
  votes for its first candidate; most votes wins (ties: the leader's preference).
* **Sync phase.** Followers' SyncGroups park until the leader's arrives with the
  assignments; then the group is Stable and everyone gets their own assignment. If the
  leader does not sync within the rebalance timeout, members that did not sync are
  removed and the group rebalances.
* **Liveness.** Heartbeats (and joins, syncs and commits) push a member's session
  deadline forward; a member past it is removed, which rebalances the group. A member
  parked in JoinGroup or SyncGroup does not expire.
* **Static membership basics** (``group_instance_id``, JoinGroup v5): a known instance id
  joining with an empty member id takes over the old member's place under a new member
  id, without a rebalance when the group is Stable and its protocols did not change; the
  old member id is then fenced (FENCED_INSTANCE_ID, 82).

The data it works on (states, members, groups) is in :mod:`kafka_listener.group_state`.

Thread-safety: none; the server uses one coordinator from its event loop only.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from mqcore.clock import Clock

from .errors import ErrorCode
from .group_state import (
    Group,
    GroupState,
    JoinRequest,
    Member,
    Respond,
    join_error,
    subscription_topics,
    sync_reply,
)

__all__ = ["GroupCoordinator", "GroupState", "JoinRequest"]

DEFAULT_INITIAL_REBALANCE_DELAY_MS = 300
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000  # Kafka group.min.session.timeout.ms
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000  # Kafka group.max.session.timeout.ms


class GroupCoordinator:
    """Every group's membership (see the module docstring).

    Args:
        clock: time source; only ``monotonic()`` is used.
        initial_rebalance_delay_ms: Kafka's ``group.initial.rebalance.delay.ms`` (Kafka's
            default is 3000; 300 here keeps a group forming well within 3 s).
        min_session_timeout_ms, max_session_timeout_ms: accepted session timeouts;
            others get INVALID_SESSION_TIMEOUT (26).
        new_member_id: ``client_id -> member id`` (tests pass a deterministic one).
    """

    def __init__(
        self,
        clock: Clock,
        *,
        initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.clock = clock
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self.groups: dict[str, Group] = {}

    def _now(self) -> float:
        return self.clock.monotonic() * 1000.0

    # -- JoinGroup ----------------------------------------------------------------------

    def join(self, req: JoinRequest, respond: Respond) -> None:
        """Handle a JoinGroup; ``respond`` gets the response fields (without throttle),
        at once for errors and known-member shortcuts, else when the join phase ends."""
        if not req.group_id:
            respond(join_error(ErrorCode.INVALID_GROUP_ID, req.member_id))
            return
        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            respond(join_error(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id))
            return
        group = self.groups.get(req.group_id)
        if group is None:
            group = self.groups[req.group_id] = Group(req.group_id)
        if not self._supports(group, req):
            respond(join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
            return
        if not req.member_id:
            self._join_new(group, req, respond)
        else:
            self._join_known(group, req, respond)

    def _supports(self, group: Group, req: JoinRequest) -> bool:
        if not req.protocol_type or not req.protocols:
            return False
        if not group.members:
            return True
        if req.protocol_type != group.protocol_type:
            return False
        candidates = self._candidates(group)
        return any(name in candidates for name, _ in req.protocols)

    @staticmethod
    def _candidates(group: Group) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in group.members.values()]
        return set.intersection(*sets) if sets else set()

    def _join_new(self, group: Group, req: JoinRequest, respond: Respond) -> None:
        member_id = self._new_member_id(req.client_id)
        instance = req.group_instance_id
        if instance is not None and instance in group.static:
            self._replace_static(group, req, member_id, respond)
            return
        if req.require_known_member_id and instance is None:
            group.pending[member_id] = self._now() + req.session_timeout_ms
            respond(join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id))
            return
        self._add_member(group, req, member_id, respond)

    def _join_known(self, group: Group, req: JoinRequest, respond: Respond) -> None:
        member_id = req.member_id
        instance = req.group_instance_id
        if instance is not None and group.static.get(instance, member_id) != member_id:
            respond(join_error(ErrorCode.FENCED_INSTANCE_ID, member_id))
            return
        if member_id in group.pending:
            del group.pending[member_id]
            self._add_member(group, req, member_id, respond)
            return
        member = group.members.get(member_id)
        if member is None or group.state in (GroupState.EMPTY, GroupState.DEAD):
            respond(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        self._touch(member, req)
        changed = list(req.protocols) != member.protocols
        if group.state is GroupState.PREPARING_REBALANCE:
            member.protocols = list(req.protocols)
            self._park_join(member, respond)
            self._try_complete_join(group)
        elif not changed and (
            group.state is GroupState.COMPLETING_REBALANCE or member_id != group.leader_id
        ):
            # A member that lost the join reply, or a follower re-joining a stable group:
            # answer with the current generation, no rebalance (Kafka does the same).
            respond(self._join_reply(group, member))
        else:
            member.protocols = list(req.protocols)
            self._park_join(member, respond)
            self._prepare_rebalance(group)

    def _touch(self, member: Member, req: JoinRequest) -> None:
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id = req.client_id
        member.client_host = req.client_host
        member.deadline_ms = self._now() + member.session_timeout_ms

    @staticmethod
    def _park_join(member: Member, respond: Respond) -> None:
        old = member.join_respond
        member.join_respond = respond
        if old is not None:  # a second JoinGroup while the first is parked
            old(join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))

    def _add_member(self, group: Group, req: JoinRequest, member_id: str, respond: Respond) -> None:
        member = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            list(req.protocols),
        )
        member.deadline_ms = self._now() + req.session_timeout_ms
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.group_instance_id is not None:
            group.static[req.group_instance_id] = member_id
        self._park_join(member, respond)
        if group.state is GroupState.PREPARING_REBALANCE:
            if group.initial_delay_until_ms is not None:  # extend the initial delay
                now = self._now()
                cap = group.initial_start_ms + self._rebalance_timeout(group)
                group.initial_delay_until_ms = min(now + self.initial_rebalance_delay_ms, cap)
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group)

    def _replace_static(
        self, group: Group, req: JoinRequest, new_id: str, respond: Respond
    ) -> None:
        assert req.group_instance_id is not None
        old_id = group.static[req.group_instance_id]
        member = group.members.pop(old_id, None)
        if member is None:  # stale mapping: join as a fresh static member
            del group.static[req.group_instance_id]
            self._add_member(group, req, new_id, respond)
            return
        if member.join_respond is not None:
            fenced, member.join_respond = member.join_respond, None
            fenced(join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        if member.sync_respond is not None:
            fenced, member.sync_respond = member.sync_respond, None
            fenced(sync_reply(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        group.members[new_id] = member
        group.static[req.group_instance_id] = new_id
        group.synced.discard(old_id)
        if group.leader_id == old_id:
            group.leader_id = new_id
        self._touch(member, req)
        changed = list(req.protocols) != member.protocols
        member.protocols = list(req.protocols)
        if group.state is GroupState.STABLE and not changed:
            respond(self._join_reply(group, member))
            return
        self._park_join(member, respond)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group)

    def _rebalance_timeout(self, group: Group) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                if member.sync_respond is not None:
                    reply, member.sync_respond = member.sync_respond, None
                    reply(sync_reply(ErrorCode.REBALANCE_IN_PROGRESS))
        now = self._now()
        if group.state is GroupState.EMPTY:
            group.initial_start_ms = now
            group.initial_delay_until_ms = now + self.initial_rebalance_delay_ms
        group.state = GroupState.PREPARING_REBALANCE
        group.join_deadline_ms = now + self._rebalance_timeout(group)
        self._try_complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.initial_delay_until_ms is not None or group.pending:
            return
        if all(m.join_respond is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in [m for m in group.members.values() if m.join_respond is None]:
            self._drop(group, member)
        group.initial_delay_until_ms = None
        group.generation_id += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        now = self._now()
        group.sync_deadline_ms = now + self._rebalance_timeout(group)
        group.synced = set()
        for member in group.members.values():
            reply, member.join_respond = member.join_respond, None
            member.deadline_ms = now + member.session_timeout_ms
            if reply is not None:
                reply(self._join_reply(group, member))

    def _select_protocol(self, group: Group) -> str:
        candidates = self._candidates(group)
        votes: dict[str, int] = {}
        for member in group.members.values():
            choice = next((name for name, _ in member.protocols if name in candidates), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        leader = group.members.get(group.leader_id or "") or next(iter(group.members.values()))
        preference = [name for name, _ in leader.protocols if name in votes]
        if not preference:  # no common protocol left (members changed theirs): leader's
            return leader.protocols[0][0] if leader.protocols else ""
        return max(preference, key=lambda name: votes[name])  # max keeps the first on ties

    def _join_reply(self, group: Group, member: Member) -> dict[str, Any]:
        members: list[dict[str, Any]] = []
        if member.member_id == group.leader_id:
            members = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata(group.protocol_name),
                }
                for m in group.members.values()
            ]
        return {
            "error_code": int(ErrorCode.NONE),
            "generation_id": group.generation_id,
            "protocol_name": group.protocol_name or "",
            "leader": group.leader_id or "",
            "member_id": member.member_id,
            "members": members,
        }

    # -- removing members ------------------------------------------------------------------

    def _drop(self, group: Group, member: Member) -> None:
        """Forget a member without rebalancing (the caller decides what follows)."""
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            if group.static.get(member.group_instance_id) == member.member_id:
                del group.static[member.group_instance_id]
        group.synced.discard(member.member_id)
        if member.join_respond is not None:
            reply, member.join_respond = member.join_respond, None
            reply(join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        if member.sync_respond is not None:
            parked_sync, member.sync_respond = member.sync_respond, None
            parked_sync(sync_reply(ErrorCode.UNKNOWN_MEMBER_ID))

    def _remove(self, group: Group, member: Member) -> None:
        self._drop(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        else:
            self._try_complete_join(group)

    # -- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------

    def _fenced(self, group: Group, member_id: str, instance: str | None) -> bool:
        return instance is not None and group.static.get(instance, member_id) != member_id

    def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        assignments: dict[str, bytes],
        respond: Respond,
    ) -> None:
        """Handle a SyncGroup; ``respond`` gets ``{error_code, assignment}``, at once or
        when the leader's assignments arrive."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            if group is not None and self._fenced(group, member_id, group_instance_id):
                respond(sync_reply(ErrorCode.FENCED_INSTANCE_ID))
            else:
                respond(sync_reply(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        member = group.members[member_id]
        if generation_id != group.generation_id:
            respond(sync_reply(ErrorCode.ILLEGAL_GENERATION))
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            respond(sync_reply(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        member.deadline_ms = self._now() + member.session_timeout_ms
        if group.state is GroupState.STABLE:
            respond(sync_reply(ErrorCode.NONE, member.assignment))
            return
        # CompletingRebalance: park; the leader's sync releases everyone.
        if member.sync_respond is not None:
            old, member.sync_respond = member.sync_respond, None
            old(sync_reply(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_respond = respond
        group.synced.add(member_id)
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = GroupState.STABLE
            for m in group.members.values():
                if m.sync_respond is not None:
                    reply, m.sync_respond = m.sync_respond, None
                    reply(sync_reply(ErrorCode.NONE, m.assignment))

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Handle a Heartbeat; returns its error code."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            if self._fenced(group, member_id, group_instance_id):
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.UNKNOWN_MEMBER_ID
        member.deadline_ms = self._now() + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        """Handle a LeaveGroup (v0-1: one member); returns its error code."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(group, member)
        return ErrorCode.NONE

    def check_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        """May this OffsetCommit be stored (section 4.6)? A member's commit also counts as
        a sign of life. Returns NONE or the error code for every partition."""
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            if group is None or group.state is GroupState.EMPTY:
                return ErrorCode.NONE  # a "simple" commit (assign() consumers, admin tools)
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self._fenced(group, member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        member.deadline_ms = self._now() + member.session_timeout_ms
        return ErrorCode.NONE

    # -- admin views -------------------------------------------------------------------------

    def describe(self, group_id: str) -> dict[str, Any]:
        """A DescribeGroups entry (error 0, state ``Dead`` for unknown groups)."""
        group = self.groups.get(group_id)
        if group is None:
            return {
                "error_code": 0,
                "group_id": group_id,
                "group_state": GroupState.DEAD.value,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        stable = group.state is GroupState.STABLE
        return {
            "error_code": 0,
            "group_id": group_id,
            "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol_name or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in group.members.values()
            ],
        }

    def has_members(self, group_id: str) -> bool:
        """Whether the group has members (or members still being admitted): Kafka's test
        for NON_EMPTY_GROUP on DeleteGroups."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members or group.pending)

    def forget(self, group_id: str) -> None:
        """Drop an empty group (DeleteGroups): DescribeGroups then says Dead. A group with
        members is never dropped (the caller checked :meth:`has_members`)."""
        group = self.groups.get(group_id)
        if group is not None and not group.members and not group.pending:
            del self.groups[group_id]

    def subscribed_topics(self, group_id: str) -> frozenset[str] | None:
        """The topics the members of a ``consumer`` group subscribe to (from their
        JoinGroup metadata, Kafka's ConsumerProtocol subscription), empty for an empty
        group; None when they cannot be known (another protocol type, unreadable
        metadata), which OffsetDelete must read as "every topic", as Kafka does."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return frozenset()
        if group.protocol_type != "consumer":
            return None
        topics: set[str] = set()
        for member in group.members.values():
            found = subscription_topics(member.metadata(group.protocol_name))
            if found is None:
                return None
            topics.update(found)
        return frozenset(topics)

    def list_groups(self) -> list[tuple[str, str, GroupState]]:
        """``(group_id, protocol_type, state)`` of every group the coordinator knows."""
        return [(g.group_id, g.protocol_type or "", g.state) for g in self.groups.values()]

    # -- timers ------------------------------------------------------------------------------

    def tick(self) -> None:
        """Fire every timer that is due: initial delays, rebalance and sync timeouts,
        session and pending-id expiry. Cheap when nothing is due."""
        now = self._now()
        for group in list(self.groups.values()):
            self._tick_group(group, now)

    def _tick_group(self, group: Group, now: float) -> None:
        for pending_id in [p for p, expiry in group.pending.items() if expiry <= now]:
            del group.pending[pending_id]
        expired = [
            m
            for m in group.members.values()
            if m.deadline_ms <= now and m.join_respond is None and m.sync_respond is None
        ]
        for member in expired:
            if member.member_id in group.members:
                self._remove(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            if group.initial_delay_until_ms is not None and now >= group.initial_delay_until_ms:
                group.initial_delay_until_ms = None
                self._try_complete_join(group)
            elif group.initial_delay_until_ms is None and now >= group.join_deadline_ms:
                group.pending.clear()
                self._complete_join(group)
            else:
                self._try_complete_join(group)
        elif group.state is GroupState.COMPLETING_REBALANCE and now >= group.sync_deadline_ms:
            for member in [m for m in group.members.values() if m.member_id not in group.synced]:
                self._drop(group, member)
            self._prepare_rebalance(group)

    def close(self) -> None:
        """Answer every parked request with NOT_COORDINATOR (the server is stopping)."""
        for group in self.groups.values():
            for member in group.members.values():
                if member.join_respond is not None:
                    reply, member.join_respond = member.join_respond, None
                    reply(join_error(ErrorCode.NOT_COORDINATOR, member.member_id))
                if member.sync_respond is not None:
                    parked_sync, member.sync_respond = member.sync_respond, None
                    parked_sync(sync_reply(ErrorCode.NOT_COORDINATOR))
