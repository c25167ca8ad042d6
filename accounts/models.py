"""What the accounts keep: tokens, SCRAM keys, ACL entries, failed-login state, and the audit
log (one row per change made through any front end or a management command, and per login,
failed login, lockout and lockout lift).

Never a secret in clear: an API token is kept as the SHA-256 of its text (a token has 256
random bits, so a fast hash is enough: nobody can guess one to match a digest), and a
password or token's SCRAM credential as RFC 5802's ``StoredKey``/``ServerKey``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Account(models.Model):
    """Per-user state besides Django's user row: the SCRAM salt and iteration count (fixed at
    creation: every secret of the user is derived with them, see ``backend.ScramUser``), and
    the failed-login counter and lockout."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cairn_account"
    )
    scram_salt = models.BinaryField(max_length=32)
    scram_iterations = models.PositiveIntegerField()
    #: Failed logins since the last success (or since an admin lifted a lockout).
    failures = models.PositiveIntegerField(default=0)
    last_failure = models.DateTimeField(null=True, blank=True)
    #: Locked out until then (None: not locked).
    locked_until = models.DateTimeField(null=True, blank=True)


class ApiToken(models.Model):
    """One API token of a user. ``digest``: SHA-256 hex of the token text (shown once)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField(null=True, blank=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"token {self.pk} {self.name!r} of user {self.user_id}"


class ScramKey(models.Model):
    """One SCRAM credential: the user's password (``token`` None) or one of its tokens,
    for one mechanism. ``password_hash`` is the user's Django password hash it was derived
    with: when that no longer matches (a hash set some other way), the key is ignored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scram_keys"
    )
    mechanism = models.CharField(max_length=16)
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.CASCADE)
    password_hash = models.CharField(max_length=128, blank=True)
    stored_key = models.BinaryField(max_length=64)
    server_key = models.BinaryField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "mechanism", "token"], name="scram_key_once_per_secret"
            ),
        ]


class AclRecord(models.Model):
    """One ACL entry (``mqcore.access.model.AclEntry``), codes as Kafka's wire codes."""

    principal = models.CharField(max_length=160)
    resource_type = models.PositiveSmallIntegerField()
    resource_name = models.CharField(max_length=255)
    pattern_type = models.PositiveSmallIntegerField()
    operation = models.PositiveSmallIntegerField()
    permission = models.PositiveSmallIntegerField()
    host = models.CharField(max_length=64, default="*")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "principal",
                    "resource_type",
                    "resource_name",
                    "pattern_type",
                    "operation",
                    "permission",
                    "host",
                ],
                name="acl_entry_once",
            ),
        ]


class AclVersion(models.Model):
    """One row: bumped in the same transaction as every ACL change, so every process sees
    when its cached authorizer is stale."""

    version = models.PositiveBigIntegerField(default=1)


class AddressFailures(models.Model):
    """Failed logins from one client address in the current window (throttling)."""

    address = models.CharField(max_length=64, unique=True)
    failures = models.PositiveIntegerField(default=0)
    window_start = models.DateTimeField()


class ActionCount(models.Model):
    """Routine actions counted rather than logged one by one (consumer commits), per
    principal and action."""

    principal = models.CharField(max_length=160)
    action = models.CharField(max_length=64)
    count = models.PositiveBigIntegerField(default=0)
    last = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["principal", "action"], name="action_count_once")
        ]


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
        # The table the REST API's app created (the model moved here from ``api``; the
        # migrations ``api`` 0004 and ``accounts`` 0003 move it without touching the table).
        db_table = "api_auditentry"
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["target_type", "target"])]

    def __str__(self) -> str:
        return f"{self.timestamp:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.target}"
