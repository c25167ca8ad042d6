"""The audit log's model now belongs to ``accounts`` (its 0003 takes it over): forget it here
without dropping the table, which keeps its name and rows."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0003_auditentry_front_end_auditentry_principal"),
        ("accounts", "0003_auditentry"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEntry")],
            database_operations=[],
        ),
    ]
