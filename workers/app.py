from __future__ import annotations

import os

from celery import Celery


def redis_url() -> str:
    return os.environ.get("CAIRN_REDIS_URL", "").strip() or "redis://127.0.0.1:6379/0"


app = Celery("cairn")
app.conf.update(
    broker_url=redis_url(),
    result_backend=redis_url(),
    task_acks_late=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="cairn.ping")
def ping() -> str:
    """A liveness probe for workers: ``celery -A workers call cairn.ping``."""
    return "pong"
