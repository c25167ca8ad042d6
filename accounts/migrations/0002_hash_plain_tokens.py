"""Tokens made before accounts existed (DRF's ``authtoken_token``, kept in clear) become
hashed API tokens named "token" and keep working; the clear rows are deleted. They get no
SCRAM keys (issue a new token for Kafka SCRAM)."""

import hashlib
from datetime import UTC, datetime

from django.db import migrations
from django.utils.dateparse import parse_datetime


def _aware(value):  # type: ignore[no-untyped-def]
    """SQLite hands the column back as text, PostgreSQL as an aware datetime."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def hash_plain_tokens(apps, schema_editor):  # type: ignore[no-untyped-def]
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return
    api_token = apps.get_model("accounts", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, user_id, created FROM authtoken_token")
        rows = cursor.fetchall()
        for key, user_id, created in rows:
            token = api_token.objects.create(
                user_id=user_id, name="token", digest=hashlib.sha256(key.encode()).hexdigest()
            )
            api_token.objects.filter(pk=token.pk).update(created=_aware(created))
        cursor.execute("DELETE FROM authtoken_token")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(hash_plain_tokens, migrations.RunPython.noop)]
