# The run's backend is now backends.Backend; the table and the column are unchanged.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("backends", "0001_initial"),
        ("evaluators", "0002_run_queued_and_sent_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="evaluationrun",
                    name="backend",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="runs", to="backends.backend"),
                ),
            ],
            database_operations=[],
        ),
    ]
