"""``python manage.py pipeline archive|compact|stats|rebuild-index``: the data pipeline's jobs.

Runs on ``local[*]`` by default; ``--master`` or ``CAIRN_SPARK_MASTER`` for a cluster (the
store and ``--out`` must then be on storage every node sees). Prints one line per step and
partition, then the totals; a bad input is one ``CommandError`` line and a non-zero exit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from cairn import env


class Command(BaseCommand):
    help = (
        "Run a data-pipeline job on Spark over the store files (read-only, no lock): "
        "'archive' exports new messages to Parquet with a key index (incremental), "
        "'compact' merges the archive's small files per topic and date, "
        "'stats' writes per-topic per-minute counts and top keys, 'rebuild-index' rebuilds "
        "consumequeue/ and index/ into --out."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", choices=["archive", "compact", "stats", "rebuild-index"])
        parser.add_argument(
            "--store", type=Path, default=None, help="store directory (default: CAIRN_STORE_DIR)"
        )
        parser.add_argument(
            "--out",
            type=Path,
            default=None,
            help="output directory (default: $CAIRN_DATA_DIR/pipeline)",
        )
        parser.add_argument(
            "--master", default=None, help="Spark master (default: CAIRN_SPARK_MASTER or local[*])"
        )
        parser.add_argument("--top-keys", type=int, default=10, help="stats: keys kept per topic")
        parser.add_argument(
            "--keep-replaced",
            type=float,
            default=None,
            help="compact: seconds replaced files are kept for readers still using them "
            "(default 600)",
        )
        parser.add_argument(
            "--cq-file-entries",
            type=int,
            default=None,
            help="rebuild-index: units per ConsumeQueue file",
        )
        parser.add_argument(
            "--index-hash-slots", type=int, default=None, help="rebuild-index: IndexFile slots"
        )
        parser.add_argument(
            "--index-max-entries", type=int, default=None, help="rebuild-index: IndexFile entries"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        store = (options["store"] or Path(settings.CAIRN["STORE_DIR"])).resolve()
        out = (options["out"] or env.data_dir() / "pipeline").resolve()
        if options["job"] != "compact" and not (store / "commitlog").is_dir():
            raise CommandError(
                f"{store}: not a store directory (no commitlog/ inside); give --store"
            )
        if options["top_keys"] < 1:
            raise CommandError("--top-keys must be at least 1")
        if options["keep_replaced"] is not None and options["keep_replaced"] < 0:
            raise CommandError("--keep-replaced must not be negative")
        try:
            report = self._run(options["job"], store, out, options)
        except CommandError:
            raise
        except Exception as exc:  # one clear line for the operator; the traceback is noise here
            raise CommandError(_one_line(exc)) from None
        self.stdout.write(
            f"{options['job']}: done: "
            + ", ".join(f"{k}={v}" for k, v in report.as_dict().items() if k != "warnings")
        )

    def _run(self, job: str, store: Path, out: Path, options: dict[str, Any]) -> Any:
        from pyspark.sql import SparkSession

        from pipeline.session import PipelineEnvironmentError, get_session, stop_session

        shared = SparkSession.getActiveSession() is not None  # e.g. tests: leave it running

        def emit(line: str) -> None:
            self.stdout.write(line)

        try:
            spark = get_session(options["master"])
        except PipelineEnvironmentError as exc:
            raise CommandError(str(exc)) from None
        try:
            if job == "archive":
                from pipeline.jobs.archive import run_archive

                return run_archive(store, out, spark=spark, progress=emit)
            if job == "compact":
                from pipeline.jobs.compact import DEFAULT_KEEP_REPLACED_S, run_compact

                keep = options["keep_replaced"]
                return run_compact(
                    out,
                    spark=spark,
                    keep_replaced_s=DEFAULT_KEEP_REPLACED_S if keep is None else keep,
                    progress=emit,
                )
            if job == "stats":
                from pipeline.jobs.stats import run_stats

                return run_stats(
                    store, out, spark=spark, top_keys=options["top_keys"], progress=emit
                )
            from pipeline.jobs.rebuild_index import run_rebuild_index

            return run_rebuild_index(
                store, out, config=_store_config(options), spark=spark, progress=emit
            )
        finally:
            if not shared:
                stop_session()


def _store_config(options: dict[str, Any]) -> Any:
    from mqcore.store import StoreConfig

    given = {
        "consume_queue_file_entries": options["cq_file_entries"],
        "index_hash_slots": options["index_hash_slots"],
        "index_max_entries": options["index_max_entries"],
    }
    return StoreConfig(**{k: v for k, v in given.items() if v is not None})


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), type(exc).__name__)
    return f"{type(exc).__name__}: {first.strip()}"
