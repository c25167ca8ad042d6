"""Statistics job: messages and bytes per topic per minute, and the top keys of each topic.

Spark SQL over the ``cairn`` data source, bounded to the CommitLog as it is when the job starts
(``endOffset`` = ``segments.snapshot_end``), so both aggregations see the same records. Every
record counts (system topics too), by its ``store_timestamp``.

Output, for the console's charts (each file replaced atomically; a reader sees the old or the
new one, never a mix)::

    <out>/stats/per_minute.parquet   topic string, minute_ms bigint (UTC minute start),
                                     messages bigint, record_bytes bigint, body_bytes bigint
    <out>/stats/top_keys.parquet     topic string, rank int (1 = most), key string,
                                     messages bigint
    <out>/stats/stats.json           {"generated_ms", "store", "end_offset", "top_keys_limit",
                                      "topics": {topic: {"messages", "record_bytes",
                                      "body_bytes", "per_minute": [[minute_ms, messages,
                                      record_bytes, body_bytes], ...],
                                      "top_keys": [[key, messages], ...]}}}

The JSON holds the same figures as the Parquet files, ordered for charts (minutes ascending,
keys by rank), so the console can read it without pyarrow.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.progress import Emit, JobProgress
from pipeline.segments import list_segments, snapshot_end

__all__ = ["StatsReport", "run_stats"]


@dataclass
class StatsReport:
    store_dir: str
    stats_dir: str
    end_offset: int
    topics: int = 0
    messages: int = 0
    minutes: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_stats(
    store_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    master: str | None = None,
    spark: Any = None,
    top_keys: int = 10,
    progress: Emit | None = None,
) -> StatsReport:
    """Compute the statistics of ``store_dir`` into ``<out_dir>/stats``.

    Raises:
        StoreLayoutError: ``store_dir`` is not a store.
        ValueError: ``top_keys`` below 1.
    """
    if top_keys < 1:
        raise ValueError("top_keys must be at least 1")
    started = time.monotonic()
    emit = progress or (lambda _line: None)
    list_segments(store_dir)  # fails fast on a directory that is not a store
    end = snapshot_end(store_dir)
    if spark is None:
        from pipeline.session import get_session

        spark = get_session(master)
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # Only the columns the aggregations use: the rest is neither decoded nor sent to the JVM.
    frame = (
        spark.read.format("cairn")
        .schema(
            "topic string, store_size int, keys array<string>, body binary, store_timestamp bigint"
        )
        .option("endOffset", str(end))
        .option("verifyCrc", "none")
        .load(str(store_dir))
    )
    minute = (F.floor(F.col("store_timestamp") / 60_000) * 60_000).cast("long").alias("minute_ms")
    with JobProgress(spark, "stats", emit):
        per_minute = (
            frame.groupBy("topic", minute)
            .agg(
                F.count(F.lit(1)).alias("messages"),
                F.sum("store_size").cast("long").alias("record_bytes"),
                F.sum(F.length("body")).cast("long").alias("body_bytes"),
            )
            .orderBy("topic", "minute_ms")
        )
        minutes = _collect(per_minute)
        ranked = Window.partitionBy("topic").orderBy(F.desc("messages"), F.asc("key"))
        keys = (
            frame.select("topic", F.explode("keys").alias("key"))
            .groupBy("topic", "key")
            .agg(F.count(F.lit(1)).alias("messages"))
            .withColumn("rank", F.row_number().over(ranked))
            .where(F.col("rank") <= top_keys)
            .select("topic", F.col("rank").cast("int").alias("rank"), "key", "messages")
            .orderBy("topic", "rank")
        )
        top = _collect(keys)
    target = Path(out_dir) / "stats"
    target.mkdir(parents=True, exist_ok=True)
    _replace_parquet(target / "per_minute.parquet", minutes)
    _replace_parquet(target / "top_keys.parquet", top)
    summary = _summary(minutes, top, str(store_dir), end, top_keys)
    _replace_text(target / "stats.json", json.dumps(summary, separators=(",", ":")))
    report = StatsReport(
        str(store_dir), str(target), end, topics=len(summary["topics"]),
        messages=sum(t["messages"] for t in summary["topics"].values()), minutes=minutes.num_rows,
    )  # fmt: skip
    report.seconds = round(time.monotonic() - started, 3)
    for topic, figures in summary["topics"].items():
        emit(f"stats: {topic}: {figures['messages']} messages, {figures['record_bytes']} bytes")
    emit(
        f"stats: {report.messages} messages in {report.topics} topics, {report.minutes} topic-minutes, {report.seconds:.1f} s"
    )
    return report


def _collect(frame: Any) -> pa.Table:
    rows = [row.asDict() for row in frame.collect()]
    schema = pa.schema(
        [
            (
                f.name,
                {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32()}[
                    f.dataType.simpleString()
                ],
            )
            for f in frame.schema.fields
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _summary(minutes: pa.Table, top: pa.Table, store: str, end: int, limit: int) -> dict[str, Any]:
    topics: dict[str, dict[str, Any]] = {}
    for row in minutes.to_pylist():
        t = topics.setdefault(
            row["topic"],
            {"messages": 0, "record_bytes": 0, "body_bytes": 0, "per_minute": [], "top_keys": []},
        )
        t["messages"] += row["messages"]
        t["record_bytes"] += row["record_bytes"]
        t["body_bytes"] += row["body_bytes"]
        t["per_minute"].append(
            [row["minute_ms"], row["messages"], row["record_bytes"], row["body_bytes"]]
        )
    for row in top.to_pylist():
        topics[row["topic"]]["top_keys"].append([row["key"], row["messages"]])
    return {
        "generated_ms": time.time_ns() // 1_000_000,
        "store": store,
        "end_offset": end,
        "top_keys_limit": limit,
        "topics": topics,
    }


def _replace_parquet(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(text)
    os.replace(tmp, path)
