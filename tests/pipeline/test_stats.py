"""Statistics job: per topic per minute, top keys, and the JSON the console reads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pipeline.jobs.stats import run_stats
from tests.pipeline.conftest import mqcore_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_stats_match_the_records(spark: Any, mq_store: Path, tmp_path: Path) -> None:
    report = run_stats(mq_store, tmp_path, spark=spark, top_keys=3)
    rows = mqcore_rows(mq_store)
    per_minute = Counter((r["topic"], r["store_timestamp"] // 60_000 * 60_000) for r in rows)
    table = pq.read_table(tmp_path / "stats" / "per_minute.parquet").to_pylist()
    assert {(r["topic"], r["minute_ms"]): r["messages"] for r in table} == dict(per_minute)
    assert sum(r["record_bytes"] for r in table) == sum(r["store_size"] for r in rows)
    assert report.messages == len(rows)
    key_counts = Counter((r["topic"], k) for r in rows for k in r["keys"])
    top = pq.read_table(tmp_path / "stats" / "top_keys.parquet").to_pylist()
    for r in top:
        assert key_counts[(r["topic"], r["key"])] == r["messages"] and 1 <= r["rank"] <= 3
    best = max(n for (t, _k), n in key_counts.items() if t == "Topic1")
    summary = json.loads((tmp_path / "stats" / "stats.json").read_text())
    assert summary["topics"]["Topic1"]["top_keys"][0][1] == best
    assert summary["topics"]["Topic0"]["messages"] == sum(1 for r in rows if r["topic"] == "Topic0")
