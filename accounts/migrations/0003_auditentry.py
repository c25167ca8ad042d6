"""The audit log's model moves here from ``api`` (where ``api`` 0001-0003 made its table).

Only Django's idea of the model moves: the table keeps its name (``api_auditentry``), its
rows and its index, so nothing is written to it; ``api`` 0004 forgets the model on its side.
The model's content type is renamed to this app, keeping any permission rows that point
at it (a fresh database has none yet: content types are made after the migrations).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _rename_content_type(apps, old, new):  # type: ignore[no-untyped-def]
    content_type = apps.get_model("contenttypes", "ContentType")
    if not content_type.objects.filter(app_label=new, model="auditentry").exists():
        content_type.objects.filter(app_label=old, model="auditentry").update(app_label=new)


def content_type_to_accounts(apps, schema_editor):  # type: ignore[no-untyped-def]
    _rename_content_type(apps, "api", "accounts")


def content_type_to_api(apps, schema_editor):  # type: ignore[no-untyped-def]
    _rename_content_type(apps, "accounts", "api")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_hash_plain_tokens"),
        ("api", "0003_auditentry_front_end_auditentry_principal"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEntry",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("timestamp", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("username", models.CharField(max_length=150)),
                        ("role", models.CharField(blank=True, max_length=16)),
                        ("action", models.CharField(db_index=True, max_length=64)),
                        ("target_type", models.CharField(max_length=32)),
                        ("target", models.CharField(db_index=True, max_length=300)),
                        ("old_value", models.JSONField(blank=True, null=True)),
                        ("new_value", models.JSONField(blank=True, null=True)),
                        ("remote_addr", models.CharField(blank=True, max_length=64)),
                        ("principal", models.CharField(blank=True, max_length=160)),
                        (
                            "front_end",
                            models.CharField(blank=True, db_index=True, max_length=16),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name_plural": "audit entries",
                        "db_table": "api_auditentry",
                        "ordering": ["-id"],
                        "indexes": [
                            models.Index(
                                fields=["target_type", "target"],
                                name="api_auditen_target__1c0d0a_idx",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_to_accounts, content_type_to_api),
    ]
