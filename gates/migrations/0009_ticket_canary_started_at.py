# When a ticket's current canary started, kept on the ticket instead of read back from the ledger.
# Tickets already past their canary start get it from their latest "ticket.canary" ledger entry.

from django.db import migrations, models


def backfill(apps, schema_editor):
    ReleaseTicket = apps.get_model("gates", "ReleaseTicket")
    LedgerEntry = apps.get_model("ledger", "LedgerEntry")
    for ticket in ReleaseTicket.objects.filter(status__in=["canary", "default", "rolled_back", "retired"]):
        entry = (
            LedgerEntry.objects.filter(subject_type="ticket", subject_id=str(ticket.pk), kind="ticket.canary")
            .order_by("-seq")
            .first()
        )
        if entry is not None:
            ReleaseTicket.objects.filter(pk=ticket.pk).update(canary_started_at=entry.created_at)


class Migration(migrations.Migration):

    dependencies = [
        ("gates", "0008_models_moved"),
        ("ledger", "0002_backend_moved"),
    ]

    operations = [
        migrations.AddField(
            model_name="releaseticket",
            name="canary_started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
