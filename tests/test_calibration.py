"""A/A calibration: requesting one, its floors from a finished pair, expiry, the judge, API, page, command.

The pair's evidence is stored the way ``evaluators.services`` stores an interleaved pair's (per-task
results with per-block throughput and per-request records keyed by sample id, per-sample records),
as a GPU worker would have left it.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from backends.models import Backend
from core.errors import InvalidInput, NotAllowed
from evaluators.interleave import BASELINE, CANDIDATE
from evaluators.models import EvaluationRun, RunStatus, SampleRecord, TaskResult
from gates.management.commands.calibrate import floors_table
from gates.models import Calibration, CalibrationStatus
from gates.selectors.calibrations import backend_calibrations, calibration_noise, current_calibration
from gates.selectors.summary import decision_summary, numbers_text
from gates.services import decisions
from gates.services.calibration import calibration_finish, calibration_request, calibrations_finish_for_run
from ledger.models import LedgerEntry
from tests.factories import captured_tasks, evaluating_ticket, store_run, task_spec, tasks
from tests.ui_helpers import client_for
from workers import sweeper

pytestmark = pytest.mark.django_db

N = 60
# What a copy of a calibration takes over (the backend page's query-count test adds copies).
COPIED = ("backend", "fingerprint", "engine_version", "hardware_class", "tasks", "baseline_run", "candidate_run")


def _store_side(run: EvaluationRun, task: str, *, jitter_seed: int, flips: int = 0) -> None:
    """One side of an A/A pair: the same prompts as the other side, timings off by a little noise."""
    prompts = np.random.default_rng(0)
    ttft, e2e = prompts.lognormal(np.log(0.3), 0.3, N), prompts.lognormal(np.log(2.0), 0.3, N)
    jitter = np.random.default_rng(jitter_seed).lognormal(0, 0.03, (3, N))
    requests = [
        {
            "sample_id": f"{task}-{i:04d}",
            "ttft_s": float(ttft[i] * jitter[0][i]),
            "tpot_s": float(e2e[i] * jitter[1][i] / 100),
            "itl_s": [float(e2e[i] * jitter[1][i] / 100)],
            "e2e_s": float(e2e[i] * jitter[1][i]),
            "output_tokens": 100,
            "error": None,
        }
        for i in range(N)
    ]
    blocks = [float(50.0 * j) for j in jitter[2][:8]]
    open_loop = {"blocks": [{}] * 4, "request_rate": 2.0, "requests": requests[:32], "engine": {}}
    TaskResult.objects.create(
        run=run,
        task=task,
        suite_version="1",
        requests=requests,
        performance={"blocks": [{}] * 8, "block_output_throughput": blocks, "open_loop": open_loop},
    )
    SampleRecord.objects.bulk_create(
        SampleRecord(run=run, task=task, sample_id=f"{task}-{i:04d}", prompt="", output="", passed=i >= flips, score=1)
        for i in range(N)
    )


def _measured(calibration: Calibration, *, flips: int = 0, status: str = RunStatus.SUCCEEDED) -> None:
    """What the GPU worker leaves behind: both runs finished, each task's evidence stored."""
    for run, seed in ((calibration.baseline_run, 1), (calibration.candidate_run, 2)):
        EvaluationRun.objects.filter(pk=run.pk).update(status=status, error="" if status == "succeeded" else "boom")
        if status == RunStatus.SUCCEEDED:
            for task in calibration.tasks:
                _store_side(run, task, jitter_seed=seed, flips=flips if seed == 2 else 0)


@pytest.fixture
def requested(baseline: Backend, erin: User) -> Calibration:
    with captured_tasks():
        return calibration_request(backend=baseline, tasks=["code_assistant"], actor=erin)


# --- requesting ----------------------------------------------------------------------------------


