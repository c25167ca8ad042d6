"""Cairn's data pipeline on Spark (PySpark): reads the store's CommitLog files read-only.

Modules (dependencies point down; only ``session``, ``datasource``, ``progress`` and the jobs'
driver halves import pyspark, so executors and the archive lookup need just pyarrow, numpy
and mqcore):

=====================  ======================================================================
``session``            the one SparkSession builder (``CAIRN_SPARK_MASTER``, Java, env)
``datasource``         ``spark.read.format("cairn")``: partitions, options, filter push-down
``jobs.archive``       incremental Parquet archive + key index (``run_archive``)
``jobs.compact``       merges the archive's small files per topic/date (``run_compact``)
``jobs.stats``         per topic per minute, top keys (``run_stats``)
``jobs.rebuild_index`` ConsumeQueue/IndexFile rebuilt on Spark (``run_rebuild_index``)
``archive_lookup``     key lookup in the archive, pyarrow only (``lookup``)
``archive_layout``     archive paths, watermark and compaction commit rules, lock, live files
``scan``               one scan range to Arrow batches (walk + decoder)
``columnar``           CommitLog records to Arrow columns, checked against mqcore's decoder
``fields``             the decoder's vectorised kernels (numpy/pyarrow, whole chunks at once)
``segments``           segment listing, partition planning, the record walk, snapshot end
``schema``             the row schema (Arrow and Spark DDL)
=====================  ======================================================================
"""
