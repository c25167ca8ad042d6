"""``python manage.py rebuildindex``: rebuild the IndexFile (and ConsumeQueues) from the CommitLog.

For stores whose derived files were lost or corrupted (``mqcore.services.index_build``):

* Broker stopped: the store is opened for itself; the index is rebuilt and installed, or with
  ``--queues`` every ConsumeQueue and index file is rebuilt from the whole CommitLog.

Every rebuild is built beside the live files and swapped in through a journal
(``mqcore.store.recovery.rebuild_dir``): killed at any moment, the store holds the old files or the
new ones, and the next start (or run) completes or discards what was left. Errors, damaged
files included, are one line (``CommandError``).
* Broker running (either ``CAIRN_SERVICES`` mode): the index is built aside in this process
  while the broker keeps serving, and the process running reput (the broker's thread, or a
  Celery worker) installs it; ``--celery`` hands the build itself to a worker instead.
  ``--queues`` needs the broker stopped.

A progress bar shows the CommitLog bytes indexed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqcore.clock import SystemClock
from mqcore.errors import MQError, StoreLockedError
from mqcore.services import index_build
from mqcore.services.config import worker_store_config
from mqcore.services.index_build import IndexBuildJob
from mqcore.store import MessageStore

BAR_WIDTH = 30


class Progress:
    """A one-line progress bar on a terminal, plain lines otherwise."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.tty = sys.stdout.isatty()
        self.started = time.monotonic()
        self.last = 0.0

    def show(self, done: int, total: int, note: str = "", *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < (0.1 if self.tty else 2.0):
            return
        self.last = now
        fraction = 1.0 if total <= 0 else min(1.0, done / total)
        filled = int(fraction * BAR_WIDTH)
        rate = done / max(now - self.started, 1e-9) / 1e6
        line = (
            f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction:6.1%} "
            f"{done / 1e6:,.1f}/{total / 1e6:,.1f} MB {rate:,.1f} MB/s {note}"
        )
        if self.tty:
            self.out.write("\r" + line.ljust(100), ending="\n" if final else "")
        else:
            self.out.write(line)
        self.out.flush()


class Command(BaseCommand):
    help = (
        "Rebuild the IndexFile from the CommitLog (all of it, or from --from-offset on). With "
        "--queues, also the ConsumeQueues (broker stopped). Works while the broker runs: the "
        "process that runs reput installs the rebuilt index."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", default=None, help="store directory (default CAIRN_STORE_DIR)"
        )
        parser.add_argument(
            "--from-offset",
            type=int,
            default=None,
            help="CommitLog offset: keep index files wholly below it, rebuild the rest",
        )
        parser.add_argument(
            "--queues", action="store_true", help="rebuild the ConsumeQueues too (broker stopped)"
        )
        parser.add_argument(
            "--celery",
            action="store_true",
            help="let a Celery worker build it (cairn.index_build) and follow its progress",
        )
        parser.add_argument("--step-bytes", type=int, default=index_build.DEFAULT_STEP_BYTES)
        parser.add_argument(
            "--wait", type=float, default=600.0, help="seconds to wait for reput to install it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["store"] or settings.CAIRN["STORE_DIR"]).resolve()
        if not (root / "commitlog").is_dir():
            raise CommandError(f"{root} holds no CommitLog")
        progress = Progress(self.stdout)
        try:
            config = worker_store_config(root, os.environ)
            store = MessageStore(root, config).open()
        except StoreLockedError:
            if options["queues"]:
                raise CommandError(
                    "the broker (or a worker) has this store open: stop it to rebuild the "
                    "ConsumeQueues"
                ) from None
            self._online(root, config, options, progress)
            return
        except (MQError, OSError, ValueError) as exc:
            raise CommandError(f"cannot open the store {root}: {exc}") from None
        try:
            self._offline(store, options, progress)
        except (MQError, OSError) as exc:
            raise CommandError(f"rebuild of {root} failed: {exc}") from None
        finally:
            try:
                store.close()
            except (MQError, OSError) as exc:
                self.stderr.write(f"closing the store {root} failed: {exc}")

    def _offline(self, store: MessageStore, options: dict[str, Any], progress: Progress) -> None:
        if options["queues"]:
            self.stdout.write(f"Rebuilding the ConsumeQueues and the index of {store.root}")
            records = index_build.rebuild_queues(
                store,
                on_progress=lambda done, total: progress.show(done, total),
                max_bytes=options["step_bytes"],
            )
            end = store.commit_log.max_offset - store.commit_log.min_offset
            progress.show(end, end, final=True)
            self.stdout.write(self.style.SUCCESS(f"Rebuilt from {records:,} records."))
            return
        self.stdout.write(f"Rebuilding the index of {store.root}")
        if store.rebuilding_queues:
            names = ", ".join(f"{t}/{q}" for t, q in sorted(store.rebuilding_queues))
            self.stdout.write(
                f"Note: ConsumeQueue(s) {names} are damaged; `rebuildindex --queues` rebuilds "
                "them now, or the broker does at its next start."
            )
        job = index_build.rebuild(
            store,
            SystemClock(),
            from_offset=options["from_offset"],
            max_bytes=options["step_bytes"],
            on_progress=lambda j: self._show(j, progress),
        )
        self._show(job, progress, final=True)
        self.stdout.write(self.style.SUCCESS(f"Index rebuilt: {job.records:,} records."))

    def _online(self, root: Path, config: Any, options: dict[str, Any], progress: Progress) -> None:
        self.stdout.write(f"The broker is running on {root}: building the index beside it.")
        clock = SystemClock()
        if options["celery"]:
            from workers.app import app

            try:
                app.send_task(
                    "cairn.index_build",
                    kwargs={
                        "store_dir": str(root),
                        "start": True,
                        "from_offset": options["from_offset"],
                    },
                )
            except Exception as exc:  # kombu's connection errors have no common base
                raise CommandError(f"could not hand the build to Celery: {exc}") from None
        else:
            try:
                with MessageStore(root, config, role="services") as store:
                    job = index_build.start(store, clock, from_offset=options["from_offset"])
                    while job.state == "building":
                        index_build.step(store, clock, max_bytes=options["step_bytes"])
                        job = index_build.load_job(root) or job
                        self._show(job, progress)
            except (MQError, OSError) as exc:
                raise CommandError(f"index build of {root} failed: {exc}") from None
        self._wait_installed(root, options["wait"], progress)

    def _wait_installed(self, root: Path, wait_s: float, progress: Progress) -> None:
        deadline = time.monotonic() + wait_s
        pause = threading.Event()
        while time.monotonic() < deadline:
            job = index_build.load_job(root)
            if job is not None:
                note = "waiting for reput to install it" if job.state == "ready" else ""
                self._show(job, progress, note=note)
                if job.state == "installed":
                    self._show(job, progress, final=True)
                    self.stdout.write(
                        self.style.SUCCESS(f"Index rebuilt: {job.records:,} records.")
                    )
                    return
                if job.state == "failed":
                    raise CommandError(f"index build failed: {job.error}")
            pause.wait(0.2)
        raise CommandError(
            "the rebuilt index was not installed in time: is reput running (the broker's "
            "services, or a Celery worker)? `python manage.py rebuildindex` again resumes it"
        )

    def _show(
        self, job: IndexBuildJob, progress: Progress, *, note: str = "", final: bool = False
    ) -> None:
        span = max(job.target_end - job.from_offset, 0)
        progress.show(min(job.cursor - job.from_offset, span), span, note or job.state, final=final)
