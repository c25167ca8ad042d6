"""The audit log: one row per change made through any front end or a management command, and
per login, failed login, lockout and lockout lift."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    """Who did what to which target, when, with the value before and after.

    ``username`` and ``role`` are copied at the time, so the row still says who it was after
    the user is renamed or deleted. ``old_value`` / ``new_value`` are JSON (None when there
    was nothing before, e.g. a create, or nothing after, e.g. a delete). Secrets (passwords,
    tokens) are never written here.
    """

    timestamp = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150)
    role = models.CharField(max_length=16, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=32)
    target = models.CharField(max_length=300, db_index=True)
    old_value = models.JSONField(null=True, blank=True)
    new_value = models.JSONField(null=True, blank=True)
    remote_addr = models.CharField(max_length=64, blank=True)
    #: ``User:<name>`` (or ``User:ANONYMOUS``); blank for the broker's own entries (cleanup).
    principal = models.CharField(max_length=160, blank=True)
    #: How the change came: ``rest``, ``console``, ``kafka``, ``command`` (manage.py), or blank.
    front_end = models.CharField(max_length=16, blank=True, db_index=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["target_type", "target"])]

    def __str__(self) -> str:
        return f"{self.timestamp:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.target}"
