"""Follow: the broker's side of reput when Celery workers run it (``CAIRN_SERVICES=celery``).

The broker process dispatches nothing; the worker does. This step catches the broker up with
the worker through the store files (``Follower.follow_dispatch`` in
``mqcore/store/sharing/follower.py``): it walks the records the worker dispatched, extends
the broker's view of each touched ConsumeQueue and calls the store's listeners, which wake
long-polling pulls and the live trace exactly as an in-process reput would. It also picks up the worker's cleanups and the disk-full flag.

It is cheap when idle (a few reads of the progress file), so the broker's loop polls it
every ``follow_interval_ms`` and a Redis pub/sub message from the worker (``workers/events``)
wakes it at once.
"""

from __future__ import annotations

from mqcore.services.result import StepResult
from mqcore.store.store import MessageStore

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


def step(store: MessageStore, *, max_bytes: int = DEFAULT_MAX_BYTES) -> StepResult:
    """Follow at most ``max_bytes`` of newly dispatched CommitLog. Broker role only.

    Raises:
        ValueError: the store is not a broker-role store.
    """
    if store.role != "broker":
        raise ValueError(f"follow runs in a broker-role store, not {store.role!r}")
    followed = store.reput_once(max_bytes)
    return StepResult(
        "follow",
        progressed=followed > 0,
        detail={
            "followed": followed,
            "followed_offset": store.reput_offset,
            "behind_bytes": store.dispatch_behind_bytes,
            "writable": store.writable,
        },
    )
