"""The Celery app that runs the store's background services when ``CAIRN_SERVICES=celery``.

Start a worker with its beat scheduler on the host that owns the store directory::

    celery -A workers worker -B

Tasks are thin wrappers around mqcore's step functions (the Background Services issue).
Settings come from the same ``CAIRN_*`` variables as the broker.
"""

from workers.app import app

__all__ = ["app"]