def test_it_asks_for_an_interleaved_pair_of_the_backend_against_itself(
    baseline: Backend, erin: User, django_capture_on_commit_callbacks: Any
) -> None:
    with captured_tasks() as sent, django_capture_on_commit_callbacks(execute=True):
        calibration = calibration_request(backend=baseline, tasks=["code_assistant"], actor=erin)
    base, cand = calibration.baseline_run, calibration.candidate_run
    assert base.backend_id == cand.backend_id == baseline.pk
    assert (base.pair_side, cand.pair_side, base.paired_run_id) == (BASELINE, CANDIDATE, cand.pk)
    # Both sides answer afresh: an earlier run's answers would hide the engines' own discordance.
    assert base.load_profile["reuse_quality"] is False
    assert [call.args for call in sent["run"].call_args_list] == [(cand.pk,)]  # one message for the pair
    assert (calibration.fingerprint, calibration.engine_version, calibration.hardware_class) == (
        baseline.fingerprint,
        baseline.engine_version,
        baseline.hardware_class,
    )
    entry = LedgerEntry.objects.get(kind="calibration.requested")
    assert entry.payload["calibration"] == calibration.pk and entry.actor_name == "erin"


def test_only_engineers_and_admins_ask_for_one(baseline: Backend, rita: User, olga: User) -> None:
    for person in (rita, olga):
        with pytest.raises(NotAllowed):
            calibration_request(backend=baseline, tasks=["code_assistant"], actor=person)
    assert not Calibration.objects.exists() and not EvaluationRun.objects.exists()


def test_bad_tasks_and_profiles_are_named(baseline: Backend, erin: User) -> None:
    with pytest.raises(InvalidInput) as bad_task:
        calibration_request(backend=baseline, tasks=["no_such_task"], actor=erin)
    assert "tasks" in bad_task.value.errors
    with pytest.raises(InvalidInput) as bad_profile:
        calibration_request(backend=baseline, tasks=None, actor=erin, load_profile={"concurency": 4})
    assert "concurency" in bad_profile.value.errors["load_profile"]


# --- finishing -----------------------------------------------------------------------------------


def test_floors_come_from_the_stored_pair(requested: Calibration) -> None:
    _measured(requested, flips=3)
    finished = calibration_finish(calibration_id=requested.pk)
    assert finished is not None
    assert finished.status == CalibrationStatus.FINISHED, finished.error
    floors = finished.floors["code_assistant"]
    for metric in ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50", "e2e_p95", "output_throughput", "goodput"):
        assert metric in floors, sorted(floors)
    assert "open_loop:ttft_p95" in floors and "open_loop:goodput" in floors
    # Per-prompt jitter of 3 % a side over 60 prompts: the ratio of medians stays within 10 % of one.
    assert 0 < floors["e2e_p50"] < 0.10
    assert finished.discordance["code_assistant"] == {"rate": 3 / N, "discordant": 3, "paired": N}
    assert floors["pass_rate"] == pytest.approx(3 / N)
    entry = LedgerEntry.objects.get(kind="calibration.finished")
    assert entry.payload["floors"]["code_assistant"]["e2e_p50"] == pytest.approx(floors["e2e_p50"])


def test_finishing_waits_for_both_runs_and_happens_once(requested: Calibration) -> None:
    assert calibration_finish(calibration_id=requested.pk).status == CalibrationStatus.MEASURING  # type: ignore[union-attr]
    _measured(requested)
    assert [c.status for c in calibrations_finish_for_run(run_id=requested.candidate_run_id)] == ["finished"]
    assert calibrations_finish_for_run(run_id=requested.baseline_run_id) == []  # nothing left measuring
    calibration_finish(calibration_id=requested.pk)
    assert LedgerEntry.objects.filter(kind="calibration.finished").count() == 1


def test_the_sweeper_finishes_a_calibration_whose_pair_ended_without_its_hook(requested: Calibration) -> None:
    assert sweeper.sweep().calibrated == []  # still measuring
    _measured(requested)
    assert sweeper.sweep().calibrated == [requested.pk]
    requested.refresh_from_db()
    assert requested.status == CalibrationStatus.FINISHED and requested.floors["code_assistant"]
    assert sweeper.sweep().calibrated == []


def test_a_run_that_failed_fails_the_calibration(requested: Calibration) -> None:
    _measured(requested, status=RunStatus.ERROR)
    failed = calibration_finish(calibration_id=requested.pk)
    assert failed is not None and failed.status == CalibrationStatus.FAILED
    assert "boom" in failed.error and failed.floors == {}
    assert current_calibration(requested.backend) is None
    assert LedgerEntry.objects.filter(kind="calibration.failed").count() == 1


# --- validity ------------------------------------------------------------------------------------


@pytest.fixture
def finished(requested: Calibration) -> Calibration:
    _measured(requested)
    done = calibration_finish(calibration_id=requested.pk)
    assert done is not None and done.status == CalibrationStatus.FINISHED
    return done


