from typing import Any

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Cairn accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        _announce_passwords_of_new_users()


def _announce_passwords_of_new_users() -> None:
    """Django tells password validators of a new password (``password_changed``, where
    :mod:`accounts.passwords` derives the SCRAM keys) when it was set with ``set_password``,
    but ``UserManager.create_user``/``create_superuser`` (``createsuperuser`` too) hash it
    directly and say nothing. Make the users they create carry the password the way
    ``set_password`` would, so their ``save`` announces it as well."""
    from django.contrib.auth.models import UserManager

    original = UserManager._create_user_object
    if getattr(original, "_cairn_announces", False):
        return

    def create_user_object(
        self: Any, username: Any, email: Any, password: Any, **extra_fields: Any
    ) -> Any:
        user = original(self, username, email, password, **extra_fields)
        if password is not None:
            user._password = password
        return user

    create_user_object._cairn_announces = True  # type: ignore[attr-defined]
    UserManager._create_user_object = create_user_object  # type: ignore[method-assign]
