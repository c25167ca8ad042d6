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

log = logging.getLogger(__name__)


@dataclass
class BrokerRuntime:
    store_dir: Path
    services_mode: str
    started_monotonic: float = field(default_factory=time.monotonic)
    started_at_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    running: bool = False

    def start(self) -> None:
        """Create the store directory. Opening the store and the services join here."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.started_monotonic = time.monotonic()
        self.running = True
        log.info(
            "broker runtime started (store %s, services %s)", self.store_dir, self.services_mode
        )

    def stop(self) -> None:
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
                store_dir=Path(cfg["STORE_DIR"]), services_mode=cfg["SERVICES"]
            )
        return _current
