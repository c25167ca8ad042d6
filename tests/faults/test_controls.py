"""The harness is checked before it judges anything: a run with no fault passes, and a store
changed behind the broker's back (a body rewritten with a matching CRC, a record removed
whole) is caught as corrupted-served and lost."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import pytest

from tests.faults import inject
from tests.faults.base import BaseStore, run_static_fault
from tests.faults.conftest import Conclude
from tests.faults.harness import Fault, Ledger, Verdict, record_row

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def no_fault(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    return Fault("control-none", seed, description="nothing changed")


@pytest.mark.parametrize("which", ["clean", "killed"])
def test_no_fault_passes(
    which: str, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = clean_base if which == "clean" else killed_base
    verdict = run_static_fault(base, tmp_path / "run", 0, no_fault)
    assert verdict.intact == len(base.ledger) > 2900
    conclude(verdict)


def rewrite_body_with_matching_crc(
    store: Path, ledger: Ledger, rng: random.Random, seed: int
) -> Fault:
    """Replace a mid-log record's body with other bytes of the same length and write their
    CRC: no broker can tell, so only the ledger can."""
    i = rng.choice(sorted(range(len(ledger)), key=lambda i: ledger.acks[i].phys_offset)[100:-100])
    segment, position, length = inject._checked_record(store, ledger, i)
    forged = bytes(rng.choice(b"FORGED") for _ in range(length))
    with segment.open("r+b") as f:
        f.seek(position + inject.BODY)
        f.write(forged)
        f.seek(position + inject.BODYCRC)
        f.write(struct.pack(">i", zlib.crc32(forged) & 0x7FFFFFFF))
    return Fault(
        "control-forged-body", seed, description=f"forged the body of {ledger.acks[i].label()}"
    )


def zero_last_record(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    """Zero the last record of the log: the log then ends cleanly one record earlier, which
    recovery cannot tell from a log that never had it."""
    last = max(range(len(ledger)), key=lambda i: ledger.acks[i].phys_offset)
    segment, position, _ = inject._checked_record(store, ledger, last)
    with segment.open("r+b") as f:
        f.seek(position)
        f.write(bytes(ledger.acks[last].size))
    return Fault("control-dropped-record", seed, description=f"zeroed {ledger.acks[last].label()}")


def record_caught(verdict: Verdict, nodeid: str, caught: bool) -> None:
    row = verdict.row(nodeid)
    row["passed"] = caught
    row["failures"] = [f"caught as it must be: {f}" for f in verdict.failures[:3]]
    record_row(row)


def test_a_forged_body_is_caught(
    clean_base: BaseStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    verdict = run_static_fault(clean_base, tmp_path / "run", 7, rewrite_body_with_matching_crc)
    caught = len(verdict.corrupted) == 1 and not verdict.passed
    record_caught(verdict, request.node.nodeid, caught)
    assert caught, verdict.message()
    assert not verdict.lost, verdict.message()


def test_a_silently_dropped_record_is_caught(
    clean_base: BaseStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    verdict = run_static_fault(clean_base, tmp_path / "run", 8, zero_last_record)
    caught = len(verdict.lost) == 1 and not verdict.passed
    record_caught(verdict, request.node.nodeid, caught)
    assert caught, verdict.message()
