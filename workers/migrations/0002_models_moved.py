# Reviews and notifications now live in the gates app (gates 0008 took them over, tables unchanged):
# drop them from the workers app's state.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("workers", "0001_initial"),
        ("gates", "0008_models_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="NotificationAttempt"),
                migrations.DeleteModel(name="Notification"),
                migrations.DeleteModel(name="Review"),
            ],
            database_operations=[],
        ),
    ]
