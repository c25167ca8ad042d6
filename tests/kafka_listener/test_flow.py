"""BufferBudget: who reads while the connections' request bytes are over the cap, sans I/O."""

from __future__ import annotations

import random

import pytest

from kafka_listener.flow import BufferBudget, Flow

MIB = 1024 * 1024


def flows(budget: BufferBudget, n: int) -> list[Flow]:
    return [budget.register(0.0, lambda: 0) for _ in range(n)]


def test_under_the_cap_nobody_pauses() -> None:
    budget = BufferBudget(10 * MIB)
    a, b = flows(budget, 2)
    assert budget.update(a, 4 * MIB, True, 0) == (False, [])
    assert budget.update(b, 6 * MIB, True, 0) == (False, [])
    assert budget.total == 10 * MIB and budget.paused_count == 0


def test_over_the_cap_one_adder_goes_on_and_the_others_pause_in_order() -> None:
    budget = BufferBudget(10 * MIB)
    a, b, c, quiet = flows(budget, 4)
    assert budget.update(a, 8 * MIB, True, 0) == (False, [])
    assert budget.update(b, 4 * MIB, True, 0) == (False, [])  # over now: b is let through
    assert budget.update(c, 1 * MIB, True, 0) == (True, [])
    assert budget.update(a, 10 * MIB, True, 0) == (True, [])  # adding, not let through
    assert budget.update(b, 5 * MIB, True, 0) == (False, [])  # b goes on
    assert budget.update(quiet, 0, False, 0) == (False, [])  # holds no partial frame: reads on
    assert (a.paused, b.paused, c.paused, quiet.paused) == (True, False, True, False)
    assert budget.paused_count == 2
    # b's frame completes and is handled: its bytes go, the longest-paused goes next
    assert budget.update(b, 5 * MIB, False, 0) == (False, [])
    pause, resume = budget.update(b, 0, False, 1.5)
    assert (pause, resume) == (False, [c]) and not c.paused and c.last_active == 1.5
    assert budget.paused_count == 1
    assert budget.update(c, 2 * MIB, True, 2) == (False, [])  # let through: reads on
    # c finishes: still over (a holds 10 MiB): a is let through
    assert budget.update(c, 0, False, 2) == (False, [a])


def test_back_under_the_cap_every_paused_connection_resumes() -> None:
    budget = BufferBudget(10 * MIB)
    a, b, c = flows(budget, 3)
    budget.update(a, 6 * MIB, True, 0)
    budget.update(b, 6 * MIB, True, 0)  # let through
    assert budget.update(c, 1 * MIB, True, 0) == (True, [])
    assert budget.update(a, 7 * MIB, True, 0) == (True, [])
    pause, resume = budget.update(b, 0, False, 3)
    assert not pause and set(resume) == {a, c} and budget.paused_count == 0
    assert a.last_active == c.last_active == 3


def test_a_paused_connection_handing_off_stays_paused_once() -> None:
    budget = BufferBudget(10 * MIB)
    a, b = flows(budget, 2)
    budget.update(a, 11 * MIB, True, 0)  # let through
    assert budget.update(b, 3 * MIB, True, 0) == (True, [])
    assert budget.update(b, 2 * MIB, True, 0) == (True, [])  # a request of its read handled
    assert budget.paused_count == 1
    assert budget.update(a, 0, False, 0) == (False, [b])  # 2 MiB left: under, all resume


def test_closing_releases_bytes_and_the_let_through_slot() -> None:
    budget = BufferBudget(10 * MIB)
    a, b, c = flows(budget, 3)
    budget.update(a, 9 * MIB, True, 0)
    budget.update(b, 3 * MIB, True, 0)  # let through
    budget.update(c, 2 * MIB, True, 0)  # paused
    budget.update(a, 9 * MIB + 1, True, 0)  # paused
    assert budget.close(c, 0) == []  # a paused one leaves: still over, b still let through
    assert budget.paused_count == 1 and budget.total == 12 * MIB + 1
    assert budget.close(b, 0) == [a]  # under the cap again
    assert budget.total == 9 * MIB + 1 and b not in budget.flows


def test_idle_connections() -> None:
    budget = BufferBudget(MIB)
    in_flight = {"busy": 1}
    quiet = budget.register(0.0, lambda: 0)
    busy = budget.register(0.0, lambda: in_flight["busy"])
    paused = budget.register(0.0, lambda: 0)
    budget.update(busy, 2 * MIB, True, 0)
    budget.update(paused, 1, True, 0)
    assert paused.paused
    assert budget.idle(5.0, 10.0) == []
    assert budget.idle(10.0, 10.0) == [quiet]  # busy has a request in flight, paused is paused
    in_flight["busy"] = 0
    quiet.touch(9.0)
    assert budget.idle(10.0, 10.0) == [busy]


@pytest.mark.parametrize("seed", range(5))
def test_random_traffic_stays_bounded_and_every_frame_completes(seed: int) -> None:
    """Connections send frames in random-sized reads; the total never exceeds the cap by
    more than one frame and a read per connection, and every frame gets through."""
    rng = random.Random(seed)
    cap, frame, read = 32 * MIB, 20 * MIB, MIB
    budget = BufferBudget(cap)
    n = 12
    conns = flows(budget, n)
    remaining = {f: rng.randrange(frame // 2, frame) for f in conns}  # one frame each
    held = dict.fromkeys(conns, 0)
    peak = 0
    for _ in range(100_000):
        readers = [f for f in conns if not f.paused and remaining[f] > 0]
        if not readers:
            break
        f = rng.choice(readers)
        got = min(remaining[f], rng.randrange(1, read + 1))
        remaining[f] -= got
        held[f] += got
        budget.update(f, held[f], remaining[f] > 0, 0)
        peak = max(peak, budget.total)
        if remaining[f] == 0:  # the frame is complete and handled
            held[f] = 0
            budget.update(f, 0, False, 0)
    assert all(v == 0 for v in remaining.values()), "a frame never completed"
    assert budget.total == 0 and budget.paused_count == 0
    assert peak <= cap + frame + n * read
