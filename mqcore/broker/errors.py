"""Broker refusals that carry a field and a rule, like :class:`~mqcore.errors.ValidationError`.

They extend the tree in :mod:`mqcore.errors`; front ends translate them at their one boundary
by the base class (``PermissionDeniedError`` → 403 / NO_PERMISSION, ``StoreNotWritableError`` →
503 / SERVICE_NOT_AVAILABLE) and may show ``field`` and ``rule``.
"""

from __future__ import annotations

from mqcore.errors import PermissionDeniedError, StoreNotWritableError


class NoPermissionError(PermissionDeniedError):
    """Perm bits forbid the operation (RocketMQ NO_PERMISSION).

    Rules: ``broker_not_writable``, ``broker_not_readable``, ``topic_not_writable``,
    ``topic_not_readable``, ``not_allowed_send`` (a system topic producers may not use),
    ``consume_disabled`` (the group's ``consume_enable`` is off).
    """

    def __init__(self, field: str, rule: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule


class BrokerNotStartedError(StoreNotWritableError):
    """The broker is not accepting requests yet, or any more (spec 11 step 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.field = "broker"
        self.rule = "not_started"
