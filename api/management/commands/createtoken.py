"""``python manage.py createtoken USERNAME --role viewer|operator|admin``.

Creates the user if needed (with no password: it can use only the token), gives it the role,
and prints the user's API token alone on the last line, so scripts can take it with
``| tail -n1``. An existing token is printed again unless ``--rotate`` replaces it. Programs
send it as ``Authorization: Token <token>``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from rest_framework.authtoken.models import Token

from api import audit
from api.roles import ROLES, role_of, set_role


class Command(BaseCommand):
    help = (
        "Create (or reuse) an API token for USERNAME, creating the user if needed, and print "
        "the token alone on the last line. --role sets the user's role (new users default "
        "to viewer)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, help="viewer, operator or admin")
        parser.add_argument(
            "--rotate", action="store_true", help="replace an existing token with a new one"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        if not username or len(username) > 150:
            raise CommandError("USERNAME must be 1 to 150 characters")
        users = get_user_model()
        with transaction.atomic():
            user, created = users.objects.get_or_create(username=username)
            if created:
                user.set_unusable_password()
                user.save()
            old_role = None if created else role_of(user)
            role = options["role"] or (None if not created else "viewer")
            if role is not None and not user.is_superuser:
                set_role(user, role)
            if options["rotate"]:
                Token.objects.filter(user=user).delete()
            token, token_created = Token.objects.get_or_create(user=user)
            audit.record(
                None,
                "user.token" if not created else "user.create",
                "user",
                username,
                old=None if created else {"role": old_role},
                new={"role": role_of(user), "token": "issued" if token_created else "reused"},
                username="manage.py createtoken",
            )
        what = "created user" if created else "user"
        self.stdout.write(
            f"{what} {username!r}, role {role_of(user) or 'none'}; "
            f"{'new' if token_created else 'existing'} token:"
        )
        self.stdout.write(token.key)
