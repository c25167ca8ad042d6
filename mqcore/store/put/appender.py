"""Appender: the put path after the facade's checks: encode, append, flush, publish, wake.

Two encoders, chosen per batch by :meth:`Appender.put` in one place: the plain-batch path
(``plain_batch.py``: one topic, plain properties, results as columns) when the batch and
topic allow it, else the general path (``pending.pending_record``: a record and a
``PutResult`` per message, the reference). Both append under the CommitLog's put lock, so
a batch is contiguous; under sync flush they return once the batch is on disk (the general
path skips the wait when every message says ``WAIT=false``).

After every append the CommitLog end is published for the other processes
(``sharing/publisher.py``), the pre-fault thread is woken when the end nears its window
(``files/prefault.py``), and :attr:`Appender.appended` is set to wake the inline reput loop.
Thread-safe: any thread may put; the CommitLog serialises the appends. Crash behaviour:
nothing here is durable beyond what the CommitLog wrote.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from mqcore.clock import Clock
from mqcore.errors import ValidationError
from mqcore.format.msgid import UniqKeyGenerator, create_offset_msg_id
from mqcore.message import Message
from mqcore.store.commit_log import CommitLog, PendingRecord
from mqcore.store.config import StoreConfig
from mqcore.store.files.prefault import Prefaulter, start_prefaulter
from mqcore.store.put.pending import DEFAULT_BORN_HOST, pending_record
from mqcore.store.put.plain_batch import PlainColumns
from mqcore.store.results import BatchPutResults, PutResult, PutStatus, new_put_result
from mqcore.store.sharing.publisher import Publisher
from mqcore.validation import validate_topic

#: Topic names that passed ``validate_topic`` are remembered (up to this many) to skip the regex.
_VALID_TOPICS_MAX = 10_000


class Appender:
    """Appends batches of messages to ``commit_log``.

    Args:
        commit_log: the log appended to.
        config: flush mode, message size limit, store host.
        clock: the store time of each record.
        uniq: the generator of the UNIQ_KEYs the store gives messages without one.
        publisher: publishes each new CommitLog end for the other processes.
    """

    def __init__(
        self,
        commit_log: CommitLog,
        config: StoreConfig,
        clock: Clock,
        uniq: UniqKeyGenerator,
        publisher: Publisher,
    ) -> None:
        self.commit_log = commit_log
        self.config = config
        self.clock = clock
        self.uniq = uniq
        self.publisher = publisher
        self._sync = config.flush == "sync"
        #: Set after every append; the inline reput loop waits on it instead of polling.
        self.appended = threading.Event()
        self._valid_topics: set[str] = set()
        #: The writer's pre-fault thread (``prefault.py``), while started.
        self._prefault: Prefaulter | None = None

    def start_prefault(self) -> None:
        """Start the pre-fault thread (the CommitLog writer, after recovery, before puts)."""
        self._prefault = start_prefaulter(self.commit_log.segments, self.config)

    @property
    def prefaulter(self) -> Prefaulter | None:
        """The pre-fault thread while started (None when disabled, read-only or stopped)."""
        return self._prefault

    def stop_prefault(self) -> None:
        """Stop it (before the segments are closed)."""
        prefault, self._prefault = self._prefault, None
        if prefault is not None:
            prefault.stop()

    def put(self, msgs: Sequence[Message], queue_id: int) -> BatchPutResults | list[PutResult]:
        """Append ``msgs`` (not empty) by the plain-batch path if it takes them, else by the
        general one.

        Raises:
            MessageIllegalError / ValidationError: a message breaks a rule (field, rule).
            DiskFullError: no space for the batch (raised before a byte was written).
        """
        plain = self.put_plain(msgs, queue_id)
        return plain if plain is not None else self.put_general(msgs, queue_id)

    def put_general(self, msgs: Sequence[Message], queue_id: int) -> list[PutResult]:
        """The general put path: a record and a PutResult object per message."""
        pending = [self.prepare(m, queue_id) for m in msgs]
        appended = self.commit_log.append([p for p, _, _ in pending])
        self._appended_to(appended[-1].phys_offset + appended[-1].size)
        status = PutStatus.PUT_OK
        if self._sync and any(wait for _, _, wait in pending):
            last = appended[-1]
            if not self.commit_log.flush_until(last.phys_offset + last.size):
                status = PutStatus.FLUSH_DISK_TIMEOUT
            self.publisher.append()
            self.appended.set()  # reput may now dispatch up to the new flushed offset
        host = self.config.store_host
        results: list[PutResult] = []
        for (p, uniq, _), a in zip(pending, appended, strict=True):
            # PutResult(...) field by field (``results.new_put_result`` says why).
            r = new_put_result()
            r.status = status
            r.topic = p.topic
            r.queue_id = p.queue_id
            r.msg_id = uniq
            r.offset_msg_id = create_offset_msg_id(host, a.phys_offset)
            r.phys_offset = a.phys_offset
            r.queue_offset = a.queue_offset
            r.store_timestamp = a.store_timestamp
            r.wrote_bytes = a.size
            r.__class__ = PutResult
            results.append(r)
        return results

    def put_plain(
        self, msgs: Sequence[Message] | PlainColumns, queue_id: int
    ) -> BatchPutResults | None:
        """The plain-batch path (``plain_batch.py``), or None to take the general one."""
        topic = msgs.topic if isinstance(msgs, PlainColumns) else msgs[0].topic
        if topic not in self._valid_topics:
            try:
                self._remember_valid(topic)
            except ValidationError:
                return None  # the general path raises it, in its order
        head, first = self.uniq.reserve(len(msgs))
        results = self.commit_log.append_plain(
            msgs, queue_id, head, first, self.clock.now_ms(), DEFAULT_BORN_HOST
        )
        if results is None:
            return None
        end = results.end
        self._appended_to(end)
        if self._sync:  # plain messages carry no WAIT=false
            if not self.commit_log.flush_until(end):
                results = results.with_status(PutStatus.FLUSH_DISK_TIMEOUT)
            self.publisher.append()
            self.appended.set()  # reput may now dispatch up to the new flushed offset
        return results

    def _appended_to(self, end: int) -> None:
        """After an append that ended at CommitLog offset ``end``: publish it, keep the
        pre-fault window ahead of it and wake reput."""
        self.publisher.append(end)
        prefault = self._prefault
        if prefault is not None and end > prefault.trigger:
            prefault.wake()
        if not self.appended.is_set():  # set() takes the Event's lock even when it is set
            self.appended.set()

    def _remember_valid(self, topic: str) -> None:
        """``validate_topic``, remembered: a store sees a few topics, checked once each."""
        validate_topic(topic)
        if len(self._valid_topics) >= _VALID_TOPICS_MAX:
            self._valid_topics.clear()
        self._valid_topics.add(topic)

    def prepare(self, msg: Message, queue_id: int) -> tuple[PendingRecord, str, bool]:
        """The general path's record of ``msg`` (``pending.pending_record``), its topic
        checked first."""
        if msg.topic not in self._valid_topics:
            self._remember_valid(msg.topic)
        return pending_record(
            msg,
            queue_id,
            uniq=self.uniq,
            clock=self.clock,
            max_message_size=self.config.max_message_size,
            store_host=self.config.store_host,
        )
