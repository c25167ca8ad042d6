"""Idempotent producers: producer ids, and per-partition sequence state to drop retried
batches (kafka-protocol.md sections 2.5 and 2.13), kept across restarts.

An idempotent producer (kafka-python's default; aiokafka and librdkafka when enabled) asks
InitProducerId for an id, then stamps every batch with ``(producer_id, producer_epoch,
base_sequence)``; the sequence starts at 0 per partition and grows by the record count. On
a retry (the reply was lost, or the broker restarted) it sends the same batch again. What
Kafka does, and this module does per ``(producer_id, topic, partition)``:

==========================================  ===========================================
batch                                       answer
==========================================  ===========================================
epoch older than the known one              INVALID_PRODUCER_EPOCH (47)
same sequences as one of the last 5 batches NONE with that batch's original base offset,
                                            nothing stored again
base_sequence == last sequence + 1          store it (sequences wrap at 2**31 - 1 → 0)
anything else                               OUT_OF_ORDER_SEQUENCE_NUMBER (45)
no state yet, or a newer epoch              store it
==========================================  ===========================================

**Persistence.** Kafka keeps the producer id in every batch of its log and rebuilds this
state from a snapshot plus the log after it. Cairn's CommitLog records carry no producer
id, so the state is kept beside the data, in a journal of its own
(``<store>/kafka/producers/``, formats in ``producer_journal.py``, files in
``producer_files.py``), written around every idempotent batch, one ``write`` per entry:

1. INTENT (producer, sequences, the CommitLog end before the append, the body CRCs of the
   first and last record, the connection's address), *before* the append; under
   ``CAIRN_FLUSH=sync`` made durable first (``fdatasync``, group commit);
2. the append (one put);
3. BATCH (base offset, where the records lie), before the produce is acknowledged; or
   ABANDONED when the append failed.

At start (:meth:`ProducerStates.open`) the newest snapshot and the journals after it are
settled against the *recovered* CommitLog (``producer_recovery.py``): a batch whose
records survived is kept, one whose records were lost in the crash is dropped (its retry
is stored again, never answered as a duplicate of data that is gone), and an INTENT
without its BATCH (a crash between the append and the ack) is looked for in the CommitLog
(its retry is then answered with the offset it was stored at). Then a new generation
begins: a compact snapshot of the settled state, and an empty journal. A journal that
outgrows ``compact_bytes`` (and twice the snapshot) is compacted the same way in the
background. So the files stay within a few times the size of the state, and the state
within the 100,000 most recently used partitions of producers (LRU).

Durability follows the store's flush mode. A kill -9 loses nothing written either way
(the page cache keeps it). Under sync flush the INTENT is on disk before the records are
written (so after a power failure a batch on disk always has its intent or its BATCH
entry) and the ack waits for the CommitLog's own sync: one ``fdatasync`` more per batch
(measured ~0.3-0.6 ms on this project's test disk). Under async flush the journal is
synced every ``sync_interval_s`` (the CommitLog's flush period), as durable as the data:
a power failure may cost the journal's last period while the CommitLog's survived (a
retry of such a batch is then stored again), the same period whose acknowledged data
async flush may lose. Cost on the produce path: two ``write`` calls, two CRCs of one body
each and a lock per batch, whatever its record count (~11 us a batch measured).
A full disk refuses idempotent batches (KAFKA_STORAGE_ERROR, nothing stored) while their
INTENT cannot be written, and a store health condition says so while the journal cannot
even be set up (tried again every 5 s).

Producer ids are ``max(last + 1, now_ms << 16)``, and every id issued is journalled (and
synced under sync flush) before InitProducerId answers: never reused after a restart,
even if the clock goes back.

A store opened read-only keeps the state in memory only.

Thread-safety: every method is thread-safe. A caller that checks, stores and records one
batch holds :meth:`lock` for that producer across the steps.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.format.body_crc import body_crc
from mqcore.format.msgid import HostAddress, encode_host
from mqcore.store.put.pending import DEFAULT_BORN_HOST

from .errors import ErrorCode
from .producer_files import JournalWriter, load_files, remove_older, write_snapshot
from .producer_journal import Abandoned, Batch, Entry, IdsIssued, Intent, encode_entry
from .producer_recovery import settle

if TYPE_CHECKING:
    from mqcore.store.commit_log import CommitLog
    from mqcore.store.health import StoreHealth
    from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

MAX_REMEMBERED_BATCHES = 5  # Kafka keeps the last 5 batches per producer and partition
SEQUENCE_MODULUS = 1 << 31
_LOCK_STRIPES = 64
#: The journal is compacted once it holds this many bytes and twice the snapshot's.
DEFAULT_COMPACT_BYTES = 16 * 1024 * 1024
#: After the journal could not be set up (disk full), try again this often.
_REOPEN_INTERVAL_S = 5.0
HEALTH_KIND = "kafka_producer_state"
UNWRITABLE_CONDITION = "kafka_producer_journal_unwritable"

Key = tuple[int, str, int]  # (producer_id, topic, partition)

#: Stores (open in this process) whose producer state was settled against their recovered
#: CommitLog: every entry written since describes data this process appended, still there.
_SETTLED: weakref.WeakSet[MessageStore] = weakref.WeakSet()


@dataclass(slots=True)
class PartitionSequences:
    """What one producer last wrote to one partition."""

    epoch: int
    last_sequence: int
    batches: deque[Batch] = field(default_factory=lambda: deque(maxlen=MAX_REMEMBERED_BATCHES))


@dataclass(frozen=True, slots=True)
class Pending:
    """A batch between :meth:`ProducerStates.begin` and ``record`` / ``abandon``."""

    key: Key
    epoch: int
    base_sequence: int
    count: int
    intent: Intent | None = None  # None: nothing journalled (memory only)


@dataclass(frozen=True, slots=True)
class Persistence:
    """Where and how the state is kept (see the module docstring)."""

    directory: Path
    log: CommitLog
    sync: bool  # CAIRN_FLUSH=sync: intents and ids durable before going on
    sync_interval_s: float
    compact_bytes: int = DEFAULT_COMPACT_BYTES


class ProducerStates:
    """Producer ids and sequence state (see the module docstring)."""

    def __init__(
        self,
        clock: Clock,
        max_entries: int = 100_000,
        persistence: Persistence | None = None,
    ) -> None:
        self.clock = clock
        self.max_entries = max_entries
        self.persistence = persistence
        self._lock = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._last_id = 0
        self._states: OrderedDict[Key, PartitionSequences] = OrderedDict()
        self._open_intents: dict[int, Intent] = {}
        self._next_intent_id = 1
        self._journal: JournalWriter | None = None
        self._generation = -1
        self._snapshot_bytes = 0
        self._compacting = False
        self._unwritable: str | None = None  # why the journal could not be set up
        self._retry_at = 0.0
        #: The background compaction under way or last run (``close`` waits for it).
        self.compactor: threading.Thread | None = None
        #: The store's health: damaged files are reported there, and an unwritable
        #: journal is a condition while it lasts.
        self.health: StoreHealth | None = None

    # -- start -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        store: MessageStore,
        clock: Clock,
        *,
        max_entries: int = 100_000,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
    ) -> ProducerStates:
        """The state of ``store``'s producers, settled against its recovered CommitLog, with
        a new generation begun (memory only for a read-only store).

        Raises:
            OSError: the directory cannot be read.
        """
        if store.readonly:
            return cls(clock, max_entries)
        config = store.config
        persistence = Persistence(
            store.root / "kafka" / "producers",
            store.commit_log,
            config.flush == "sync",
            config.flush_interval_commitlog_ms / 1000,
            compact_bytes,
        )
        states = cls(clock, max_entries, persistence)
        states.health = store.health
        loaded = load_files(persistence.directory)
        end = store.commit_log.max_offset
        if store.recovery is not None and store not in _SETTLED:
            end = store.recovery.end_offset  # what survived; since then it was written here
        settled = settle(loaded.entries, store.commit_log, end)
        for entry in settled.entries:
            states._replay(entry)
        states._next_intent_id = settled.last_intent_id + 1
        states._generation = loaded.generation
        log.info(
            "Kafka producer state from %s: %d partitions of producers; %s",
            persistence.directory,
            len(states._states),
            settled.summary(),
        )
        if loaded.torn_bytes:
            log.info("Kafka producer journal: %d bytes of torn tail ignored", loaded.torn_bytes)
        for problem in loaded.problems:
            states._report_damage(problem)
        states._begin_generation()
        _SETTLED.add(store)
        return states

    def _report_damage(self, problem: str) -> None:
        summary = (
            "Kafka producer state was damaged: retries of batches sent before the restart "
            "may be stored twice"
        )
        log.warning("%s (%s)", summary, problem)
        if self.health is not None:
            self.health.report(
                HEALTH_KIND, f"{HEALTH_KIND}:{problem}", summary, {"damage": problem}
            )

    def _begin_generation(self) -> None:
        """Switch to a new journal and write the snapshot of the state there; on failure
        (disk full) idempotent produces are refused until a later try succeeds."""
        persistence = self.persistence
        assert persistence is not None
        generation = self._generation = self._generation + 1  # never reused, even on failure
        try:
            journal = JournalWriter(persistence.directory, generation, persistence.sync_interval_s)
            try:
                path = write_snapshot(persistence.directory, generation, self._snapshot_entries())
            except BaseException:
                journal.close()
                raise
        except OSError as exc:
            self._unwritable = f"cannot write {persistence.directory}: {exc}"
            self._retry_at = self.clock.monotonic() + _REOPEN_INTERVAL_S
            log.error("Kafka idempotent produces refused: %s", self._unwritable)
            if self.health is not None:
                self.health.set_condition(
                    HEALTH_KIND,
                    UNWRITABLE_CONDITION,
                    "Kafka idempotent produces refused: the producer journal cannot be written",
                    {"reason": self._unwritable},
                )
            return
        if self._unwritable is not None:
            log.warning("Kafka producer journal writable again: idempotent produces accepted")
            if self.health is not None:
                self.health.clear_condition(UNWRITABLE_CONDITION)
        self._journal, self._unwritable = journal, None
        self._snapshot_bytes = path.stat().st_size
        remove_older(persistence.directory, generation)

    def _journal_or_raise(self) -> JournalWriter | None:
        """The journal (None: memory only). Raises StoreError while it cannot be set up."""
        if self.persistence is None:
            return None
        journal = self._journal
        if journal is not None:
            return journal
        if self.clock.monotonic() >= self._retry_at:
            with self._lock:
                if self._journal is None:
                    self._begin_generation()
            if self._journal is not None:
                return self._journal
        raise StoreError(f"the Kafka producer journal is not writable: {self._unwritable}")

    # -- ids -------------------------------------------------------------------------------

    def new_producer_id(self) -> int:
        """A fresh producer id (positive int64), journalled before it is returned."""
        with self._lock:
            self._last_id = max(self._last_id + 1, self.clock.now_ms() << 16)
            producer_id = self._last_id
        try:
            journal = self._journal_or_raise()
            if journal is not None:
                with self._lock:
                    position = journal.append(encode_entry(IdsIssued(producer_id)))
                if self.persistence is not None and self.persistence.sync:
                    journal.sync_until(position)
        except StoreError:  # ids are above now_ms << 16 anyway: unique unless the clock goes back
            log.warning("producer id %d issued without being journalled", producer_id)
        return producer_id

    # -- batches ---------------------------------------------------------------------------

    def lock(self, producer_id: int) -> threading.Lock:
        """The lock serialising check → store → record for one producer."""
        return self._stripes[producer_id % _LOCK_STRIPES]

    def check(
        self, key: Key, epoch: int, base_sequence: int, count: int
    ) -> tuple[ErrorCode, int | None]:
        """Judge a batch before storing it.

        Returns:
            ``(NONE, None)``: store it; ``(NONE, base_offset)``: a duplicate already
            stored at ``base_offset``; ``(error, None)``: refuse it.
        """
        with self._lock:
            state = self._states.get(key)
        if state is None or epoch > state.epoch:
            return ErrorCode.NONE, None
        if epoch < state.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        for batch in state.batches:  # same first sequence and count: same last sequence
            if batch.first_sequence == base_sequence and batch.record_count == count:
                return ErrorCode.NONE, batch.base_offset
        if base_sequence != (state.last_sequence + 1) % SEQUENCE_MODULUS:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def begin(
        self,
        key: Key,
        epoch: int,
        base_sequence: int,
        count: int,
        bodies: tuple[bytes, bytes],
        born_host: HostAddress | None,
    ) -> Pending:
        """Journal the INTENT of a batch about to be appended (durable first under sync
        flush). ``bodies``: the first and last record's bodies as they will be stored;
        ``born_host``: the BORNHOST they will carry.

        Raises:
            StoreError: the journal cannot be written (store nothing then).
        """
        journal = self._journal_or_raise()
        if journal is None:
            return Pending(key, epoch, base_sequence, count)
        persistence = self.persistence
        assert persistence is not None
        host = encode_host(born_host or DEFAULT_BORN_HOST)
        producer_id, topic, partition = key
        with self._lock:
            intent = Intent(
                intent_id=self._next_intent_id,
                producer_id=producer_id,
                epoch=epoch,
                partition=partition,
                first_sequence=base_sequence,
                record_count=count,
                log_start=persistence.log.max_offset,
                first_crc=body_crc(bodies[0]),
                last_crc=body_crc(bodies[1]),
                topic=topic,
                born_host=host,
            )
            position = journal.append(encode_entry(intent))
            self._next_intent_id += 1
            self._open_intents[intent.intent_id] = intent
        if persistence.sync:
            journal.sync_until(position)
        return Pending(key, epoch, base_sequence, count, intent)

    def abandon(self, pending: Pending) -> None:
        """The append failed: nothing was stored."""
        intent, journal = pending.intent, self._journal
        if intent is None or journal is None:
            return
        with self._lock:
            self._open_intents.pop(intent.intent_id, None)
            try:
                journal.append(encode_entry(Abandoned(intent.intent_id)))
            except StoreError:  # the start settles the open intent: not in the CommitLog
                log.warning("Kafka producer journal: abandoned intent not journalled")

    def record(self, pending: Pending, base_offset: int, first_phys: int = -1) -> None:
        """Remember a stored batch (journalled when ``begin`` journalled its intent);
        ``first_phys``: the CommitLog position of its first record."""
        producer_id, topic, partition = pending.key
        log_end = -1
        if self.persistence is not None:
            log_end = self.persistence.log.max_offset
        batch = Batch(
            intent_id=0 if pending.intent is None else pending.intent.intent_id,
            producer_id=producer_id,
            epoch=pending.epoch,
            partition=partition,
            first_sequence=pending.base_sequence,
            record_count=pending.count,
            base_offset=base_offset,
            first_phys=first_phys,
            log_end=log_end,
            topic=topic,
        )
        compact = False
        with self._lock:
            journal = self._journal
            if pending.intent is not None and journal is not None:
                try:
                    journal.append(encode_entry(batch))
                    self._open_intents.pop(batch.intent_id, None)
                except StoreError:  # the open intent finds the batch at the next start
                    log.warning("Kafka producer journal: BATCH entry not journalled")
                compact = self._compaction_due_locked(journal)
            self._replay(batch)
        if compact:
            self.compactor = threading.Thread(target=self._compact, name="kafka-producer-compact")
            self.compactor.start()

    def _replay(self, entry: IdsIssued | Batch) -> None:
        """Apply an entry to the in-memory state (caller holds the lock, or is alone)."""
        if isinstance(entry, IdsIssued):
            self._last_id = max(self._last_id, entry.last_id)
            return
        key = (entry.producer_id, entry.topic, entry.partition)
        last = (entry.first_sequence + entry.record_count - 1) % SEQUENCE_MODULUS
        state = self._states.get(key)
        if state is None or state.epoch != entry.epoch:
            state = self._states[key] = PartitionSequences(entry.epoch, last)
        state.last_sequence = last
        state.batches.append(entry._replace(intent_id=0) if entry.intent_id else entry)
        self._states.move_to_end(key)
        while len(self._states) > self.max_entries:
            self._states.popitem(last=False)
        self._last_id = max(self._last_id, entry.producer_id)

    # -- compaction ------------------------------------------------------------------------

    def _compaction_due_locked(self, journal: JournalWriter) -> bool:
        persistence = self.persistence
        assert persistence is not None
        limit = max(persistence.compact_bytes, 2 * self._snapshot_bytes)
        if self._compacting or journal.written < limit:
            return False
        self._compacting = True
        return True

    def _snapshot_entries(self) -> list[Entry]:
        """The state as entries, oldest partition first (replaying them rebuilds the same
        LRU order), then the open intents."""
        entries: list[Entry] = [IdsIssued(self._last_id)]
        for state in self._states.values():
            entries += state.batches
        entries += self._open_intents.values()
        return entries

    def _compact(self) -> None:
        """A new generation: switch journals and take the snapshot under the lock (a
        copy in memory), write it outside."""
        persistence, journal = self.persistence, self._journal
        assert persistence is not None and journal is not None
        try:
            with self._lock:
                generation = self._generation + 1
                entries = self._snapshot_entries()
                journal.switch(generation)
                self._generation = generation
            path = write_snapshot(persistence.directory, generation, entries)
            self._snapshot_bytes = path.stat().st_size
            remove_older(persistence.directory, generation)
            log.info(
                "Kafka producer journal compacted: generation %d, %d entries, %d bytes",
                generation,
                len(entries),
                self._snapshot_bytes,
            )
        except (OSError, StoreError):  # tried again once the journal has grown again
            log.exception("Kafka producer journal: compaction failed")
        finally:
            with self._lock:
                self._compacting = False

    def close(self) -> None:
        """Finish a compaction under way, sync and close the journal. The state stays
        usable, in memory only."""
        compactor = self.compactor
        if compactor is not None:
            compactor.join()
        with self._lock:
            journal, self._journal = self._journal, None
            self.persistence = None
        if journal is not None:
            journal.close()
