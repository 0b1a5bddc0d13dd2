from __future__ import annotations

from django.db import migrations

# The six workloads of the source chapter (§7.1–7.5), with the risk tier their failures carry.
TASK_TYPES = [
    ("cs_summary", "Customer-service summaries", "medium",
     "Throughput-bound JSON summaries of support conversations; wording may change, facts may not."),
    ("knowledge_qa", "Knowledge assistant", "high",
     "Long-context, prefill-bound answers over shared documents; must cite the right passage."),
    ("dataagent_nl2sql", "DataAgent NL2SQL", "high",
     "Questions turned into SQL; structured-output correctness, may cost more but must not regress."),
    ("code_assistant", "Code assistant", "medium", "Decode-latency-bound code generation checked by unit tests."),
    ("compliance_qa", "Compliance Q&A", "high", "Refusal boundary: disallowed requests refused, allowed ones answered."),
    ("tool_calling", "Tool calling", "medium", "JSON tool arguments that must validate against the tool's schema."),
]

ROLES = ["engineer", "reviewer", "admin"]


def seed(apps, schema_editor):
    TaskType = apps.get_model("gates", "TaskType")
    for slug, name, tier, description in TASK_TYPES:
        TaskType.objects.update_or_create(
            slug=slug,
            defaults={
                "name": name,
                "risk_tier": tier,
                "description": description,
                "suite_ref": f"evaluators/suites/{slug}",
                "suite_version": "1",
            },
        )
    Group = apps.get_model("auth", "Group")
    for role in ROLES:
        Group.objects.get_or_create(name=role)
    LedgerHead = apps.get_model("ledger", "LedgerHead")
    LedgerHead.objects.get_or_create(id=1, defaults={"seq": 0, "hash": ""})


class Migration(migrations.Migration):
    dependencies = [
        ("gates", "0001_initial"),
        ("ledger", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