def test_a_finished_calibration_is_current_for_its_backend(finished: Calibration, baseline: Backend) -> None:
    assert current_calibration(baseline) == finished
    assert [(row.state, row.why) for row in backend_calibrations(baseline)] == [("current", "")]
    noise = calibration_noise(baseline)["code_assistant"]
    assert noise.floors == finished.floors["code_assistant"] and f"#{finished.pk}" in noise.source


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("engine_version", "0.33.0", "engine version changed from 0.32.0 to 0.33.0"),
        ("hardware_class", "h100-80g", "hardware class changed from cpu-avx2 to h100-80g"),
    ],
)
def test_an_engine_or_hardware_change_expires_it(
    finished: Calibration, make_backend: Any, field: str, value: str, why: str
) -> None:
    # Backends are immutable: the upgrade is a new backend with the same weights and arguments.
    upgraded = make_backend("kit-base-upgraded", **{field: value})
    assert current_calibration(upgraded) is None and calibration_noise(upgraded) == {}
    rows = backend_calibrations(upgraded)
    assert [(row.calibration, row.state, row.why) for row in rows] == [(finished, "expired", why)]


def test_a_calibration_of_another_configuration_is_expired(finished: Calibration, baseline: Backend) -> None:
    Calibration.objects.filter(pk=finished.pk).update(fingerprint="0" * 64)
    assert current_calibration(baseline) is None
    assert backend_calibrations(baseline)[0].why == "the serving configuration (fingerprint) changed"


def test_a_newer_calibration_supersedes_an_older_one(finished: Calibration, baseline: Backend, erin: User) -> None:
    with captured_tasks():
        newer = calibration_request(backend=baseline, tasks=["code_assistant"], actor=erin)
    _measured(newer)
    calibration_finish(calibration_id=newer.pk)
    assert current_calibration(baseline) == newer
    rows = {row.calibration.pk: (row.state, row.why) for row in backend_calibrations(baseline)}
    assert rows == {newer.pk: ("current", ""), finished.pk: ("expired", f"superseded by calibration #{newer.pk}")}


# --- the judge -----------------------------------------------------------------------------------


def _calibrated_ticket(erin: User, baseline: Backend, candidate: Backend, floor: float) -> Any:
    """knowledge_qa promises TTFT P50 −10 %; the candidate is 20 % faster on every prompt."""
    passed = [True] * 100
    base_run = store_run(baseline, {"knowledge_qa": task_spec(passed, seed=4)})
    cand_run = store_run(candidate, {"knowledge_qa": task_spec(passed, seed=4, speed=0.8)})
    Calibration.objects.create(  # a finished calibration of the baseline (its runs are test stand-ins)
        backend=baseline,
        fingerprint=baseline.fingerprint,
        engine_version=baseline.engine_version,
        hardware_class=baseline.hardware_class,
        tasks=["knowledge_qa"],
        baseline_run=base_run,
        candidate_run=base_run,
        status=CalibrationStatus.FINISHED,
        floors={"knowledge_qa": {"ttft_p50": floor, "ttft_p95": floor}},
    )
    return evaluating_ticket(
        erin, baseline, candidate, base_run, cand_run, beneficiary_tasks=tasks("knowledge_qa"), risk_tasks=[]
    )


