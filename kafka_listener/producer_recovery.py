"""Settle the journal of idempotent producers against the recovered CommitLog, at start.

The journal (``producer_journal.py``) says which batches producers stored; the CommitLog
says which records survived the crash. Producer state must describe exactly the
surviving data, as Kafka's does (``ProducerStateManager.truncateAndReload`` drops
snapshots beyond the log end and replays the log after the newest one):

* a BATCH whose records are all below the recovered CommitLog end is kept: a retry of
  it is answered with its base offset, nothing stored again. The check is one
  comparison when the CommitLog end read after the append (``log_end``) is below the
  recovered end (always, after a kill -9: the page cache keeps every appended byte); a
  batch across the recovered end is read record by record (its ``record_count`` records from
  ``first_phys`` must be its topic and partition at base, base + 1, ...);
* a BATCH whose records are not all there is dropped (lost in the crash: the retry must
  be stored again, never answered as a duplicate of data that is gone); so the
  partition's state goes back to the batch before it;
* an INTENT with neither BATCH nor ABANDONED after it is a batch the crash caught
  between writing the intent and acknowledging: it is looked for in the CommitLog from
  the intent's ``log_start`` (the CommitLog end before the append) to the recovered
  end: ``record_count`` records of its topic and partition, contiguous in the log (one put),
  consecutive queue offsets, whose first and last records have the intent's body CRCs
  and born host (the producer's connection). Found, it becomes a BATCH at that base
  offset; not found, it was not stored (or not all of it) and is dropped. A run
  already claimed by a kept batch is never claimed twice.

The window read for intents is short: only batches in flight at the crash have open
intents, and a running journal is synced at least every ``sync_interval_s``.

Thread-safety: a plain function over a store nobody writes to yet (called before the
listener accepts connections).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from mqcore.format.msgid import encode_host
from mqcore.format.record import DispatchRequest
from mqcore.store.commit_log import CommitLog

from .producer_journal import Abandoned, Batch, Entry, IdsIssued, Intent

#: CommitLog bytes read per ``iter_dispatch`` call while scanning.
_SCAN_STEP_BYTES = 8 * 1024 * 1024

Key = tuple[str, int]  # (store topic, partition)


@dataclass
class Settled:
    """The entries to replay (IDS and BATCH, in journal order) and what was decided."""

    entries: list[IdsIssued | Batch] = field(default_factory=list)
    kept: int = 0  # batches whose records are in the CommitLog
    lost: int = 0  # batches dropped: their records did not survive
    found: int = 0  # open intents whose batch is in the CommitLog
    not_found: int = 0  # open intents whose batch is not (never or not wholly stored)
    last_intent_id: int = 0  # the highest intent id seen

    def summary(self) -> str:
        text = f"{self.kept} batches kept"
        if self.lost:
            text += f", {self.lost} dropped (their records were lost in the crash)"
        if self.found or self.not_found:
            text += (
                f"; {self.found + self.not_found} batches in flight at the crash: "
                f"{self.found} found in the CommitLog, {self.not_found} not stored"
            )
        return text


def settle(entries: Sequence[Entry], log: CommitLog, end: int) -> Settled:
    """Decide every entry against the CommitLog as recovered up to ``end`` (module
    docstring)."""
    settled = Settled()
    open_intents: dict[int, Intent] = {}
    for entry in entries:
        if isinstance(entry, Intent):
            open_intents[entry.intent_id] = entry
            settled.last_intent_id = max(settled.last_intent_id, entry.intent_id)
        elif isinstance(entry, Batch) and entry.intent_id:
            open_intents.pop(entry.intent_id, None)
        elif isinstance(entry, Abandoned):
            open_intents.pop(entry.intent_id, None)
    claimed: set[tuple[str, int, int]] = set()
    for entry in entries:
        if isinstance(entry, IdsIssued):
            settled.entries.append(entry)
        elif isinstance(entry, Batch):
            if batch_in_log(entry, log, end):
                settled.entries.append(entry._replace(intent_id=0))
                claimed.add((entry.topic, entry.partition, entry.base_offset))
                settled.kept += 1
            else:
                settled.lost += 1
    if open_intents:
        found = find_intents(list(open_intents.values()), log, end, claimed)
        settled.found = len(found)
        settled.not_found = len(open_intents) - len(found)
        settled.entries += found
    return settled


def batch_in_log(batch: Batch, log: CommitLog, end: int) -> bool:
    """Every record of ``batch`` lies below ``end`` (module docstring)."""
    if batch.log_end <= end or batch.first_phys < log.min_offset:
        return True  # below the recovered end (or deleted since by retention: it was there)
    if batch.first_phys >= end:
        return False
    records = itertools.islice(_records(log, batch.first_phys, end), batch.record_count)
    expected_phys = batch.first_phys
    count = 0
    for i, record in enumerate(records):
        if (
            record.phys_offset != expected_phys
            or (record.topic, record.queue_id) != (batch.topic, batch.partition)
            or record.queue_offset != batch.base_offset + i
        ):
            return False
        expected_phys += record.size
        count += 1
    return count == batch.record_count


def _records(log: CommitLog, start: int, end: int) -> Iterator[DispatchRequest]:
    """The records from ``start`` to ``end`` (blank records skipped, as reput does)."""
    offset = start
    while offset < end:
        reached = offset
        for item in log.iter_dispatch(offset, end, _SCAN_STEP_BYTES, log.delay_levels_ms):
            if isinstance(item, int):
                reached = item
            else:
                yield item
        if reached <= offset:
            return  # a record it cannot pass (recovery's business, not ours)
        offset = reached


@dataclass
class _Run:
    """The records of one (topic, partition) in the scanned window, in log order."""

    phys: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    size_sums: list[int] = field(default_factory=lambda: [0])  # prefix sums of sizes

    def add(self, record: DispatchRequest) -> None:
        self.phys.append(record.phys_offset)
        self.sizes.append(record.size)
        self.queue_offsets.append(record.queue_offset)
        self.size_sums.append(self.size_sums[-1] + record.size)

    def is_one_put(self, i: int, count: int) -> bool:
        """Records ``i`` .. ``i + count - 1`` are back to back in the log with
        consecutive queue offsets (nothing of another queue between them)."""
        last = i + count - 1
        if last >= len(self.phys):
            return False
        if self.queue_offsets[last] - self.queue_offsets[i] != count - 1:
            return False
        span = self.phys[last] + self.sizes[last] - self.phys[i]
        return span == self.size_sums[last + 1] - self.size_sums[i]


def find_intents(
    intents: list[Intent], log: CommitLog, end: int, claimed: set[tuple[str, int, int]]
) -> list[Batch]:
    """The batches of ``intents`` found in the CommitLog below ``end`` (module docstring),
    as BATCH entries; ``claimed`` (topic, partition, base offset) runs are skipped and
    the ones found are added to it."""
    start = max(min(intent.log_start for intent in intents), log.min_offset)
    runs: dict[Key, _Run] = {(intent.topic, intent.partition): _Run() for intent in intents}
    for record in _records(log, start, end):
        run = runs.get((record.topic, record.queue_id))
        if run is not None:
            run.add(record)
    found: list[Batch] = []
    for intent in intents:
        batch = _find(intent, runs[(intent.topic, intent.partition)], log, claimed)
        if batch is not None:
            claimed.add((batch.topic, batch.partition, batch.base_offset))
            found.append(batch)
    return found


def _find(
    intent: Intent, run: _Run, log: CommitLog, claimed: set[tuple[str, int, int]]
) -> Batch | None:
    count = intent.record_count
    for i, phys in enumerate(run.phys):
        if phys < intent.log_start or not run.is_one_put(i, count):
            continue
        base = run.queue_offsets[i]
        if (intent.topic, intent.partition, base) in claimed:
            continue
        last = i + count - 1
        if not _matches(log, phys, run.sizes[i], intent.first_crc, intent.born_host):
            continue
        if not _matches(log, run.phys[last], run.sizes[last], intent.last_crc, intent.born_host):
            continue
        return Batch(
            intent_id=0,
            producer_id=intent.producer_id,
            epoch=intent.epoch,
            partition=intent.partition,
            first_sequence=intent.first_sequence,
            record_count=count,
            base_offset=base,
            first_phys=phys,
            log_end=run.phys[last] + run.sizes[last],
            topic=intent.topic,
        )
    return None


def _matches(log: CommitLog, phys: int, size: int, body_crc: int, born_host: bytes) -> bool:
    message = log.message_at(phys, size)
    return (
        message is not None
        and message.body_crc == body_crc
        and encode_host(message.born_host) == born_host
    )
