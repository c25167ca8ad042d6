"""Running one Python function per scan range as Spark tasks, and collecting small results.

``sparkContext.parallelize(range(n), n)`` gives task *i* the id *i*; the job's function runs
on it in a Python worker (next to the data on a cluster), reads its segment range and writes
its own output files; only a small dict of counts comes back to the driver. Message bytes
never travel through the JVM this way. (``mapInArrow`` would do the same on Spark Connect but
needs pandas, which the pipeline does not otherwise use.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.progress import Emit, JobProgress

__all__ = ["run_per_range"]


def run_per_range(
    spark: Any,
    count: int,
    task: Callable[[int], dict[str, Any]],
    *,
    label: str,
    emit: Emit | None,
) -> list[dict[str, Any]]:
    """Run ``task(i)`` for i in 0..count-1 as Spark tasks; return their dicts ordered by i.

    ``task`` must be picklable (a module-level function or a closure over plain data).
    """
    if count == 0:
        return []
    with JobProgress(spark, label, emit):
        rdd = spark.sparkContext.parallelize(range(count), count)
        return list(rdd.map(task).collect())
