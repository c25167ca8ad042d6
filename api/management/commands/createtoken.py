"""``python manage.py createtoken USERNAME [--role viewer|operator|admin] [--name N]
[--expires-days D] [--rotate]``.

Creates the user if needed (with no password: it can use only its tokens), gives it the role,
issues a new API token and prints it alone on the last line, once (only its hash is kept), so
scripts can take it with ``| tail -n1``. ``--rotate`` revokes the user's other tokens.
It works before the broker's first start too (a deployment script issuing its tokens first):
like ``runbroker``, it applies the database migrations before anything else.
Programs send it as ``Authorization: Token <token>``; Kafka clients as the user's SASL
password (PLAIN or SCRAM).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from accounts import service
from accounts.roles import ROLES, role_of
from mqcore.access.authorizer import Subject
from mqcore.errors import MQError

ACTOR = Subject("manage.py createtoken", "admin", "*", "command")


class Command(BaseCommand):
    help = (
        "Issue a new API token for USERNAME, creating the user if needed, and print the token "
        "alone on the last line (once: only its hash is kept). --role sets the user's role "
        "(new users default to viewer)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, help="viewer, operator or admin")
        parser.add_argument("--name", default="createtoken", help="the token's name")
        parser.add_argument(
            "--expires-days", type=int, default=None, help="the token expires after this many days"
        )
        parser.add_argument("--rotate", action="store_true", help="revoke the user's other tokens")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        if not username or len(username) > 150:
            raise CommandError("USERNAME must be 1 to 150 characters")
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days must be at least 1")
        expires = timezone.now() + timedelta(days=days) if days else None
        call_command("migrate", interactive=False, verbosity=0)
        try:
            with transaction.atomic():
                try:
                    user = service.get_user(username)
                    created = False
                except MQError:
                    user = service.create_user(ACTOR, username, options["role"] or "viewer")
                    created = True
                if not created and options["role"] and not user.is_superuser:
                    user = service.set_role(ACTOR, username, options["role"])
                if options["rotate"]:
                    for token in service.list_tokens(username):
                        if token.revoked is None:
                            service.revoke_token(ACTOR, token.pk)
                issued = service.issue_token(ACTOR, username, options["name"], expires)
        except MQError as exc:
            raise CommandError(str(exc)) from None
        what = "created user" if created else "user"
        self.stdout.write(
            f"{what} {username!r}, role {role_of(user) or 'none'}; new token "
            f"{options['name']!r} (shown only now):"
        )
        self.stdout.write(issued.text)
