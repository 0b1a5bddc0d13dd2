# Backend now lives in the backends app (backends 0001 took over the table); drop it from the
# ledger app's state once every foreign key points at backends.Backend.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0001_initial"),
        ("backends", "0001_initial"),
        ("evaluators", "0003_backend_moved"),
        ("gates", "0007_backend_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="Backend")], database_operations=[]),
    ]
