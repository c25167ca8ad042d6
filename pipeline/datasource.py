"""``spark.read.format("cairn").load(store_dir)``: a PySpark Python Data Source over CommitLog files.

Reads the segment files directly and read-only (no ``MessageStore``, no ``<store>/lock``), so it
works on a live store or a copy. One partition per segment, or per ``maxPartitionBytes`` slice
of a large one (``segments.plan_ranges``); each partition yields Arrow record batches decoded by
``columnar.decode_chunk``. The schema is :data:`pipeline.schema.SPARK_DDL`.

**Reading fewer columns.** Python Data Sources get no column pruning from Spark: every row
crosses from the Python worker to the JVM with all 21 columns, and the JVM copies each one
into an UnsafeRow (Spark's reader for Python sources does so for every row and column, even
for ``count()``): ~1 us of JVM CPU a row. A query that needs a few columns can say so with a
schema holding a subset of the columns (same names and types, any order)::

    spark.read.format("cairn").schema("topic string, store_timestamp bigint").load(store)

Only those columns are then decoded and sent (``count()`` over such a frame is several
times faster than over the full schema). A column or type not in the schema is an error.

Options (all optional)::

    topics            comma-separated topic names (also ``topic``)
    beginTimestamp    store_timestamp >= this (epoch ms)
    endTimestamp      store_timestamp <= this (epoch ms)
    startOffset       phys_offset >= this; segments wholly below are not opened
    endOffset         phys_offset < this
    maxPartitionBytes split segments larger than this (default 256 MiB)
    verifyCrc         tail (default) | all | none: body CRCs checked on the segments a live
                      broker may be appending to, on all, or on none
    chunkBytes        bytes of a segment per Arrow batch (default 4 MiB)

Pushed-down filters (Spark SQL ``WHERE``), applied while decoding and so not re-evaluated by
Spark: ``topic = / IN``, and ``= < <= > >=`` on ``store_timestamp`` and ``phys_offset``.
Bounds on ``phys_offset`` also prune whole segments at planning time. Filters on
``store_time`` are left to Spark (compare ``store_timestamp`` in ms to push them down).

A session from :func:`pipeline.session.get_session` has the source registered and
``spark.sql.python.filterPushdown.enabled`` on; Spark refuses a reader with ``pushFilters``
when that flag is off, so another session must set it before reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from pipeline.schema import SPARK_DDL

__all__ = ["CairnDataSource", "CairnReader", "SegmentPartition"]


class SegmentPartition(InputPartition):
    """One :class:`~pipeline.segments.ScanRange` (picklable, sent to an executor)."""

    def __init__(self, scan_range: Any) -> None:
        super().__init__(scan_range)


def _int_option(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name) or options.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"option {name}: expected an integer, got {raw!r}") from None


class CairnDataSource(DataSource):
    """The ``cairn`` format: rows of CommitLog messages (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "cairn"

    def schema(self) -> str:
        return SPARK_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return CairnReader(dict(self.options), requested_columns(schema))


def requested_columns(schema: StructType) -> list[str] | None:
    """The columns a user-given schema asks for, in its order; None for the full schema.

    Raises:
        ValueError: a field that is not a column of the source, or has another type.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from pipeline.schema import ARROW_SCHEMA, COLUMNS

    names = [f.name for f in schema.fields]
    if names == list(COLUMNS):
        return None
    given = to_arrow_schema(schema, timezone="UTC")
    for field in given:
        if field.name not in COLUMNS:
            raise ValueError(f"cairn: no column {field.name!r}; the columns are {SPARK_DDL}")
        if not field.type.equals(ARROW_SCHEMA.field(field.name).type):
            raise ValueError(
                f"cairn: column {field.name} is {ARROW_SCHEMA.field(field.name).type}, "
                f"not {field.type} (the columns are {SPARK_DDL})"
            )
    return names


class CairnReader(DataSourceReader):
    """Plans segment partitions on the driver and decodes them on executors."""

    def __init__(self, options: dict[str, str], columns: list[str] | None = None) -> None:
        self.columns = columns
        self.store_dir = options.get("path") or options.get("store")
        if not self.store_dir:
            raise ValueError(
                'cairn: give the store directory: spark.read.format("cairn").load(dir)'
            )
        topics = options.get("topics") or options.get("topic")
        self.topics: set[str] | None = (
            {t.strip() for t in topics.split(",") if t.strip()} if topics else None
        )
        self.begin_ms = _int_option(options, "beginTimestamp")
        self.end_ms = _int_option(options, "endTimestamp")
        self.min_phys = _int_option(options, "startOffset")
        self.max_phys = _int_option(options, "endOffset")
        self.max_partition_bytes = _int_option(options, "maxPartitionBytes")
        self.chunk_bytes = _int_option(options, "chunkBytes")
        self.batch_rows = _int_option(options, "batchRows")
        if self.batch_rows is not None and self.batch_rows < 1:
            raise ValueError(
                f"option batchRows: expected a positive integer, got {self.batch_rows}"
            )
        self.verify_crc = (options.get("verifyCrc") or options.get("verifycrc") or "tail").lower()

    # -- push-down ------------------------------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (Spark's name)
        for f in filters:
            if not self._push(f):
                yield f

    def _push(self, f: Filter) -> bool:
        column = f.attribute[0] if len(f.attribute) == 1 else None
        if column == "topic":
            if isinstance(f, IsNotNull):
                return True  # every row has a topic
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                values = {f.value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                values = set(f.value)
            else:
                return False
            self.topics = values if self.topics is None else self.topics & values
            return True
        value = getattr(f, "value", None)
        if column not in ("store_timestamp", "phys_offset"):
            return False
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        low, high = _as_range(f)
        if low is None and high is None:
            return False
        if column == "store_timestamp":  # inclusive both ends
            self.begin_ms = _max(self.begin_ms, low)
            self.end_ms = _min(self.end_ms, high)
        else:  # [min_phys, max_phys)
            self.min_phys = _max(self.min_phys, low)
            self.max_phys = _min(self.max_phys, None if high is None else high + 1)
        return True

    # -- planning (driver) and reading (executors) ---------------------------------------------

    def partitions(self) -> Sequence[InputPartition]:
        from pipeline.segments import DEFAULT_MAX_PARTITION_BYTES, list_segments, plan_ranges

        ranges = plan_ranges(
            list_segments(self.store_dir),
            start_offset=self.min_phys or 0,
            end_offset=self.max_phys,
            max_partition_bytes=self.max_partition_bytes or DEFAULT_MAX_PARTITION_BYTES,
            verify_crc=self.verify_crc,
        )
        return [SegmentPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pipeline.columnar import Bounds
        from pipeline.scan import scan_range
        from pipeline.segments import DEFAULT_CHUNK_BYTES

        bounds = Bounds(
            topics=frozenset(self.topics) if self.topics is not None else None,
            begin_ms=self.begin_ms,
            end_ms=self.end_ms,
            min_phys=self.min_phys,
            max_phys=self.max_phys,
        )
        for batch in scan_range(
            partition.value,
            bounds,
            chunk_bytes=self.chunk_bytes or DEFAULT_CHUNK_BYTES,
            columns=self.columns,
        ):
            if not batch.num_rows:
                continue
            # Spark checks the batch against the frame's schema, in the user's order.
            batch = batch if self.columns is None else batch.select(self.columns)
            step = self.batch_rows or batch.num_rows
            for first in range(0, batch.num_rows, step):
                yield batch.slice(first, step)  # zero-copy; the stream writer trims buffers


def _as_range(f: Filter) -> tuple[int | None, int | None]:
    """Inclusive (low, high) of a comparison with an integer."""
    v = f.value
    if isinstance(f, EqualTo):
        return v, v
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v - 1
    if isinstance(f, LessThanOrEqual):
        return None, v
    return None, None


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
