"""ServiceLoop: run a step function on a daemon thread inside the broker (inline mode).

The loop is ``result = step(); stop.wait(0 if result.progressed else interval)``. A
``wake`` event (set by the store on every append) cuts the wait short, so reput dispatches
a new message within milliseconds without spinning. Errors are logged with their traceback
and retried with exponential backoff; the loop never dies of one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mqcore.services.result import StepResult

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0


@dataclass
class ServiceState:
    """What a status page shows about one service."""

    name: str
    runs: int = 0
    last_run_ms: int = 0
    last_error: str = ""
    last_error_ms: int = 0
    errors: int = 0
    last_result: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "runs": self.runs,
            "last_run_ms": self.last_run_ms,
            "last_error": self.last_error,
            "last_error_ms": self.last_error_ms,
            "errors": self.errors,
            "last_result": dict(self.last_result),
        }


class ServiceLoop:
    """A daemon thread calling ``step`` until :meth:`stop`."""

    def __init__(
        self,
        name: str,
        step: Callable[[], StepResult],
        interval_s: float,
        *,
        wake: threading.Event | None = None,
    ) -> None:
        self.name = name
        self.step = step
        self.interval_s = interval_s
        self.state = ServiceState(name)
        self._wake = wake or threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"cairn-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Run the step now instead of at the end of the idle wait (thread-safe)."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            # Cleared before the step: a wake-up during the step is kept for the wait below.
            self._wake.clear()
            try:
                result = self.step()
            except Exception as exc:  # noqa: BLE001 - logged with traceback, then backoff
                log.exception("service %s failed", self.name)
                self.state.errors += 1
                self.state.last_error = f"{type(exc).__name__}: {exc}"
                self.state.last_error_ms = time.time_ns() // 1_000_000
                backoff = min(MAX_BACKOFF_S, max(0.05, backoff * 2))
                self._stop.wait(backoff)
                continue
            backoff = 0.0
            self.state.runs += 1
            self.state.last_run_ms = time.time_ns() // 1_000_000
            self.state.last_result = result.as_dict()
            if result.progressed:
                continue
            self._wake.wait(self.interval_s)


def run_lease(
    step: Callable[[], StepResult],
    *,
    duration_s: float,
    poll_s: float,
    max_idle_s: float,
    should_stop: Callable[[], bool] = lambda: False,
    on_result: Callable[[StepResult], None] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> StepResult | None:
    """Call ``step`` for ``duration_s`` on the caller's thread (a Celery worker's reput task).

    While steps progress they run back to back; when idle the wait starts at ``poll_s``
    (RocketMQ's reput sleeps 1 ms) and doubles every 256 idle steps up to ``max_idle_s``, so
    an idle store costs little and a new message waits at most ``max_idle_s``. A ``skipped``
    step (another runner has the service) ends the lease at once. Errors propagate.

    Returns:
        The last result, or None if ``should_stop`` was true from the start.
    """
    deadline = monotonic() + duration_s
    last: StepResult | None = None
    idle = 0
    while not should_stop() and monotonic() < deadline:
        last = step()
        if on_result is not None:
            on_result(last)
        if last.status == "skipped":
            break
        if last.progressed:
            idle = 0
            continue
        idle += 1
        sleep(min(max_idle_s, poll_s * 2 ** ((idle - 1) // 256)))
    return last
