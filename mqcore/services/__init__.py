"""The store's background services as step functions (STYLE 7).

A service is a function that does a bounded amount of idempotent work and returns a
:class:`StepResult`; its progress lives in the store (reput offset, flushed offsets,
checkpoint), never in whoever runs it. ``runner.ServiceLoop`` runs steps on threads inside
the broker (``CAIRN_SERVICES=inline``); Celery tasks in ``workers/`` run the same steps.
"""

from mqcore.services.result import StepResult

__all__ = ["StepResult"]
