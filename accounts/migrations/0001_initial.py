# API tokens move out of the gates app; the table stays where it is (gates_apitoken): this only moves the
# model in Django's state, and its content type. gates 0008 drops it from the gates app's state.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

MOVES = [("apitoken", "gates", "accounts")]
BACK = [("apitoken", "accounts", "gates")]


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
                    name='ApiToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(default='default', help_text='what the token is for, e.g. ci-deploy', max_length=100)),
                        ('prefix', models.CharField(help_text='public part of the key; finds the token', max_length=24, unique=True)),
                        ('key_hash', models.CharField(help_text='sha256 hex of the secret part of the key', max_length=64)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'gates_apitoken',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
