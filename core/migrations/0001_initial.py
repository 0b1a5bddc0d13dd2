# The idempotency records move out of the gates app; the table stays where it is (gates_idempotencyrecord):
# this only moves the model in Django's state, and its content type. gates 0008 drops it from the gates app's state.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

MOVES = [("idempotencyrecord", "gates", "core")]
BACK = [("idempotencyrecord", "core", "gates")]


def move_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, source, target in MOVES:
        ContentType.objects.filter(app_label=source, model=model).update(app_label=target)


def restore_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, source, target in BACK:
        ContentType.objects.filter(app_label=source, model=model).update(app_label=target)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("gates", "0007_backend_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='IdempotencyRecord',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('key', models.CharField(max_length=200)),
                        ('endpoint', models.CharField(max_length=200)),
                        ('request_hash', models.CharField(max_length=64)),
                        ('response_status', models.PositiveSmallIntegerField()),
                        ('response_body', models.JSONField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'gates_idempotencyrecord',
                        'constraints': [models.UniqueConstraint(fields=('user', 'key', 'endpoint'), name='unique_idempotency_key')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
