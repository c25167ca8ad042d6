"""``spark.read.format("cairn")``: rows, schema and push-down, over a real local session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

from pipeline.datasource import CairnReader
from pipeline.schema import ARROW_SCHEMA, SPARK_DDL
from tests.pipeline.conftest import START_MS, ForeignStore, mqcore_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def spark_rows(frame: Any) -> list[dict[str, Any]]:
    rows = [r.asDict() for r in frame.orderBy("phys_offset").collect()]
    for r in rows:
        r["properties"] = dict(r["properties"])
        r["body"] = bytes(r["body"])
        r.pop("store_time")
    return rows


def expected_rows(root: Path) -> list[dict[str, Any]]:
    rows = pa.Table.from_pylist(mqcore_rows(root), schema=ARROW_SCHEMA).to_pylist()
    for r in rows:
        r["properties"] = dict(r["properties"])
        r.pop("store_time")
    return rows


def test_schema_is_the_documented_one(spark: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    frame = spark.read.format("cairn").load("/nonexistent-is-fine-for-schema")
    assert (
        frame.schema.simpleString() == f"struct<{SPARK_DDL.replace(' ', ':').replace(',:', ',')}>"
    )
    assert to_arrow_schema(frame.schema, timezone="UTC").equals(ARROW_SCHEMA)


def test_rows_equal_what_mqcore_reads(spark: Any, mq_store: Path) -> None:
    frame = spark.read.format("cairn").option("maxPartitionBytes", "20000").load(str(mq_store))
    assert frame.rdd.getNumPartitions() > len(list((mq_store / "commitlog").iterdir()))
    assert spark_rows(frame) == expected_rows(mq_store)


def test_foreign_store_counts_and_bodies(spark: Any, foreign_store: ForeignStore) -> None:
    frame = spark.read.format("cairn").load(str(foreign_store.root))
    assert frame.count() == len(foreign_store.written)
    got = frame.select("phys_offset", "body", "topic").orderBy("phys_offset").collect()
    assert [(r.phys_offset, bytes(r.body), r.topic) for r in got] == [
        (w.phys_offset, w.message.body, w.message.topic) for w in foreign_store.written
    ]


def test_sql_filters_are_pushed_down_and_exact(spark: Any, mq_store: Path) -> None:
    spark.read.format("cairn").load(str(mq_store)).createOrReplaceTempView("commitlog")
    begin, end = START_MS + 100_000, START_MS + 700_000
    got = spark.sql(
        f"SELECT phys_offset FROM commitlog WHERE topic IN ('Topic0', 'Topic2') "
        f"AND store_timestamp >= {begin} AND store_timestamp < {end} ORDER BY phys_offset"
    ).collect()
    want = [
        r["phys_offset"]
        for r in expected_rows(mq_store)
        if r["topic"] in ("Topic0", "Topic2") and begin <= r["store_timestamp"] < end
    ]
    assert want and [r.phys_offset for r in got] == want
    plan = spark.sql(
        f"SELECT * FROM commitlog WHERE topic = 'Topic1' AND store_timestamp >= {begin}"
    )
    assert plan.count() == sum(
        1
        for r in expected_rows(mq_store)
        if r["topic"] == "Topic1" and r["store_timestamp"] >= begin
    )


def test_options_bound_topic_time_and_offsets(spark: Any, mq_store: Path) -> None:
    frame = (
        spark.read.format("cairn")
        .option("topics", "Topic1")
        .option("beginTimestamp", str(START_MS + 50_000))
        .option("endTimestamp", str(START_MS + 400_000))
        .option("startOffset", "70000")
        .load(str(mq_store))
    )
    want = [
        r["phys_offset"]
        for r in expected_rows(mq_store)
        if r["topic"] == "Topic1"
        and START_MS + 50_000 <= r["store_timestamp"] <= START_MS + 400_000
        and r["phys_offset"] >= 70_000
    ]
    assert want and [r.phys_offset for r in frame.orderBy("phys_offset").collect()] == want
    # startOffset prunes whole segments at planning time.
    assert frame.rdd.getNumPartitions() < len(list((mq_store / "commitlog").iterdir()))


def test_push_filters_keeps_what_it_cannot_apply() -> None:
    reader = CairnReader({"path": "/store"})
    filters = [
        EqualTo(("topic",), "A"),
        In(("topic",), ("A", "B")),
        GreaterThanOrEqual(("store_timestamp",), 5),
        LessThan(("phys_offset",), 100),
        EqualTo(("queue_id",), 1),
    ]
    left = list(reader.pushFilters(filters))
    assert left == [filters[-1]]
    assert (reader.topics, reader.begin_ms, reader.max_phys) == ({"A"}, 5, 100)


def test_bad_store_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a store directory"):
        spark.read.format("cairn").load(str(tmp_path)).count()


def test_a_schema_with_fewer_columns_reads_just_those(spark: Any, mq_store: Path) -> None:
    frame = (
        spark.read.format("cairn")
        .schema("store_timestamp bigint, topic string, phys_offset bigint, keys array<string>")
        .option("topics", "Topic2")
        .load(str(mq_store))
    )
    assert frame.columns == ["store_timestamp", "topic", "phys_offset", "keys"]
    got = [r.asDict() for r in frame.orderBy("phys_offset").collect()]
    want = [
        {k: r[k] for k in ("store_timestamp", "topic", "phys_offset", "keys")}
        for r in expected_rows(mq_store)
        if r["topic"] == "Topic2"
    ]
    assert want and got == want
    narrow = spark.read.format("cairn").schema("phys_offset bigint").load(str(mq_store))
    assert narrow.count() == len(expected_rows(mq_store))
    with pytest.raises(Exception, match="no column 'nope'"):
        spark.read.format("cairn").schema("nope int").load(str(mq_store)).count()
    with pytest.raises(Exception, match="column topic is string, not int32"):
        spark.read.format("cairn").schema("topic int").load(str(mq_store)).count()
