"""The row schema of the ``cairn`` data source, the archive and the archive key index.

One row per CommitLog message record (blank end-of-file records are not rows). Columns, in
order; every integer is the record field of the same name (spec/store-format.md 1.2)::

    column                       Spark type           notes
    topic                        string
    queue_id                     int
    queue_offset                 bigint               0 for PREPARED/ROLLBACK records
    phys_offset                  bigint               byte position in the CommitLog
    store_size                   int                  TOTALSIZE of the record
    msg_id                       string               UNIQ_KEY, else offset_msg_id
    offset_msg_id                string               store host + phys_offset, upper hex
    keys                         array<string>        KEYS split on " ", empty ones dropped
    tags                         string               TAGS, null when absent
    properties                   map<string,string>   every property, RocketMQ's decode rule
    body                         binary               as stored (compressed if sys_flag & 1)
    body_crc                     int
    flag                         int
    sys_flag                     int
    born_timestamp               bigint               epoch ms (producer clock)
    born_host                    string               "ip:port" ("[ip]:port" for IPv6)
    store_timestamp              bigint               epoch ms (broker clock)
    store_time                   timestamp            store_timestamp as a timestamp (UTC)
    store_host                   string               "ip:port" ("[ip]:port" for IPv6)
    reconsume_times              int
    prepared_transaction_offset  bigint

These are :class:`mqcore.message.MessageExt`'s fields and derived views (``msg_id``,
``offset_msg_id``, ``keys``, ``tags``), so a row equals what ``mqcore`` decodes
(``tests/pipeline`` compares them field by field).

The archive's message files hold the same columns minus ``topic`` (it is the ``topic=``
directory, as Spark's own partitioned writer does). The key index has one row per key
(each KEYS element and the UNIQ_KEY) of each archived message.

Only pyarrow here: the archive lookup uses these without Spark.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

__all__ = [
    "ARROW_SCHEMA",
    "ARCHIVE_SCHEMA",
    "COLUMNS",
    "KEY_INDEX_SCHEMA",
    "SPARK_DDL",
    "project",
]

_FIELDS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("topic", pa.string(), "string"),
    ("queue_id", pa.int32(), "int"),
    ("queue_offset", pa.int64(), "bigint"),
    ("phys_offset", pa.int64(), "bigint"),
    ("store_size", pa.int32(), "int"),
    ("msg_id", pa.string(), "string"),
    ("offset_msg_id", pa.string(), "string"),
    ("keys", pa.list_(pa.field("element", pa.string())), "array<string>"),
    ("tags", pa.string(), "string"),
    ("properties", pa.map_(pa.string(), pa.string()), "map<string,string>"),
    ("body", pa.binary(), "binary"),
    ("body_crc", pa.int32(), "int"),
    ("flag", pa.int32(), "int"),
    ("sys_flag", pa.int32(), "int"),
    ("born_timestamp", pa.int64(), "bigint"),
    ("born_host", pa.string(), "string"),
    ("store_timestamp", pa.int64(), "bigint"),
    ("store_time", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("store_host", pa.string(), "string"),
    ("reconsume_times", pa.int32(), "int"),
    ("prepared_transaction_offset", pa.int64(), "bigint"),
)

COLUMNS: tuple[str, ...] = tuple(name for name, _, _ in _FIELDS)
ARROW_SCHEMA = pa.schema([pa.field(name, arrow_type) for name, arrow_type, _ in _FIELDS])
"""What the scanner yields; equal to ``to_arrow_schema`` of :data:`SPARK_DDL` (tested)."""
SPARK_DDL = ", ".join(f"{name} {ddl}" for name, _, ddl in _FIELDS)
ARCHIVE_SCHEMA = pa.schema([f for f in ARROW_SCHEMA if f.name != "topic"])
KEY_INDEX_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string()),  # one KEYS element, or the UNIQ_KEY
        pa.field("store_timestamp", pa.int64()),
        pa.field("msg_id", pa.string()),
        pa.field("phys_offset", pa.int64()),
        pa.field("file", pa.string()),  # message file, relative to the archive root
    ]
)


def project(columns: Iterable[str]) -> pa.Schema:
    """The fields of :data:`ARROW_SCHEMA` named in ``columns``, in schema order.

    Raises:
        ValueError: a name that is not a column.
    """
    wanted = set(columns)
    unknown = wanted - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)}; the columns are {', '.join(COLUMNS)}")
    return pa.schema([f for f in ARROW_SCHEMA if f.name in wanted])
