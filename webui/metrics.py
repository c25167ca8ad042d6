"""Throughput history for the overview chart: messages in and out per second, last hour.

The broker counts messages stored and pulled (``BrokerStatus.put_total`` / ``get_total``). A
daemon thread samples those totals every :data:`INTERVAL_S` seconds and keeps the last hour;
the rate of an interval is its difference over its length. A restarted or replaced broker
resets its totals: the sample after that starts a new series instead of a negative rate.

``server.asgi`` starts the sampler when the server loads the application; the overview view
starts it too (idempotent), so it also runs under ``runserver`` and in tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

INTERVAL_S = 5.0
WINDOW_S = 3600


@dataclass(frozen=True, slots=True)
class Sample:
    at_ms: int
    put_total: int
    get_total: int
    broker_id: int


class ThroughputSampler:
    """See the module docstring. Thread-safe."""

    def __init__(self, interval_s: float = INTERVAL_S, window_s: int = WINDOW_S) -> None:
        self.interval_s = interval_s
        self._samples: deque[Sample] = deque(maxlen=int(window_s / interval_s) + 1)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="cairn-console-metrics", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_now()
            except Exception:  # noqa: BLE001 - a status read failing must not end the history
                log.exception("console metrics: sampling failed")
            self._stop.wait(self.interval_s)

    def sample_now(self) -> None:
        """Take one sample of the running broker (nothing when none is running)."""
        from cairn import runtime

        broker = runtime.current().broker
        if broker is None or not broker.started:
            return
        status = broker.status()
        sample = Sample(time.time_ns() // 1_000_000, status.put_total, status.get_total, id(broker))
        with self._lock:
            self._samples.append(sample)

    def series(self) -> dict[str, Any]:
        """``{"interval_s", "points": [[t_ms, in_per_s, out_per_s], ...]}``, oldest first; each
        point is the average rate over the interval that ends at ``t_ms``."""
        with self._lock:
            samples = list(self._samples)
        points = []
        for before, after in zip(samples, samples[1:], strict=False):
            span = (after.at_ms - before.at_ms) / 1000
            if span <= 0 or after.broker_id != before.broker_id:
                continue
            put = after.put_total - before.put_total
            got = after.get_total - before.get_total
            if put < 0 or got < 0:
                continue
            points.append([after.at_ms, round(put / span, 3), round(got / span, 3)])
        return {"interval_s": self.interval_s, "window_s": WINDOW_S, "points": points}


sampler = ThroughputSampler()
