"""Progress lines for long Spark jobs: ``done/total`` tasks while a job group runs.

Spark reports task progress to its status tracker, not to Python; :class:`JobProgress` polls it
from a daemon thread on the driver and calls ``emit`` with a line whenever the count of finished
tasks changes. Without a callback nothing runs. Per-partition results (segment, rows, bytes) are
printed by the jobs themselves once Spark returns them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

Emit = Callable[[str], None]

__all__ = ["Emit", "JobProgress"]


class JobProgress:
    """Context manager: tag Spark jobs with a group and report their task progress."""

    def __init__(
        self, spark: Any, label: str, emit: Emit | None, *, interval_s: float = 1.0
    ) -> None:
        self._sc = spark.sparkContext
        self._label = label
        self._emit = emit
        self._interval_s = interval_s
        self._group = f"cairn-{label}-{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> JobProgress:
        self._sc.setJobGroup(self._group, f"cairn pipeline: {self._label}")
        if self._emit is not None:
            self._thread = threading.Thread(
                target=self._poll, name=f"progress-{self._label}", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._sc.setLocalProperty("spark.jobGroup.id", None)

    def _counts(self) -> tuple[int, int]:
        tracker = self._sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _poll(self) -> None:
        last = (-1, -1)
        while not self._stop.wait(self._interval_s):
            try:
                counts = self._counts()
            except Exception:  # the context is stopping; progress is best effort
                return
            if counts != last and counts[1]:
                last = counts
                assert self._emit is not None
                self._emit(f"{self._label}: {counts[0]}/{counts[1]} tasks done")
