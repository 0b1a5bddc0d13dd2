# Reviews and notifications move into the gates app from the workers app (the tables keep their names);
# API tokens and idempotency records left for the accounts and core apps. State and content types only.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

MOVES = [("notification", "workers", "gates"), ("notificationattempt", "workers", "gates"), ("review", "workers", "gates")]
BACK = [("notification", "gates", "workers"), ("notificationattempt", "gates", "workers"), ("review", "gates", "workers")]


def move_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, source, target in MOVES:
        ContentType.objects.filter(app_label=source, model=model).update(app_label=target)


def restore_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, source, target in BACK:
        ContentType.objects.filter(app_label=source, model=model).update(app_label=target)


class Migration(migrations.Migration):

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("gates", "0007_backend_moved"),
        ("core", "0001_initial"),
        ("accounts", "0001_initial"),
        ("workers", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ApiToken"),
                migrations.DeleteModel(name="IdempotencyRecord"),
                migrations.CreateModel(
                    name='Notification',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('event', models.CharField(max_length=60)),
                        ('subject', models.CharField(max_length=200)),
                        ('text', models.TextField()),
                        ('recipients', models.JSONField(default=list, help_text='email addresses')),
                        ('webhook_url', models.URLField(blank=True)),
                        ('email_sent_at', models.DateTimeField(blank=True, null=True)),
                        ('webhook_sent_at', models.DateTimeField(blank=True, null=True)),
                        ('given_up_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('ticket', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='notifications', to='gates.releaseticket')),
                    ],
                    options={
                        'db_table': 'workers_notification',
                        'ordering': ['-created_at', '-id'],
                    },
                ),
                migrations.CreateModel(
                    name='NotificationAttempt',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('channel', models.CharField(choices=[('email', 'email'), ('webhook', 'webhook')], max_length=10)),
                        ('number', models.PositiveSmallIntegerField()),
                        ('ok', models.BooleanField()),
                        ('response_status', models.PositiveSmallIntegerField(blank=True, null=True)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('notification', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='gates.notification')),
                    ],
                    options={
                        'db_table': 'workers_notificationattempt',
                        'ordering': ['notification', 'channel', 'number'],
                    },
                ),
                migrations.CreateModel(
                    name='Review',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('reason', models.CharField(choices=[('quarterly', 'Quarterly'), ('approval_expired', 'Approval Expired'), ('engine_changed', 'Engine Changed'), ('hardware_changed', 'Hardware Changed')], max_length=20)),
                        ('status', models.CharField(choices=[('open', 'Open'), ('done', 'Done')], db_index=True, default='open', max_length=10)),
                        ('details', models.JSONField(blank=True, default=dict, help_text='what triggered the review')),
                        ('due_at', models.DateTimeField()),
                        ('outcome', models.CharField(blank=True, choices=[('keep_default', 'Keep Default'), ('restrict', 'Restrict'), ('rollback', 'Rollback'), ('observe_more', 'Observe More')], max_length=20)),
                        ('comment', models.TextField(blank=True)),
                        ('reminders_sent', models.PositiveSmallIntegerField(default=0)),
                        ('last_reminded_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('completed_at', models.DateTimeField(blank=True, null=True)),
                        ('reviewed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('ticket', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='reviews', to='gates.releaseticket')),
                    ],
                    options={
                        'db_table': 'workers_review',
                        'ordering': ['due_at', 'id'],
                    },
                ),
                migrations.AddConstraint(
                    model_name='notificationattempt',
                    constraint=models.UniqueConstraint(fields=('notification', 'channel', 'number'), name='unique_notification_attempt'),
                ),
                migrations.AddConstraint(
                    model_name='review',
                    constraint=models.UniqueConstraint(condition=models.Q(('status', 'open')), fields=('ticket', 'reason'), name='one_open_review_per_reason'),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
    ]
