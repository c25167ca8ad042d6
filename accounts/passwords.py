"""The hook that keeps a password's SCRAM keys in step with it.

Django calls ``password_changed(password, user)`` of every configured password validator
when a user with a newly set password is saved (``AbstractBaseUser.save``), whatever set it:
the REST API, the console, ``createsuperuser``, ``changepassword``, ``create_user``. This
"validator" validates nothing; it derives the SCRAM keys there (settings
``AUTH_PASSWORD_VALIDATORS``).
"""

from __future__ import annotations

from typing import Any

from accounts import scram_keys


class DeriveScramKeys:
    def validate(self, password: str, user: Any = None) -> None:
        return None

    def password_changed(self, password: str, user: Any = None) -> None:
        if user is not None and user.pk is not None and password is not None:
            scram_keys.derive_password(user, password)

    def get_help_text(self) -> str:
        return ""
