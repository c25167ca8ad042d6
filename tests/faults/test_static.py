"""One fault in a stopped store, then a real broker on it: every acknowledged message must
still be readable at its acknowledged queue and offset, with its body, and findable by key;
what the fault destroyed must be quarantined and reported; derived files must heal.

Each test runs several seeds (the seed is in the test id and in the failure message); the
fault's position comes from ``random.Random(seed)``. Odd seeds start from the killed base
(``abort`` present: crash recovery), even seeds from the cleanly stopped one, where a fault
does not say otherwise.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.faults import inject
from tests.faults.base import BaseStore, run_static_fault
from tests.faults.conftest import Conclude

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def seeds(*values: int) -> list[object]:
    return [pytest.param(s, id=f"seed={s}") for s in values]


def pick(seed: int, clean: BaseStore, killed: BaseStore) -> BaseStore:
    return killed if seed % 2 else clean


# --- bit flips ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "seed"),
    # Seeds chosen so that each place gets body and framing (TOTALSIZE, MAGIC, BODYLENGTH)
    # flips, on both bases: older 1 TOTALSIZE/killed, 2 body/clean, 8 MAGIC/clean; last 1
    # body/killed, 2 body/clean, 7 BODYLENGTH/killed; tail 1 body/killed (third-to-last
    # record), 2 body/clean, 6 BODYLENGTH/clean (the last record). The bases are written in
    # the same order every session, so a seed hits the same record; the description in a
    # failure names it, with the byte and the bit.
    [
        pytest.param(where, seed, id=f"{where}-seed={seed}")
        for where, chosen in (("older", (1, 2, 8)), ("last", (1, 2, 7)), ("tail", (1, 2, 6)))
        for seed in chosen
    ],
)
def test_commitlog_bit_flip(
    where: str,
    seed: int,
    clean_base: BaseStore,
    killed_base: BaseStore,
    tmp_path: Path,
    conclude: Conclude,
) -> None:
    """A flipped bit in a record mid-segment (an older segment, the last one) or in the last
    records of the log: that record is quarantined and reported, every other one is read."""
    flip = functools.partial(inject.commitlog_flip, where=where)
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, flip))


# 1: a tag code (killed base), 2: a physical offset (clean), 5: a size (killed).
@pytest.mark.parametrize("seed", seeds(1, 2, 5))
def test_consume_queue_bit_flip(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.cq_flip))


# 1: an entry (killed base), 2: the slot table (clean), 6: an entry of the last file (clean).
@pytest.mark.parametrize("seed", seeds(1, 2, 6))
def test_index_file_bit_flip(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.index_flip))


# 2: physicMsgTimestamp (clean base), 5: confirmPhyOffset (killed).
@pytest.mark.parametrize("seed", seeds(2, 5))
def test_checkpoint_bit_flip(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.checkpoint_flip))


@pytest.mark.parametrize(
    ("name", "seed"),
    # Per file, a seed whose flip breaks the JSON and one whose flip leaves it parsing.
    [
        pytest.param(name, seed, id=f"{name}-seed={seed}")
        for name, chosen in (
            ("topics.json", (1, 4)),
            ("subscriptionGroup.json", (1, 2)),
            ("consumerOffset.json", (5, 1)),
            ("delayOffset.json", (1, 7)),
            ("consumerFilter.json", (6, 1)),
        )
        for seed in chosen
    ],
)
def test_config_file_bit_flip(
    name: str, seed: int, clean_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    """A flipped bit anywhere in a config file: topics, groups and committed offsets are
    still there (recovered from a valid copy, reconciled with the store, and reported),
    unless the flip left the file valid, which no broker of this format can tell."""
    flip = functools.partial(inject.config_flip, name=name)
    conclude(run_static_fault(clean_base, tmp_path / "run", seed, flip, config_checks=True))


# --- truncation ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", seeds(1, 2))
def test_commitlog_segment_truncated(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    """A segment before the last cut short: recovered up to its last whole record, the cut
    reported, every later segment still read."""
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.commitlog_truncate))


@pytest.mark.parametrize("seed", seeds(1, 2))
def test_consume_queue_file_truncated(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.cq_truncate))


@pytest.mark.parametrize("seed", seeds(1, 2))
def test_index_file_truncated(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.index_truncate))


@pytest.mark.parametrize("seed", seeds(1))
def test_checkpoint_truncated(
    seed: int, clean_base: BaseStore, killed_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    base = pick(seed, clean_base, killed_base)
    conclude(run_static_fault(base, tmp_path / "run", seed, inject.checkpoint_truncate))


@pytest.mark.parametrize("seed", seeds(1))
@pytest.mark.parametrize("name", inject.CONFIG_FILES)
def test_config_file_truncated(
    name: str, seed: int, clean_base: BaseStore, tmp_path: Path, conclude: Conclude
) -> None:
    cut = functools.partial(inject.config_truncate, name=name)
    conclude(run_static_fault(clean_base, tmp_path / "run", seed, cut, config_checks=True))


# --- deleted directories ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["clean", "killed"])
@pytest.mark.parametrize("name", ["consumequeue", "index"])
def test_derived_directory_deleted(
    name: str,
    which: str,
    clean_base: BaseStore,
    killed_base: BaseStore,
    tmp_path: Path,
    conclude: Conclude,
) -> None:
    """Every ConsumeQueue (or IndexFile) deleted: rebuilt from the CommitLog, reported."""
    base = clean_base if which == "clean" else killed_base
    delete = functools.partial(inject.delete_dir, name=name)
    conclude(run_static_fault(base, tmp_path / "run", 0 if which == "clean" else 1, delete))
