"""The ``batchRows`` option: decoded chunks go to the JVM as Arrow batches of at most N rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.columnar import Bounds
from pipeline.datasource import CairnReader
from pipeline.scan import scan_range
from tests.pipeline.test_datasource import expected_rows, spark_rows


def test_read_yields_slices_of_at_most_batch_rows(mq_store: Path) -> None:
    reader = CairnReader({"path": str(mq_store), "batchRows": "7"})
    partition = reader.partitions()[0]
    sizes = [b.num_rows for b in reader.read(partition)]
    whole = sum(b.num_rows for b in scan_range(partition.value, Bounds()))
    assert sum(sizes) == whole > 7
    assert max(sizes) == 7
    assert len(sizes) > 1


def test_bad_batch_rows_is_an_error(mq_store: Path) -> None:
    with pytest.raises(ValueError, match="batchRows"):
        CairnReader({"path": str(mq_store), "batchRows": "0"})


@pytest.mark.spark
@pytest.mark.slow
def test_small_batches_give_the_same_rows(spark: Any, mq_store: Path) -> None:
    frame = spark.read.format("cairn").option("batchRows", "100").load(str(mq_store))
    assert spark_rows(frame) == expected_rows(mq_store)
