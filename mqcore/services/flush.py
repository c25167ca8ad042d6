"""Flush: the asynchronous flush of the CommitLog and the ConsumeQueues, and the checkpoint
(spec 5.1, 6.2, 6.3).

Under sync flush the producer's own thread flushes the CommitLog (group commit, in
``CommitLog.flush_until``); this service then only flushes ConsumeQueues and the checkpoint.

Each call is one pass of RocketMQ's ``FlushRealTimeService`` and ``FlushConsumeQueueService``:
flush when at least ``least_pages`` dirty pages wait, or everything ("thorough") when the
thorough interval has passed since the last thorough flush. When each last ran is kept in
:class:`FlushState` on the store, not in the runner.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqcore.clock import Clock
from mqcore.services.result import StepResult
from mqcore.store.store import MessageStore


@dataclass
class FlushState:
    """When the last thorough flushes ran (monotonic seconds; None = never)."""

    commitlog_thorough_at: float | None = None
    consume_queue_thorough_at: float | None = None


def _due(last: float | None, now: float, interval_ms: int) -> bool:
    return last is None or (now - last) * 1000 >= interval_ms


def step(store: MessageStore, state: FlushState, clock: Clock) -> StepResult:
    """One flush pass over the CommitLog, the ConsumeQueues and the checkpoint."""
    cfg = store.config
    now = clock.monotonic()
    commitlog_flushed = False
    if cfg.flush == "async":
        thorough = _due(state.commitlog_thorough_at, now, cfg.flush_commitlog_thorough_interval_ms)
        commitlog_flushed = store.commit_log.flush(
            0 if thorough else cfg.flush_commitlog_least_pages
        )
        if thorough:
            state.commitlog_thorough_at = now
            while store.commit_log.flush(0):
                commitlog_flushed = True
    cq_thorough = _due(
        state.consume_queue_thorough_at, now, cfg.flush_consume_queue_thorough_interval_ms
    )
    logics_snapshot = store.checkpoint.logics_msg_timestamp
    queues_flushed = store.queues.flush_all(
        0 if cq_thorough else cfg.flush_consume_queue_least_pages
    )
    if cq_thorough:
        state.consume_queue_thorough_at = now
    physic = store.commit_log.segments.store_timestamp_ms
    if physic:
        store.checkpoint.physic_msg_timestamp = physic
    store.checkpoint.logics_msg_timestamp = logics_snapshot
    store.checkpoint.flush()
    return StepResult(
        "flush",
        progressed=False,
        detail={
            "commitlog_flushed": commitlog_flushed,
            "consume_queues_flushed": queues_flushed,
            "flushed_offset": store.commit_log.flushed_offset,
            "max_offset": store.commit_log.max_offset,
        },
    )
