"""Refusals: each source refuses puts on its own, and clearing one never undoes another."""

from __future__ import annotations

import pytest

from mqcore.store import refusals
from mqcore.store.refusals import DISK_SOURCES, Refusals


def test_sources_are_independent() -> None:
    r = Refusals()
    assert not r and r.reason == "" and r.sources == frozenset()
    assert r.set("disk", "disk 97% used") is True
    assert r.set("reput", "no space for a ConsumeQueue") is True
    assert r.set("disk", "disk 98% used") is False  # a new reason, not a new source
    assert r.clear("disk") is True
    assert r and "reput" in r and "disk" not in r  # reput still refuses
    assert r.clear("disk") is False
    assert r.clear("reput") is True
    assert not r


def test_reasons_keep_the_order_first_given_and_filter_by_source() -> None:
    r = Refusals()
    r.set("abort", "cannot write the abort marker")
    r.set("opened", "opened read-only")
    r.set("abort", "still cannot write the abort marker")
    assert r.reason == "still cannot write the abort marker; opened read-only"
    assert r.reasons(DISK_SOURCES) == {"abort": "still cannot write the abort marker"}
    assert r.reasons() == {
        "abort": "still cannot write the abort marker",
        "opened": "opened read-only",
    }


def test_only_self_retried_sources_are_retried_and_not_before_the_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(refusals.time, "monotonic", lambda: now[0])
    r = Refusals()
    r.set("space", "no space to reserve CommitLog blocks")
    r.hold_off()
    assert not r.retry_due()  # a put has just found no space
    now[0] += refusals.RETRY_S
    assert r.retry_due()  # due, and this look starts the next delay
    assert not r.retry_due()
    now[0] += refusals.RETRY_S
    r.set("disk", "disk 97% used")  # the disk guard's: only the guard clears it
    assert not r.retry_due()
    r.clear("disk")
    assert r.retry_due()
