"""ReputHolder: the one services process that writes the derived files (Celery mode).

A services-role store becomes the reput holder when its runner takes the reput service lock
(``mqcore.services.reput``): :meth:`ReputHolder.attach` recovers the ConsumeQueues and
index files against the CommitLog end the writer published, :meth:`ReputHolder.before_reput`
keeps up with writer restarts and cleanups before each pass, and :meth:`ReputHolder.detach`
flushes before the lock is let go.

Restarts: every open of the writer bumps GENERATION. A holder that sees a new generation
(the broker restarted, and its recovery may have cut a torn tail) attaches again: it
recovers the derived files against the new end, zeroes what it cut, and bumps ATTACH_COUNT;
every follower reloads its views when ATTACH_COUNT changes.

Invariants: only the reput holder writes ConsumeQueue units and index entries, and it
publishes REPUT_OFFSET only after the units below it are written. Thread-safety: the caller
holds the store's reput and follow locks. Crash behaviour: a holder killed mid-batch leaves
index entries past a header's count; the next attach sees its pid still published and
rebuilds the newest index files (RocketMQ's abnormal start).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.recovery.recovery import RecoveryReport, rebuild_index_tail
from mqcore.store.sharing.derived_views import DerivedViews
from mqcore.store.sharing.follower import Follower
from mqcore.store.sharing.progress import Progress, Slot
from mqcore.store.sharing.publisher import Publisher

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


def _no_check(_cut: int, _reput_offset: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class StartChecks:
    """The store's start checks an attach runs (``recovery/derived_start.py``).

    Attributes:
        before_load: complete a rebuild's interrupted swap, before the files are loaded.
        settle: ``settle(cut, reput_offset)``: find damaged queues and index after the
            derived files were recovered to ``cut`` and dispatch restarts at
            ``reput_offset``; they are then rebuilt by the rebuild service.
    """

    before_load: Callable[[], None] = _nothing
    settle: Callable[[int, int], None] = _no_check


def _zero_cut_units(ends_before: dict[ConsumeQueue, int]) -> None:
    """Zero ConsumeQueue units a truncation cut, so no follower can read them back."""
    for queue, old_end in ends_before.items():
        last = queue.segments.last()
        if last is None:
            continue
        start = last.wrote_position
        stop = min(max(old_end - last.base_offset, 0), last.file_size)
        if stop > start:
            last.write_at(start, bytes(stop - start))


class ReputHolder:
    """A services process's turn as the writer of the derived files.

    Args:
        progress: the shared slots.
        commit_log: the CommitLog, mapped read-only and followed.
        views: the derived views, replaced by writable ones on attach.
        follower: this process's follower (its ``seen`` counters, the CommitLog end).
        publisher: publishes REPUT_OFFSET and the checkpoint times.
        index_enabled: whether the message index is kept (``message_index_enable``).
        checks: the store's start checks run by an attach.
        root: the store directory (for the log).
    """

    def __init__(
        self,
        progress: Progress,
        commit_log: CommitLog,
        views: DerivedViews,
        follower: Follower,
        publisher: Publisher,
        *,
        index_enabled: bool,
        checks: StartChecks,
        root: Path,
    ) -> None:
        self.progress = progress
        self.commit_log = commit_log
        self.views = views
        self.follower = follower
        self.publisher = publisher
        self._index_enabled = index_enabled
        self._checks = checks
        self._root = root
        #: Whether this process holds reput and writes the derived files.
        self.attached = False
        #: The writer generation the derived files were last recovered against.
        self.attached_generation = -1

    def attach(self) -> int | None:
        """Become the one process that writes derived files (the caller holds the reput
        lock). Returns the CommitLog offset dispatch restarts at, or None when this holder
        was the last one and its dispatch position still holds.

        Recovery of the derived files against the CommitLog end the writer published: reload
        them for writing; after a writer restart that found a crash, drop index files newer
        than the checkpoint (RocketMQ's abnormal start); recover each queue (spec 3.2); cut
        and zero units and index files beyond the end (5.8); restart dispatch where the
        ConsumeQueues (or a dropped index file) stop. Re-dispatching is idempotent, so
        starting early is safe.
        """
        progress = self.progress
        seen = self.follower.seen
        generation = progress.get(Slot.GENERATION)
        if (
            self.attached_generation == generation
            and progress.get(Slot.REPUT_GENERATION) == generation
            and progress.get(Slot.ATTACH_COUNT) == seen.get(Slot.ATTACH_COUNT)
        ):
            # This holder was the last and nobody attached since: its view of the derived
            # files is still the truth (a worker's lease ending and the next starting).
            self.attached = True
            progress.set(Slot.REPUT_HOLDER_PID, os.getpid())
            return None
        first_in_generation = progress.get(Slot.REPUT_GENERATION) != generation
        # The index is suspect after a crash of the writer (pages may be lost) and after the
        # previous holder died without detaching (its pid is still published): an index
        # file's header is written once per batch of keys, so a killed holder leaves entries
        # and slots past the header's count, and new puts would cut those hash chains. As
        # RocketMQ does on an abnormal start, index files newer than the last filled are
        # rebuilt.
        holder_died = progress.get(Slot.REPUT_HOLDER_PID) != 0
        crashed = (first_in_generation and not progress.get(Slot.LAST_EXIT_OK)) or holder_died
        commit_log = self.commit_log
        commit_log.segments.sync_files(front=True, end=True)
        end = self.follower.follow_commit_log()
        checkpoint = self.views.load_checkpoint()
        filled = max(checkpoint.index_msg_timestamp, progress.get(Slot.INDEX_TIMESTAMP))
        checkpoint.index_msg_timestamp = filled
        self._checks.before_load()  # a swap of rebuilt files a crash interrupted
        queues = self.views.new_queues(readonly=False)
        queues.load()
        index = self.views.new_index(readonly=False)
        dropped = index.load(not crashed, filled)
        self.views.replace(queues, index, close_old=True)
        queues.recover_all()
        # After a writer restart, whatever points at or past the end its recovery found may
        # be a cut record's (new records reuse those offsets): cut there. Else the live end.
        cut = min(end, progress.get(Slot.RECOVERED_END)) if first_in_generation else end
        ends_before = {
            q: q.segments.max_offset for t in queues.topics() for q in queues.queues(t).values()
        }
        queues.truncate_dirty(cut)
        _zero_cut_units({q: e for q, e in ends_before.items() if q.segments.max_offset < e})
        report = RecoveryReport(last_exit_ok=not crashed, index_files_dropped=list(dropped))
        rebuild_from = rebuild_index_tail(commit_log, index, cut, report)
        dispatched = queues.max_phys_offset()
        start = dispatched if dispatched >= 0 else 0
        if rebuild_from is not None:
            start = min(start, rebuild_from)
        files = index.files
        if dropped:
            start = min(start, files[-1].end_phys_offset if files else 0)
        elif files and self._index_enabled:
            # Dispatch writes a batch's units before its index keys: a runner killed between
            # the two left records that are in a queue but not in the index. Their keys are
            # re-put from the last record indexed (the index skips what it holds).
            start = min(start, files[-1].end_phys_offset)
        reput_offset = max(start, commit_log.min_offset)
        for topic in queues.topics():
            for queue in queues.queues(topic).values():
                queue.correct_min_offset(commit_log.min_offset)
        # The start check: damaged queues and index get rebuilt by the rebuild service; the
        # broker refuses puts to those queues once it sees the job.
        self._checks.settle(cut, reput_offset)
        visible = max(reput_offset, dispatched)
        if first_in_generation:
            progress.set(Slot.REPUT_OFFSET, visible)
        else:
            progress.raise_to(Slot.REPUT_OFFSET, visible)
        progress.set(Slot.REPUT_GENERATION, generation)
        self.attached_generation = generation
        self.attached = True
        progress.set(Slot.REPUT_HOLDER_PID, os.getpid())
        progress.increment(Slot.ATTACH_COUNT)
        self.follower.note(Slot.CLEANUP_GENERATION, Slot.ATTACH_COUNT, Slot.INDEX_GENERATION)
        log.info(
            "reput attached to %s (generation %d): dispatch restarts at %d, log ends at %d%s",
            self._root, generation, reput_offset, end,
            f", index files dropped {report.index_files_dropped}" if report.index_files_dropped
            else "",
        )  # fmt: skip
        return reput_offset

    def before_reput(self, reput_offset: int) -> tuple[int, int]:
        """Each reput pass: re-attach after a writer restart, follow cleanups and the
        CommitLog.

        Returns:
            The offset dispatch may go up to, and the dispatch position (moved when this
            pass attached again).

        Raises:
            RuntimeError: not attached (the runner must hold the reput lock and attach).
        """
        if not self.attached:
            raise RuntimeError(
                "a services-role store dispatches only after attach() (hold the reput lock)"
            )
        progress = self.progress
        if progress.get(Slot.GENERATION) != self.attached_generation:
            reput_offset = self._attach_again(reput_offset)
        if self.follower.take_cleanup():
            self.follower.follow_cleanup(holder=True)
        while True:
            self.follower.follow_commit_log()
            confirm = self.follower.confirm_offset()
            # The writer publishes its offsets before its new generation: an unchanged
            # generation read after the offsets proves they belong to the one attached to.
            if progress.get(Slot.GENERATION) == self.attached_generation:
                return confirm, reput_offset
            reput_offset = self._attach_again(reput_offset)

    def _attach_again(self, reput_offset: int) -> int:
        start = self.attach()
        return reput_offset if start is None else start

    def detach(self, reput_offset: int) -> None:
        """Stop writing derived files (the reput lock is about to be released): flush them
        and publish how far they go."""
        if not self.attached:
            return
        while self.views.queues.flush_all(0):
            pass
        self.views.index.flush()
        self.publisher.reput(reput_offset, self.views.checkpoint)
        if self.progress.get(Slot.REPUT_HOLDER_PID) == os.getpid():
            self.progress.set(Slot.REPUT_HOLDER_PID, 0)
        self.attached = False
