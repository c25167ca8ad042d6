"""Reput: dispatch new CommitLog records to the ConsumeQueues and the IndexFile (spec 6.1).

The step is idempotent: ConsumeQueue and index writes skip what they already hold, so a
runner that dies between the CommitLog and the ConsumeQueue loses and duplicates nothing.
"""

from __future__ import annotations

from mqcore.services.result import StepResult
from mqcore.store.store import MessageStore

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


def step(store: MessageStore, *, max_bytes: int = DEFAULT_MAX_BYTES) -> StepResult:
    """Dispatch at most ``max_bytes`` of new CommitLog. Thread-safe (one reput at a time)."""
    dispatched = store.reput_once(max_bytes)
    return StepResult(
        "reput",
        progressed=dispatched > 0,
        detail={
            "dispatched": dispatched,
            "reput_offset": store.reput_offset,
            "behind_bytes": store.dispatch_behind_bytes,
        },
    )
