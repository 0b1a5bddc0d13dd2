# Backends move out of the ledger app. The table stays where it is (``ledger_backend``): this only
# moves the model in Django's migration state, and renames its content type so permissions and
# admin history follow it. ledger 0002 then drops the model from the ledger app's state.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def rename_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="ledger", model="backend").update(app_label="backends")


def restore_content_type(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="backends", model="backend").update(app_label="ledger")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("contenttypes", "0002_remove_content_type_name"),
        ("ledger", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Backend",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.SlugField(max_length=100, unique=True)),
                        ("model_id", models.CharField(help_text="Model identity, e.g. Qwen/Qwen3-32B-AWQ", max_length=200)),
                        ("model_path", models.CharField(help_text="Local weights directory under an allowed model root", max_length=500)),
                        ("model_revision", models.CharField(help_text="Revision or checksum of the weights", max_length=128)),
                        ("engine", models.CharField(default="vllm", max_length=40)),
                        ("engine_version", models.CharField(max_length=40)),
                        ("engine_args", models.JSONField(default=dict)),
                        ("sampling_params", models.JSONField(default=dict)),
                        ("prefix_cache_key_recipe", models.JSONField(default=dict)),
                        ("gpu_pool", models.CharField(blank=True, max_length=100)),
                        ("hardware_class", models.CharField(max_length=100)),
                        ("model_card", models.JSONField(default=dict)),
                        ("fingerprint", models.CharField(editable=False, max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("created_by", models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name="+", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "ledger_backend",
                        "ordering": ["-created_at", "-id"],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(rename_content_type, restore_content_type),
    ]
