"""The broker runtime: what one broker process owns while it runs.

``runbroker`` starts it before serving and stops it after the server returns. Views and
consumers reach it through :func:`current`. It lives in this process only: other processes
(Celery workers, Spark) learn of progress through the store files and Redis, never through it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

import mqcore
from mqcore.clock import SystemClock
from mqcore.services import flush, reput
from mqcore.services.flush import FlushState
from mqcore.services.runner import ServiceLoop
from mqcore.store import MessageStore, StoreConfig

log = logging.getLogger(__name__)


@dataclass
class BrokerRuntime:
    store_dir: Path
    services_mode: str
    started_monotonic: float = field(default_factory=time.monotonic)
    started_at_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    flush_mode: str = "async"
    running: bool = False
    store: MessageStore | None = None
    loops: list[ServiceLoop] = field(default_factory=list)

    def start(self) -> None:
        """Open (and recover) the store, then start the in-process services.

        Raises:
            StoreLockedError: another broker holds the store.
        """
        self.store_dir.mkdir(parents=True, exist_ok=True)
        store = MessageStore(self.store_dir, StoreConfig(flush=self.flush_mode))  # type: ignore[arg-type]
        store.open()
        self.store = store
        if store.recovery is not None:
            log.info("%s", store.recovery.summary())
        if self.services_mode == "inline":
            self._start_inline_services(store)
        self.started_monotonic = time.monotonic()
        self.running = True
        log.info(
            "broker runtime started (store %s, services %s)", self.store_dir, self.services_mode
        )

    def _start_inline_services(self, store: MessageStore) -> None:
        clock = SystemClock()
        state = FlushState()
        interval_s = store.config.flush_interval_commitlog_ms / 1000
        self.loops = [
            # Reput waits on the store's append event, so 1 s is only a safety net.
            ServiceLoop("reput", lambda: reput.step(store), 1.0, wake=store.appended),
            ServiceLoop("flush", lambda: flush.step(store, state, clock), interval_s),
        ]
        for loop in self.loops:
            loop.start()

    def stop(self) -> None:
        """Stop the services, then close the store (final dispatch, flush, checkpoint)."""
        for loop in self.loops:
            loop.stop()
        self.loops = []
        if self.store is not None:
            self.store.close()
            self.store = None
        self.running = False
        log.info("broker runtime stopped")

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "version": mqcore.__version__,
            "store_dir": str(self.store_dir),
            "uptime_s": round(time.monotonic() - self.started_monotonic, 3),
            "started_at": self.started_at_ms,
            "services": self.services_mode,
            "running": self.running,
            "pid": os.getpid(),
            "store": self._store_health(),
            "service_state": {loop.name: loop.state.as_dict() for loop in self.loops},
        }

    def _store_health(self) -> dict[str, Any] | None:
        store = self.store
        if store is None:
            return None
        return {
            "commitlog_min_offset": store.commit_log.min_offset,
            "commitlog_max_offset": store.commit_log.max_offset,
            "flushed_offset": store.commit_log.flushed_offset,
            "reput_offset": store.reput_offset,
            "dispatch_behind_bytes": store.dispatch_behind_bytes,
            "flush": store.config.flush,
            "writable": store.writable,
        }


_lock = threading.Lock()
_current: BrokerRuntime | None = None


def current() -> BrokerRuntime:
    """The process's runtime, created from settings on first use."""
    global _current
    with _lock:
        if _current is None:
            cfg = settings.CAIRN
            _current = BrokerRuntime(
                store_dir=Path(cfg["STORE_DIR"]),
                services_mode=cfg["SERVICES"],
                flush_mode=cfg["FLUSH"],
            )
        return _current
