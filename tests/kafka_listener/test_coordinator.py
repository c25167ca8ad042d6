"""GroupCoordinator: the classic group state machine, driven by a FakeClock (no sleeps)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kafka_listener.coordinator import GroupCoordinator, GroupState, JoinRequest
from kafka_listener.errors import ErrorCode
from mqcore.clock import FakeClock

DELAY_MS = 300


class Replies:
    """Collects what a parked request's ``respond`` was called with."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def __call__(self, reply: dict[str, Any]) -> None:
        self.items.append(reply)

    @property
    def one(self) -> dict[str, Any]:
        assert len(self.items) == 1, self.items
        return self.items[0]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def coord(clock: FakeClock) -> GroupCoordinator:
    ids = itertools.count()
    return GroupCoordinator(
        clock, initial_rebalance_delay_ms=DELAY_MS, new_member_id=lambda c: f"{c}-{next(ids)}"
    )


def req(member_id: str = "", *, client: str = "c", protocols: Any = None, **kw: Any) -> JoinRequest:
    fields: dict[str, Any] = dict(
        group_id="g",
        member_id=member_id,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        protocol_type="consumer",
        protocols=protocols or [("range", b"R"), ("roundrobin", b"RR")],
    )
    fields.update(kw)
    return JoinRequest(**fields)


def tick(coord: GroupCoordinator, clock: FakeClock, ms: int) -> None:
    clock.advance(ms)
    coord.tick()


