"""The pipeline's jobs: plain functions the management command and Celery tasks call.

* :func:`pipeline.jobs.archive.run_archive`: incremental export to Parquet + key index.
* :func:`pipeline.jobs.compact.run_compact`: merges the archive's small files per topic/date.
* :func:`pipeline.jobs.stats.run_stats`: messages and bytes per topic per minute, top keys.
* :func:`pipeline.jobs.rebuild_index.run_rebuild_index`: ConsumeQueue and IndexFile files
  rebuilt from the CommitLog on Spark, laid down by mqcore's own writers.
"""
