"""JVM options ``get_session`` gives a local driver (which is also the executor)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_local_driver_reads_arrow_without_bounds_checks(spark: Any) -> None:
    system = spark.sparkContext._jvm.java.lang.System
    assert system.getProperty("arrow.enable_unsafe_memory_access") == "true"
    # The log4j2 file is still given alongside it.
    assert system.getProperty("log4j2.configurationFile", "").endswith("log4j2.properties")