def join_new(coord: GroupCoordinator, client: str = "c", **kw: Any) -> tuple[str, Replies]:
    """The v4+ handshake: empty id → MEMBER_ID_REQUIRED, then rejoin with the id."""
    first = Replies()
    coord.join(req(client=client, **kw), first)
    assert first.one["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    member_id = first.one["member_id"]
    parked = Replies()
    coord.join(req(member_id, client=client, **kw), parked)
    return member_id, parked


def form_group(coord: GroupCoordinator, clock: FakeClock, n: int) -> list[str]:
    """n members joined and synced (the leader assigns ``b"A-<member>"``)."""
    joins = [join_new(coord, client=f"c{i}") for i in range(n)]
    tick(coord, clock, DELAY_MS)
    ids = [m for m, _ in joins]
    leader = joins[0][1].one["leader"]
    syncs = {}
    for member_id, reply in joins:
        syncs[member_id] = Replies()
        assignments = {m: f"A-{m}".encode() for m in ids} if member_id == leader else {}
        coord.sync("g", reply.one["generation_id"], member_id, None, assignments, syncs[member_id])
    for member_id, s in syncs.items():
        assert s.one == {"error_code": 0, "assignment": f"A-{member_id}".encode()}
    assert coord.groups["g"].state is GroupState.STABLE
    return ids


def test_member_id_required_then_initial_delay_then_join(coord, clock) -> None:
    member_id, parked = join_new(coord)
    assert member_id == "c-0"
    assert parked.items == []  # waiting out the initial delay
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    tick(coord, clock, DELAY_MS - 1)
    assert parked.items == []
    tick(coord, clock, 1)
    reply = parked.one
    assert reply["error_code"] == 0 and reply["generation_id"] == 1
    assert reply["leader"] == member_id and reply["protocol_name"] == "range"
    assert reply["members"] == [
        {"member_id": member_id, "group_instance_id": None, "metadata": b"R"}
    ]
    assert coord.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_v0_join_needs_no_member_id_round_trip(coord, clock) -> None:
    parked = Replies()
    coord.join(req(require_known_member_id=False), parked)
    tick(coord, clock, DELAY_MS)
    assert parked.one["error_code"] == 0 and parked.one["member_id"] == "c-0"


def test_each_new_member_extends_the_initial_delay(coord, clock) -> None:
    _, first = join_new(coord, client="a")
    tick(coord, clock, 200)
    _, second = join_new(coord, client="b")
    tick(coord, clock, 200)  # 400 ms after the first join, 200 after the second
    assert first.items == [] and second.items == []
    tick(coord, clock, 100)
    assert first.one["generation_id"] == second.one["generation_id"] == 1
    assert len(first.one["members"]) == 2 and second.one["members"] == []  # only the leader


def test_followers_sync_waits_for_leader(coord, clock) -> None:
    (a, _), (b, _) = join_new(coord, client="a"), join_new(coord, client="b")
    tick(coord, clock, DELAY_MS)
    follower_sync = Replies()
    coord.sync("g", 1, b, None, {}, follower_sync)
    assert follower_sync.items == []
    leader_sync = Replies()
    coord.sync("g", 1, a, None, {a: b"x", b: b"y"}, leader_sync)
    assert leader_sync.one == {"error_code": 0, "assignment": b"x"}
    assert follower_sync.one == {"error_code": 0, "assignment": b"y"}
    assert coord.heartbeat("g", 1, b, None) == ErrorCode.NONE


def test_new_member_rebalances_a_stable_group(coord, clock) -> None:
    (a,) = form_group(coord, clock, 1)
    c, parked = join_new(coord, client="new")
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat("g", 1, a, None) == ErrorCode.REBALANCE_IN_PROGRESS
    assert parked.items == []  # waits for the old member to rejoin
    rejoin = Replies()
    coord.join(req(a, client="c0"), rejoin)  # no initial delay this time: completes at once
    assert rejoin.one["generation_id"] == parked.one["generation_id"] == 2
    assert rejoin.one["leader"] == a and {m["member_id"] for m in rejoin.one["members"]} == {a, c}


def test_member_not_rejoining_is_dropped_at_rebalance_timeout(coord, clock) -> None:
    a, b = form_group(coord, clock, 2)
    coord.join(req(a, client="c0", rebalance_timeout_ms=5_000), Replies())  # leader rejoin
    for _ in range(11):  # b stays alive (heartbeats) but never rejoins
        assert coord.heartbeat("g", 1, b, None) == ErrorCode.REBALANCE_IN_PROGRESS
        tick(coord, clock, 5_000)
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    coord.heartbeat("g", 1, b, None)
    tick(coord, clock, 4_999)  # the largest rebalance timeout (b's 60 s) rules
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    tick(coord, clock, 1)
    group = coord.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE and list(group.members) == [a]


def test_session_expiry_removes_member_and_rebalances(coord, clock) -> None:
    a, b = form_group(coord, clock, 2)
    for _ in range(2):
        tick(coord, clock, 4_000)
        assert coord.heartbeat("g", 1, a, None) == ErrorCode.NONE  # b stays silent
    tick(coord, clock, 2_000)  # b's 10 s session is over
    assert coord.heartbeat("g", 1, a, None) == ErrorCode.REBALANCE_IN_PROGRESS
    group = coord.groups["g"]
    assert b not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat("g", 1, b, None) == ErrorCode.UNKNOWN_MEMBER_ID


def test_leave_of_last_member_empties_group(coord, clock) -> None:
    a, b = form_group(coord, clock, 2)
    assert coord.leave("g", b) == ErrorCode.NONE
    assert coord.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert coord.leave("g", a) == ErrorCode.NONE
    group = coord.groups["g"]
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    assert coord.leave("g", a) == ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.heartbeat("g", 2, a, None) == ErrorCode.UNKNOWN_MEMBER_ID


def test_sync_timeout_drops_members_that_never_synced(coord, clock) -> None:
    (_, _), (b, _) = join_new(coord, client="a"), join_new(coord, client="b")
    tick(coord, clock, DELAY_MS)
    parked = Replies()
    coord.sync("g", 1, b, None, {}, parked)  # the leader never syncs
    tick(coord, clock, 60_000)
    assert parked.one["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    assert list(coord.groups["g"].members) == [b]


def test_error_codes(coord, clock) -> None:
    bad = Replies()
    coord.join(req(group_id=""), bad)
    coord.join(req(session_timeout_ms=1_000), bad)
    coord.join(req("nobody"), bad)
    assert [r["error_code"] for r in bad.items] == [
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    a, _ = form_group(coord, clock, 1), None
    mismatch = Replies()
    coord.join(req(protocol_type="connect"), mismatch)
    coord.join(req(protocols=[("sticky", b"")]), mismatch)
    assert [r["error_code"] for r in mismatch.items] == [ErrorCode.INCONSISTENT_GROUP_PROTOCOL] * 2
    sync = Replies()
    coord.sync("g", 7, a[0], None, {}, sync)
    coord.sync("g", 1, "nobody", None, {}, sync)
    assert [r["error_code"] for r in sync.items] == [
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert coord.heartbeat("g", 7, a[0], None) == ErrorCode.ILLEGAL_GENERATION


def test_protocol_selection_by_votes(coord, clock) -> None:
    joins = [
        join_new(coord, client="a", protocols=[("roundrobin", b"1"), ("range", b"2")]),
        join_new(coord, client="b", protocols=[("range", b"3"), ("roundrobin", b"4")]),
        join_new(coord, client="c", protocols=[("range", b"5"), ("sticky", b"6")]),
    ]
    tick(coord, clock, DELAY_MS)
    leader_reply = joins[0][1].one
    assert leader_reply["protocol_name"] == "range"  # the only common one
    assert [m["metadata"] for m in leader_reply["members"]] == [b"2", b"3", b"5"]


def test_commit_rules(coord, clock) -> None:
    assert coord.check_commit("fresh", -1, "") == ErrorCode.NONE  # simple commit
    a, _ = form_group(coord, clock, 2)
    assert coord.check_commit("g", -1, "") == ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.check_commit("g", 1, a) == ErrorCode.NONE
    assert coord.check_commit("g", 0, a) == ErrorCode.ILLEGAL_GENERATION
    assert coord.check_commit("g", 1, "x") == ErrorCode.UNKNOWN_MEMBER_ID
    assert coord.check_commit("nogroup", 3, "x") == ErrorCode.UNKNOWN_MEMBER_ID
    coord.join(req(a, client="c0"), Replies())  # rebalance: commits of gen 1 still allowed
    assert coord.check_commit("g", 1, a) == ErrorCode.NONE


def test_static_member_rejoin_takes_over_without_rebalance(coord, clock) -> None:
    first = Replies()
    coord.join(req(group_instance_id="i1"), first)  # static: no MEMBER_ID_REQUIRED
    tick(coord, clock, DELAY_MS)
    old = first.one["member_id"]
    sync = Replies()
    coord.sync("g", 1, old, "i1", {old: b"mine"}, sync)
    assert sync.one["assignment"] == b"mine"
    again = Replies()
    coord.join(req(group_instance_id="i1"), again)  # restarted process, same instance id
    new = again.one["member_id"]
    assert new != old and again.one["generation_id"] == 1
    assert coord.groups["g"].state is GroupState.STABLE
    resync = Replies()
    coord.sync("g", 1, new, "i1", {}, resync)
    assert resync.one == {"error_code": 0, "assignment": b"mine"}
    assert coord.heartbeat("g", 1, old, "i1") == ErrorCode.FENCED_INSTANCE_ID


def test_describe_and_list(coord, clock) -> None:
    assert coord.describe("nope")["group_state"] == "Dead"
    a, b = form_group(coord, clock, 2)
    desc = coord.describe("g")
    assert desc["group_state"] == "Stable" and desc["protocol_data"] == "range"
    assert [(m["member_id"], m["member_assignment"]) for m in desc["members"]] == [
        (a, f"A-{a}".encode()),
        (b, f"A-{b}".encode()),
    ]
    assert coord.list_groups() == [("g", "consumer", GroupState.STABLE)]


def test_close_answers_parked_requests(coord, clock) -> None:
    _, parked = join_new(coord)
    coord.close()
    assert parked.one["error_code"] == ErrorCode.NOT_COORDINATOR


def test_parked_sync_answered_when_member_leaves_or_server_closes(coord, clock) -> None:
    (_, _), (b, _), (c, _) = (join_new(coord, client=x) for x in "abc")
    tick(coord, clock, DELAY_MS)
    b_sync, c_sync = Replies(), Replies()
    coord.sync("g", 1, b, None, {}, b_sync)
    coord.sync("g", 1, c, None, {}, c_sync)
    assert coord.leave("g", b) == ErrorCode.NONE  # rebalances: parked syncs learn it
    assert b_sync.one["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert c_sync.one["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
    a = coord.groups["g"].leader_id
    assert a is not None
    coord.join(req(a, client="a"), Replies())
    c_join = Replies()
    coord.join(req(c, client="c"), c_join)  # everyone is back: generation 2, CompletingRebalance
    parked = Replies()
    coord.sync("g", c_join.one["generation_id"], c, None, {}, parked)
    assert parked.items == []
    coord.close()
    assert parked.one["error_code"] == ErrorCode.NOT_COORDINATOR


def test_pending_member_ids_expire(coord, clock) -> None:
    first = Replies()
    coord.join(req(), first)
    pending = first.one["member_id"]
    tick(coord, clock, 10_000)
    late = Replies()
    coord.join(req(pending), late)
    assert late.one["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
