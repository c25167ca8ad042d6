"""The stores a worker process has open: one ``services``-role store per (directory, service).

A store is opened on a task's first use and kept for the life of the process (mapping the
files again for every 500 ms flush would cost more than the flush). Each service gets its
own instance, so a ConsumeQueue view one service is writing (reput) is never the view
another service only follows (flush, cleanup): they meet through the files and the progress
file, as they would in two processes. Thread-safe (Celery's thread pool).
"""

from __future__ import annotations

import atexit
import threading
from pathlib import Path

from mqcore.store.store import MessageStore
from workers import settings

_stores: dict[tuple[Path, str], MessageStore] = {}
_guard = threading.Lock()


def open_store(store_dir: str | None, service: str) -> MessageStore:
    """The open services-role store of ``store_dir`` (the environment's if None) for
    ``service``.

    Raises:
        StoreError: the files cannot be loaded (e.g. a geometry mismatch).
    """
    root = settings.store_dir(store_dir)
    key = (root, service)
    with _guard:
        store = _stores.get(key)
        if store is None or not store.is_open:
            root.mkdir(parents=True, exist_ok=True)
            store = MessageStore(root, settings.store_config(root), role="services").open()
            _stores[key] = store
        return store


def close_all() -> None:
    """Close every store this process opened (worker shutdown)."""
    with _guard:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        store.close()


atexit.register(close_all)