def test_the_decision_does_not_count_a_benefit_inside_the_baselines_floor(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = _calibrated_ticket(erin, baseline, candidate, floor=0.3)
    decision = decisions.decision_make(ticket=ticket)
    objective = next(m for m in decision.verdicts["knowledge_qa"]["metrics"] if m["kind"] == "objective")
    assert objective["metric"] == "ttft_p50" and objective["status"] == "fail", objective["reason"]
    assert "within the A/A noise floor of ±30.0%" in objective["reason"]
    assert objective["details"]["noise_floor"] == 0.3
    assert decision.outcome == "reject"


def test_the_decision_shows_a_benefit_beyond_the_floor_against_it(
    erin: User, baseline: Backend, candidate: Backend
) -> None:
    ticket = _calibrated_ticket(erin, baseline, candidate, floor=0.05)
    decision = decisions.decision_make(ticket=ticket)
    objective = next(m for m in decision.verdicts["knowledge_qa"]["metrics"] if m["kind"] == "objective")
    assert objective["status"] == "pass", objective["reason"]
    row = next(t for t in decision_summary(decision)["tasks"] if t["task"] == "knowledge_qa")
    assert "A/A noise ±5.0%" in numbers_text(row["numbers"])


# --- API, page, command --------------------------------------------------------------------------


def test_the_api_asks_for_a_calibration(api_for: Any, baseline: Backend, erin: User) -> None:
    with captured_tasks():
        response = api_for(erin).post(
            f"/api/v1/backends/{baseline.name}/calibrate/", {"tasks": ["code_assistant"]}, format="json"
        )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["state"], body["tasks"], body["backend"]) == ("measuring", ["code_assistant"], baseline.name)
    listed = api_for(erin).get(f"/api/v1/backends/{baseline.name}/calibrations/").json()
    assert [row["id"] for row in listed] == [body["id"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tasks": ["no_such_task"]}, "tasks"),
        ({"tasks": []}, "tasks"),
        ({"task": ["code_assistant"]}, "task"),
        ({"load_profile": {"requests": 10}}, "load_profile"),
    ],
)
def test_the_api_names_bad_fields(api_for: Any, baseline: Backend, erin: User, body: Any, field: str) -> None:
    response = api_for(erin).post(f"/api/v1/backends/{baseline.name}/calibrate/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert not Calibration.objects.exists()


def test_the_api_refuses_reviewers_and_unknown_backends(api_for: Any, baseline: Backend, rita: User) -> None:
    response = api_for(rita).post(f"/api/v1/backends/{baseline.name}/calibrate/", {}, format="json")
    assert response.status_code == 403
    assert api_for(rita).post("/api/v1/backends/nope/calibrate/", {}, format="json").status_code == 404


def test_the_backend_page_shows_the_floors_and_the_button(finished: Calibration, baseline: Backend, erin: User) -> None:
    page = client_for(erin).get(f"/backends/{baseline.name}/").content.decode()
    assert f"Calibration #{finished.pk}" in page and ">current<" in page
    e2e = finished.floors["code_assistant"]["e2e_p50"]
    assert f"±{e2e * 100:.1f}%" in page
    assert "Calibrate (A/A)" in page


def test_the_backend_page_reads_its_calibrations_in_a_fixed_number_of_queries(
    finished: Calibration, baseline: Backend, erin: User
) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client_for(erin).get(f"/backends/{baseline.name}/").status_code == 200
        return len(captured)

    one = queries()
    for _ in range(3):
        Calibration.objects.create(**{f: getattr(finished, f) for f in COPIED}, status=CalibrationStatus.FINISHED)
    assert queries() == one


def test_the_button_asks_for_a_calibration(baseline: Backend, erin: User, rita: User) -> None:
    with captured_tasks():
        response = client_for(erin).post(f"/backends/{baseline.name}/calibrate/", {"tasks": ["code_assistant"]})
    assert response.status_code == 302 and response["Location"].endswith("#calibration")
    assert Calibration.objects.get().tasks == ["code_assistant"]
    assert "Calibrate (A/A)" not in client_for(rita).get(f"/backends/{baseline.name}/").content.decode()


def test_the_command_asks_for_one_and_prints_the_floors_table(
    baseline: Backend, django_capture_on_commit_callbacks: Any
) -> None:
    out = io.StringIO()
    with captured_tasks() as sent, django_capture_on_commit_callbacks(execute=True):
        call_command("calibrate", baseline.name, "--tasks", "code_assistant", "--requests", "24", stdout=out)
    calibration = Calibration.objects.get()
    assert f"calibration #{calibration.pk} of {baseline.name} requested" in out.getvalue()
    assert calibration.candidate_run.load_profile["requests_per_task"] == 24
    assert [call.args for call in sent["run"].call_args_list] == [(calibration.candidate_run_id,)]
    _measured(calibration, flips=6)
    table = floors_table(calibration_finish(calibration_id=calibration.pk))  # type: ignore[arg-type]
    line = next(row for row in table.splitlines() if row.startswith("code_assistant"))
    assert "10.0% (6/60)" in line and line.count("±") == 7


def test_the_command_names_an_unknown_backend_or_task(baseline: Backend) -> None:
    with pytest.raises(CommandError, match="no backend named 'nope'"):
        call_command("calibrate", "nope")
    with pytest.raises(CommandError, match="tasks"):
        call_command("calibrate", baseline.name, "--tasks", "no_such_task")
