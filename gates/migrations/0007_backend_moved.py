# Tickets and routes point at backends.Backend now; the table and the columns are unchanged.

import django.db.models.deletion
from django.db import migrations, models


def _backend(related_name):
    return models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name=related_name, to="backends.backend")


class Migration(migrations.Migration):

    dependencies = [
        ("backends", "0001_initial"),
        ("gates", "0006_ticket_newest_first_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="releaseticket", name="baseline", field=_backend("baseline_tickets")),
                migrations.AlterField(model_name="releaseticket", name="candidate", field=_backend("candidate_tickets")),
                migrations.AlterField(model_name="releaseticket", name="rollback_target", field=_backend("rollback_tickets")),
                migrations.AlterField(model_name="route", name="backend", field=_backend("+")),
            ],
            database_operations=[],
        ),
    ]
