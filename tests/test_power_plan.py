"""The power plan at filing (issue 18): per task the paired samples its margin needs, the suite
available and the engine time, on the form, the ticket page and the API; and the refusal of a ticket
whose margin no suite can settle, when the policy says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from backends.models import Backend
from core.errors import InvalidInput
from evaluators.models import EvaluationAttempt, EvaluationRun, RunStatus, TaskResult
from gates.judge.power import exact_sequential, plan_task, sized_design
from gates.judge.sequential import POCOCK
from gates.judge.staged import task_looks
from gates.models import Calibration, CalibrationStatus, ReleaseTicket, TicketStatus
from gates.policy.parse import load_policy, validate_policy_text
from gates.policy.rules import PolicyError
from gates.selectors.plan import (
    DEFAULT_SECONDS_PER_PAIR,
    seconds_per_pair,
    stored_ticket_plan,
    task_discordance,
    ticket_plan,
)
from gates.services import tickets as services
from ledger.models import LedgerEntry
from tests.factories import store_run, task_spec, tasks, ticket_fields
from tests.ui_helpers import client_for
from tools.demo.fleet import demo_ticket_fields

pytestmark = pytest.mark.django_db

SQL = "dataagent_nl2sql"


def passes(n: int, fails_at: frozenset[int] | set[int] = frozenset()) -> list[bool]:
    return [i not in fails_at for i in range(n)]


def history(backend: Backend, task: str, *, differ: int, n: int = 100) -> tuple[EvaluationRun, EvaluationRun]:
    """Two measured runs of ``backend`` on ``task`` whose outcomes differ on ``differ`` of ``n`` samples."""
    older = store_run(backend, {task: task_spec(passes(n))})
    newer = store_run(backend, {task: task_spec(passes(n, set(range(differ))))})
    return older, newer


def sql_ticket(baseline: Backend, candidate: Backend, **overrides: Any) -> dict[str, Any]:
    return ticket_fields(
        baseline, candidate, beneficiary_tasks=tasks("cs_summary"), risk_tasks=tasks(SQL, "tool_calling"), **overrides
    )


def policy_file(tmp_path: Path, settings: Any, refuse: str) -> None:
    text = load_policy("default").source
    assert text is not None
    strict = tmp_path / f"plan-{refuse}.yaml"
    strict.write_text(Path(text).read_text().replace("refuse_unsettleable: measured", f"refuse_unsettleable: {refuse}"))
    settings.OPTGATE_GATE_POLICY = str(strict)


# --- the numbers --------------------------------------------------------------------------------


def test_it_plans_each_task_with_the_policys_design_at_its_margins(draft: ReleaseTicket) -> None:
    """The plan sizes with the design the staged evaluation is judged with (default@7: five looks,
    Pocock-type spending both ways, power 80 %), computed here directly with ``plan_task``."""
    policy = load_policy("default")
    assert (policy.sequential.looks, policy.sequential.alpha_spending, policy.sequential.futility) == (
        5,
        "pocock",
        "pocock",
    )
    plan = stored_ticket_plan(ticket=draft, policy=policy)

    assert plan.design == "5 looks, Lan–DeMets Pocock-type alpha spending, Lan–DeMets Pocock-type futility, power 80%"
    assert [(t.task, t.role) for t in plan.tasks] == [("knowledge_qa", "beneficiary"), ("compliance_qa", "risk")]
    for task, suite_size in (("knowledge_qa", 1_100), ("compliance_qa", 1_200)):
        shown = next(t for t in plan.tasks if t.task == task)
        rule = next(r for r in policy.tasks[task].guardrails if r.metric == "pass_rate")
        direct = plan_task(
            margin=rule.margin or 0.0,
            confidence=rule.confidence,
            power=0.8,
            discordance=0.05,
            looks=5,
            alpha_spending=POCOCK,
            beta_spending=POCOCK,
            suite_size=suite_size,
        )
        assert (shown.margin, shown.confidence, shown.suite_size) == (rule.margin, rule.confidence, suite_size)
        assert (shown.power.fixed_n, shown.power.max_n, shown.power.look_sizes, shown.power.settleable) == (
            direct.fixed_n,
            direct.max_n,
            direct.look_sizes,
            direct.settleable,
        )
        # Expected pairs and engine time are the staged evaluation's: its looks, a neutral change.
        looks = shown.stage_looks
        exact = exact_sequential(
            sized_design(direct, looks), looks, margin=rule.margin or 0.0, p_loss=0.025, p_gain=0.025
        )
        assert shown.expected_pairs == pytest.approx(exact.mean_samples)
        assert shown.expected_engine_s == pytest.approx(exact.mean_samples * DEFAULT_SECONDS_PER_PAIR)
        assert shown.max_engine_s == pytest.approx(looks[-1] * DEFAULT_SECONDS_PER_PAIR)
        assert (shown.discordance, shown.discordance_source) == (0.05, "default")
    compliance = plan.tasks[1].to_dict()
    # 2 points at the assumed 5 %: more than the 1,200 compliance samples, but only assumed, so no refusal.
    assert (compliance["max_n"], compliance["settleable"], compliance["refused"]) == (1577, False, False)
    # Where default@7's staged evaluation looks: the shipped 200, then four held-out stages of 250
    # toward the design's 1,577, cut at the 1,200 the suite holds; at most those 1,200 are evaluated.
    assert compliance["stage_looks"] == [200, 450, 700, 950, 1200]
    assert compliance["most_pairs"] == 1200
    assert 700 < compliance["expected_n"] < 950  # most neutral changes settle at look 3 or 4


def test_the_expected_pairs_are_what_the_judges_looks_take_on_a_neutral_change(draft: ReleaseTicket) -> None:
    """The plan's expected pairs against the judge's own looks (``task_looks`` over drawn outcomes):
    400 neutral changes to the knowledge task at 5 % discordance, each looked at stage by stage until
    a look settles."""
    policy = load_policy("default")
    shown = next(t for t in stored_ticket_plan(ticket=draft, policy=policy).tasks if t.task == "knowledge_qa")
    rule = next(r for r in policy.tasks["knowledge_qa"].guardrails if r.metric == "pass_rate")
    rng = np.random.default_rng(18)
    used = []
    for _ in range(400):
        base: dict[str, bool] = {}
        cand: dict[str, bool] = {}
        for look, n in enumerate(shown.stage_looks, start=1):
            first = len(base)
            draws = rng.choice(3, size=n - first, p=(0.025, 0.025, 0.95))  # lost, gained, the same
            for i, draw in enumerate(draws, start=first):
                base[f"s{i}"], cand[f"s{i}"] = draw != 1, draw != 0
            stages = [
                ({k: base[k] for k in keys}, {k: cand[k] for k in keys}) for keys in _blocks(shown.stage_looks[:look])
            ]
            looks = task_looks(policy.sequential, rule, stages, shown.stage_looks, discordance=0.05)
            if looks.last.outcome != "continue":
                used.append(n)
                break
    mean = sum(used) / len(used)
    spread = float(np.std(used)) / len(used) ** 0.5
    assert abs(mean - shown.expected_pairs) < 3 * spread, (mean, shown.expected_pairs, spread)


def _blocks(sizes: tuple[int, ...]) -> list[list[str]]:
    bounds = (0, *sizes)
    return [[f"s{i}" for i in range(bounds[k], bounds[k + 1])] for k in range(len(sizes))]


def test_the_plan_shows_the_looks_of_shipped_size_stages_where_a_policy_keeps_them(
    draft: ReleaseTicket, tmp_path: Path
) -> None:
    """Under ``sequential.stage_size: shipped`` (default@6's) the looks stop at five shipped suites,
    short of what the plan says the margin needs: the plan shows it."""
    text = Path(load_policy("default").source or "").read_text()
    path = tmp_path / "shipped.yaml"
    path.write_text(text.replace("  stage_size: planned\n", "  stage_size: shipped\n"))
    plan = stored_ticket_plan(ticket=draft, policy=load_policy(str(path)))
    looks = {task.task: task.stage_looks for task in plan.tasks}
    assert looks == {"knowledge_qa": (100, 200, 300, 400, 500), "compliance_qa": (200, 400, 600, 800, 1000)}


def test_the_discordance_comes_from_the_baselines_history_when_it_has_two_measured_runs(baseline: Backend) -> None:
    older, newer = history(baseline, SQL, differ=3)

    rate, source = task_discordance(backend=baseline, task=SQL) or (None, "")

    assert rate == pytest.approx(0.03)
    assert source == f"baseline history: runs #{older.pk} and #{newer.pk}, 3 of 100 samples differ"
    plan = ticket_plan(policy=load_policy("default"), baseline=baseline, tasks=[(SQL, "risk")])
    assert plan.tasks[0].discordance_source == source
    at_three = plan_task(margin=0.02, discordance=0.03, looks=5, alpha_spending=POCOCK, beta_spending=POCOCK)
    assert plan.tasks[0].power.max_n == at_three.max_n == 1056  # the 1,100 samples settle it


def test_a_current_a_a_calibration_comes_before_the_history(baseline: Backend) -> None:
    older, newer = history(baseline, SQL, differ=3)
    calibration = Calibration.objects.create(
        backend=baseline,
        fingerprint=baseline.fingerprint,
        engine_version=baseline.engine_version,
        hardware_class=baseline.hardware_class,
        tasks=[SQL],
        baseline_run=older,
        candidate_run=newer,
        status=CalibrationStatus.FINISHED,
        discordance={SQL: {"rate": 0.01, "discordant": 2, "paired": 200}},
    )
    rate, source = task_discordance(backend=baseline, task=SQL) or (None, "")
    assert rate == 0.01 and source == f"A/A calibration #{calibration.pk}: 2 of 200 samples differ"
    # A calibration of an older engine version no longer speaks for this backend.
    Calibration.objects.filter(pk=calibration.pk).update(engine_version="0.0.1")
    history_source = f"baseline history: runs #{older.pk} and #{newer.pk}, 3 of 100 samples differ"
    assert task_discordance(backend=baseline, task=SQL) == (pytest.approx(0.03), history_source)


def test_reused_answers_and_short_history_fall_back_to_the_default(baseline: Backend) -> None:
    assert task_discordance(backend=baseline, task=SQL) is None  # no runs
    store_run(baseline, {SQL: task_spec(passes(100))})
    assert task_discordance(backend=baseline, task=SQL) is None  # one run
    copied = store_run(baseline, {SQL: task_spec(passes(100, {1, 2}))})
    # A run that copied an earlier run's greedy answers measured nothing: it is not A/A evidence.
    TaskResult.objects.filter(run=copied, task=SQL).update(quality={"reused_from_run": copied.pk - 1})
    assert task_discordance(backend=baseline, task=SQL) is None
    store_run(baseline, {SQL: task_spec(passes(50))})
    assert task_discordance(backend=baseline, task=SQL) is None  # 50 common samples are too few

    plan = ticket_plan(policy=load_policy("default"), baseline=baseline, tasks=[(SQL, "risk")])
    assert (plan.tasks[0].discordance, plan.tasks[0].discordance_source) == (0.05, "default")


def test_engine_time_per_pair_comes_from_the_baselines_timed_run(baseline: Backend) -> None:
    assert seconds_per_pair(backend=baseline, task=SQL) == (DEFAULT_SECONDS_PER_PAIR, "default")
    run = store_run(baseline, {SQL: task_spec(passes(100))})
    EvaluationAttempt.objects.create(run=run, number=1, status=RunStatus.SUCCEEDED, timings={f"{SQL}_s": 40.0})

    # A run of the baseline alone timed one side: the candidate's side costs as much again.
    assert seconds_per_pair(backend=baseline, task=SQL) == (0.8, f"run #{run.pk}: 40 s for 100 samples")


# --- refusal ------------------------------------------------------------------------------------


def test_a_ticket_whose_margin_the_measured_discordance_cannot_settle_is_refused_and_nothing_is_stored(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    history(baseline, SQL, differ=5)
    before = (ReleaseTicket.objects.count(), LedgerEntry.objects.count())

    with pytest.raises(InvalidInput) as refused:
        services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))

    message = refused.value.errors["risk_tasks"]
    assert message.startswith(
        "dataagent_nl2sql: a 2-point margin on SQL execution accuracy at 95% needs up to 1,577 paired samples "
        "at 5.0% discordance (baseline history: runs #"
    )
    assert "the suite has 1,100 (100 shipped + 1,000 held out)" in message
    assert "power_plan.refuse_unsettleable: measured" in message
    assert "tool_calling" not in message and set(refused.value.errors) == {"risk_tasks"}  # 3 points settle
    assert (ReleaseTicket.objects.count(), LedgerEntry.objects.count()) == before


def test_submission_refuses_a_draft_the_baselines_history_no_longer_lets_settle(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    draft = services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))
    history(baseline, SQL, differ=6)

    with pytest.raises(
        InvalidInput, match=r"dataagent_nl2sql: a 2-point margin .* needs up to 1,848 paired samples at 6\.0%"
    ):
        services.ticket_submit(ticket=draft, actor=erin)

    draft.refresh_from_db()
    assert draft.status == TicketStatus.DRAFT
    assert not LedgerEntry.objects.filter(kind="ticket.submitted").exists()


def test_an_edit_that_adds_an_unsettleable_task_is_refused(erin: User, baseline: Backend, candidate: Backend) -> None:
    draft = services.ticket_create(owner=erin, **ticket_fields(baseline, candidate, risk_tasks=tasks("tool_calling")))
    history(baseline, SQL, differ=5)

    with pytest.raises(InvalidInput, match="dataagent_nl2sql: a 2-point margin"):
        services.ticket_update(ticket=draft, actor=erin, risk_tasks=tasks("tool_calling", SQL))

    assert [t.slug for t in draft.risk_tasks.all()] == ["tool_calling"]
    services.ticket_update(ticket=draft, actor=erin, title="a title edit does not re-plan")


def test_filing_and_submission_ledger_the_plan_they_passed(erin: User, baseline: Backend, candidate: Backend) -> None:
    draft = services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))
    services.ticket_submit(ticket=draft, actor=erin)

    filed = LedgerEntry.objects.get(kind="ticket.filed").payload["power_plan"]
    submitted = LedgerEntry.objects.get(kind="ticket.submitted").payload["details"]["power_plan"]
    for plan in (filed, submitted):
        assert plan["policy"] == "default@7" and not plan["refused"]
        assert [(t["task"], t["max_n"], t["suite_size"]) for t in plan["tasks"]] == [
            ("cs_summary", 318, 1100),
            (SQL, 1577, 1100),
            ("tool_calling", 756, 1100),
        ]


def test_a_policy_that_refuses_always_refuses_on_the_assumed_default(
    erin: User, baseline: Backend, candidate: Backend, settings: Any, tmp_path: Path
) -> None:
    policy_file(tmp_path, settings, "always")
    with pytest.raises(InvalidInput, match=r"dataagent_nl2sql: .* at 5\.0% discordance \(default\)"):
        services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))


def test_a_policy_that_never_refuses_files_despite_measured_discordance(
    erin: User, baseline: Backend, candidate: Backend, settings: Any, tmp_path: Path
) -> None:
    policy_file(tmp_path, settings, "never")
    history(baseline, SQL, differ=10)
    ticket = services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))
    plan = stored_ticket_plan(ticket=ticket, policy=load_policy(settings.OPTGATE_GATE_POLICY))
    assert [(t.task, t.power.settleable, t.refused) for t in plan.tasks if t.task == SQL] == [(SQL, False, False)]


def test_the_demos_three_tickets_are_not_refused_under_the_default_policy(
    erin: User, make_backend: Callable[..., Backend]
) -> None:
    names = ("kit-bf16", "kit-bf16-prefix-cache", "low-bit", "kit-bf16-ngram")
    fleet = {name: make_backend(name, model_revision=f"rev-{name}") for name in names}

    for fields in demo_ticket_fields(fleet):
        ticket = services.ticket_create(owner=erin, **fields)
        assert services.ticket_submit(ticket=ticket, actor=erin).status == TicketStatus.SUBMITTED

    low_bit = stored_ticket_plan(
        ticket=ReleaseTicket.objects.get(title="Low-bit weights for the whole fleet"), policy=load_policy("default")
    )
    assert [(t.task, t.power.max_n, t.power.settleable, t.refused) for t in low_bit.tasks] == [
        ("cs_summary", 318, True, False),
        (SQL, 1577, False, False),  # only assumed: a warning, not a refusal
        ("tool_calling", 756, True, False),
    ]


# --- the policy's section -----------------------------------------------------------------------


def test_the_default_policy_states_its_plan_rule() -> None:
    policy = load_policy("default")
    assert policy.version_label == "default@7"
    assert (policy.power_plan.discordance_default, policy.power_plan.refuse_unsettleable) == (0.05, "measured")


@pytest.mark.parametrize(
    ("section", "path"),
    [
        ("power_plan: {refuse_unsettleable: sometimes}", "power_plan.refuse_unsettleable: must be one of"),
        ("power_plan: {discordance_default: 0}", "power_plan.discordance_default: must be a number between"),
        ("power_plan: {discordance: 0.1}", "power_plan.discordance: unknown key"),
    ],
)
def test_a_bad_plan_section_is_refused_naming_its_field(section: str, path: str) -> None:
    text = Path(load_policy("default").source or "").read_text()
    start = text.index("power_plan:")
    end = text.index("\n\n", start)
    with pytest.raises(PolicyError, match=path.replace(".", r"\.")):
        validate_policy_text(text[:start] + section + text[end:])


# --- API and pages ------------------------------------------------------------------------------


def test_the_api_shows_the_plan_and_the_schema_names_it(
    api_for: Callable[[User | None], APIClient], rita: User, erin: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))

    response = api_for(rita).get(f"/api/v1/tickets/{ticket.pk}/plan/")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "policy",
        "design",
        "discordance_default",
        "refuse_unsettleable",
        "tasks",
        "unplanned",
        "expected_engine_s",
        "max_engine_s",
        "refused",
    }
    sql = next(t for t in body["tasks"] if t["task"] == SQL)
    assert (sql["metric"], sql["margin"], sql["max_n"], sql["look_sizes"]) == (
        "pass_rate",
        0.02,
        1577,
        [316, 631, 947, 1262, 1577],
    )
    # Where default@7's staged evaluation looks, and what it takes at most: the pool cuts it at 1,100.
    assert (sql["stage_looks"], sql["most_pairs"]) == ([100, 350, 600, 850, 1100], 1100)
    assert sql["max_engine_s"] == pytest.approx(1100 * DEFAULT_SECONDS_PER_PAIR)
    assert body["design"].startswith("5 looks, Lan–DeMets Pocock-type alpha spending")
    assert body["max_engine_s"] == pytest.approx(sum(t["max_engine_s"] for t in body["tasks"]))
    schema = api_for(rita).get("/api/schema/?format=json").json()
    plan_schema = schema["paths"]["/api/v1/tickets/{id}/plan/"]["get"]["responses"]["200"]
    assert plan_schema["content"]["application/json"]["schema"]["$ref"].endswith("/TicketPlan")


def test_the_ticket_page_shows_the_plan_before_evaluation(erin: User, baseline: Backend, candidate: Backend) -> None:
    ticket = services.ticket_create(owner=erin, **sql_ticket(baseline, candidate))

    page = client_for(erin).get(f"/tickets/{ticket.pk}/").content.decode()

    assert 'id="power-plan"' in page
    assert "dataagent_nl2sql <span" in page and "1,067 / 1,577" in page  # fixed / at most
    assert "100, 350, 600, 850, 1,100 (753)" in page  # the looks (pairs expected)
    assert "5 looks, Lan–DeMets Pocock-type alpha spending" in page
    assert "at the assumed discordance" in page
    assert "is the policy's assumed default, not a measurement" in page


def test_the_form_previews_the_plan_of_the_chosen_baseline_and_tasks(erin: User, baseline: Backend) -> None:
    client = client_for(erin)
    empty = client.get("/tickets/plan-preview/").content.decode()
    assert "Choose the baseline and the tasks" in empty

    query: dict[str, Any] = {
        "baseline": baseline.pk,
        "beneficiary_tasks": ["cs_summary"],
        "risk_tasks": ["tool_calling"],
    }
    preview = client.get("/tickets/plan-preview/", query).content.decode()

    assert "cs_summary <span" in preview and "tool_calling <span" in preview
    assert "215 / 318" in preview and "512 / 756" in preview  # fixed / at most
    assert "100, 155, 210, 265, 320 (183)" in preview and "100, 264, 428, 592, 756 (441)" in preview
    assert "hx-get" in client.get("/tickets/new/").content.decode()
