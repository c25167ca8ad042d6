"""The Celery app: the store's background services on workers (``CAIRN_SERVICES=celery``).

Run a worker with its beat scheduler on the host that owns the store directory (the tasks
map the store's files)::

    CAIRN_STORE_DIR=... CAIRN_REDIS_URL=redis://host:6379/0 celery -A workers worker -B

Keep at least two pool slots (the default is one per CPU): ``cairn.reput`` occupies one for
as long as it holds the reput lease. One beat is enough; more are harmless (a second copy
of a task finds the service's lock taken and returns ``skipped``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery, signals

from mqcore.services import tiered
from workers import settings


def redis_url() -> str:
    return settings.redis_url()


def beat_schedule() -> dict[str, dict[str, Any]]:
    """The beat schedule, from the environment (``CAIRN_*``, read when called)."""
    services = settings.services()
    store = settings.store_config(settings.store_dir())
    schedule: dict[str, dict[str, Any]] = {
        # Starts reput if no worker holds it (a running lease makes these return "skipped").
        "cairn-reput": {
            "task": "cairn.reput",
            "schedule": services.reput_ensure_s,
            "options": {"expires": services.reput_ensure_s},
        },
        "cairn-flush": {
            "task": "cairn.flush",
            "schedule": store.flush_interval_commitlog_ms / 1000,
            "options": {"expires": max(1.0, store.flush_interval_commitlog_ms / 1000)},
        },
        "cairn-cleanup": {
            "task": "cairn.cleanup",
            "schedule": store.clean_resource_interval_ms / 1000,
            "options": {"expires": store.clean_resource_interval_ms / 1000},
        },
        # Resumes a side index build whose task died; idle otherwise.
        "cairn-index": {
            "task": "cairn.index_build",
            "schedule": 30.0,
            "options": {"expires": 30.0},
        },
    }
    # Tiered storage (spec 10), when a backend is configured.
    if os.environ.get("CAIRN_TIERED_BACKEND", "").strip().lower() not in ("", "none"):
        schedule["cairn-tiered-upload"] = {
            "task": "cairn.tiered_upload",
            "schedule": tiered.UPLOAD_INTERVAL_S,
            "options": {"expires": tiered.UPLOAD_INTERVAL_S},
        }
        schedule["cairn-tiered-retention"] = {
            "task": "cairn.tiered_retention",
            "schedule": tiered.RETENTION_INTERVAL_S,
            "options": {"expires": tiered.RETENTION_INTERVAL_S},
        }
    # The data pipeline's jobs (Spark); 0 turns one off. A run still going when the next is
    # due makes the next return "skipped".
    for name, interval in (
        ("archive", settings.archive_interval_s()),
        ("stats", settings.stats_interval_s()),
        ("compact", settings.compact_interval_s()),
    ):
        if interval > 0:
            schedule[f"cairn-pipeline-{name}"] = {
                "task": f"cairn.pipeline_{name}",
                "schedule": interval,
                "options": {"expires": interval},
            }
    return schedule


app = Celery("cairn", include=["workers.tasks"])
app.conf.update(
    broker_url=redis_url(),
    result_backend=redis_url(),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=600,
    # Long tasks (reput's lease) must not hold back prefetched ones.
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_schedule_filename=os.environ.get("CAIRN_BEAT_SCHEDULE_FILE", "").strip()
    or str(settings.store_dir() / "services" / "celerybeat-schedule"),
    beat_schedule=beat_schedule(),
)


@signals.beat_init.connect
@signals.beat_embedded_init.connect
def _make_schedule_dir(**_kwargs: Any) -> None:
    Path(app.conf.beat_schedule_filename).parent.mkdir(parents=True, exist_ok=True)


@app.task(name="cairn.ping")
def ping() -> str:
    """A liveness probe for workers: ``celery -A workers call cairn.ping``."""
    return "pong"
