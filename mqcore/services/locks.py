"""Which runner may run a service on a store: the per-service file locks (STYLE 7).

``<root>/locks/<service>`` (``mqcore.store.files.service_lock``). The rules:

* A ``standalone`` store (services in the broker process) took the continuous services'
  locks when it opened, for as long as it is open; its steps always run.
* A ``services``-role store (a Celery worker) takes a service's lock for one run
  (:func:`exclusive`) or keeps it across runs (:func:`hold`, reput's long-lived task). A run
  that cannot take it returns ``skipped`` and does nothing.
* A ``broker``-role store runs no service that writes derived files.

The locks a store holds are remembered per store object (a weak mapping), not in the store.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from mqcore.services.result import StepResult
from mqcore.store.files.service_lock import CONTINUOUS_SERVICES, ServiceLock
from mqcore.store.store import MessageStore

_held: weakref.WeakKeyDictionary[MessageStore, dict[str, ServiceLock]] = weakref.WeakKeyDictionary()
_slots: weakref.WeakKeyDictionary[MessageStore, dict[str, threading.Lock]] = (
    weakref.WeakKeyDictionary()
)
_guard = threading.Lock()


def _lock_for(store: MessageStore, service: str) -> ServiceLock:
    with _guard:
        locks = _held.setdefault(store, {})
        lock = locks.get(service)
        if lock is None:
            lock = locks[service] = ServiceLock(store.root, service)
        return lock


def runs_here(store: MessageStore, service: str) -> bool:
    """Whether this store object may run ``service`` now, taking its lock if needed (and
    keeping it until :func:`release`). Never waits."""
    if store.readonly or store.role == "broker":
        return False
    if store.role == "standalone" and service in CONTINUOUS_SERVICES:
        return True  # taken at open
    return _lock_for(store, service).try_acquire()


def holds(store: MessageStore, service: str) -> bool:
    """Whether this store object holds ``service``'s lock right now."""
    if store.role == "standalone" and service in CONTINUOUS_SERVICES and store.is_open:
        return True
    with _guard:
        lock = _held.get(store, {}).get(service)
    return lock is not None and lock.held


def release(store: MessageStore, service: str) -> None:
    """Release a lock taken by :func:`runs_here` (no-op for a standalone store's own)."""
    with _guard:
        lock = _held.get(store, {}).get(service)
    if lock is not None:
        lock.release()


@contextmanager
def runner_slot(store: MessageStore, service: str) -> Iterator[bool]:
    """One runner per service *within this process* and store object: yields False while
    another thread runs ``service`` on ``store`` (file locks cannot tell two threads that
    share one store object apart)."""
    with _guard:
        slot = _slots.setdefault(store, {}).setdefault(service, threading.Lock())
    got = slot.acquire(blocking=False)
    try:
        yield got
    finally:
        if got:
            slot.release()


@contextmanager
def exclusive(store: MessageStore, service: str) -> Iterator[bool]:
    """Run ``service`` alone for the block: in this process (:func:`runner_slot`) and on the
    store (its file lock). Yields False, holding nothing, if another runner has either. A
    file lock this store already held stays held afterwards."""
    with runner_slot(store, service) as free:
        if not free:
            yield False
            return
        already = holds(store, service)
        got = already or runs_here(store, service)
        try:
            yield got
        finally:
            if got and not already and store.role != "standalone":
                release(store, service)


def holder(store: MessageStore, service: str) -> str:
    """Who holds ``service`` according to its lock file ("pid host"), for messages."""
    return ServiceLock(store.root, service).holder()


def skipped(store: MessageStore, service: str) -> StepResult:
    """The result of a run that could not take its lock."""
    if store.role == "broker":
        why = "runs on Celery workers (CAIRN_SERVICES=celery)"
    else:
        why = f"lock held by {holder(store, service) or 'another runner'}"
    return StepResult(service, progressed=False, status="skipped", detail={"reason": why})
