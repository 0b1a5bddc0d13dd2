"""Property-based fuzzing of the REST API with schemathesis: no generated request gets a 5xx.

The schema is the one the app serves (``/api/schema/``, drf-spectacular), and every request goes
in-process through the WSGI application, signed in as an admin by session cookie, against a
database seeded with backends, routes, runs and tickets in several states. Generated ids, names
and slugs are swapped for seeded ones half of the time, so requests get past "not found" too.
A stateful run then follows links (added here: drf-spectacular declares none) from the list
endpoints to the objects they return and on through the ticket's actions.

Requests run on the test's own database connection, inside its transaction, as the Django test
client's do; so Django's ``close_old_connections`` handlers are detached for the run (closing the
connection mid-transaction would break every later request; the test client detaches them for the
same reason) and no ``transaction=True`` is needed. Work a request leaves for after commit (Celery
messages) is therefore never sent.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Group, User
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client, TestCase, override_settings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test
from rest_framework.views import APIView
from schemathesis.checks import not_a_server_error

from backends import services as backend_services
from backends.models import Backend
from evaluators.imports.services import run_open_for_import
from evaluators.models import EvaluationRun
from gates.models import ReleaseTicket, TaskType
from gates.services import routing, signoff
from gates.services import tickets as services
from ledger.models import LedgerEntry
from optgate.wsgi import application
from tests.factories import backend_fields, decided, ticket_fields

# One process: the closing count of generated requests must see every fuzz test's (under xdist
# they would be split across workers and the count could not be checked).
pytestmark = pytest.mark.serial

# Schemathesis sends up to this many generated requests per operation in its fuzzing phase, after
# its deterministic coverage cases (boundary values, wrong types, missing fields, other methods).
EXAMPLES_PER_OPERATION = 30
MINIMUM_TOTAL_CASES = 1000
CSRF_TOKEN = "fuzzcsrf" * 4  # 32 letters: a well-formed, unmasked CSRF secret
SUPPRESSED = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture]

# Loaded at import: schemathesis' lazy ``from_fixture`` loader does not work with pytest 9.2.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
OPERATIONS = sum(1 for _ in schema.get_all_operations())

sent: Counter[str] = Counter()  # requests per operation
steps: Counter[str] = Counter()  # requests in linked sequences, per operation

# --- steering generation towards the seeded rows ---------------------------------------------------

# Values of the seeded rows, by the API resource (path parameters) or field name (bodies, queries)
# that refers to them; filled by ``seeded``. Random ids and names would almost always miss.
known: dict[str, list[Any]] = {}
_REFERENCES = {
    "baseline": "backend-names",
    "candidate": "backend-names",
    "rollback_target": "backend-names",
    "backend": "backend-names",
    "ticket": "tickets",
    "task": "task-types",
    "run": "runs",
}
_LIST_REFERENCES = {"tasks": "task-types", "beneficiary_tasks": "task-types", "risk_tasks": "task-types"}


def _sometimes_known(values: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Keep each generated value or swap in a seeded one that the field refers to."""
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for field, value in values.items():
        choices = known.get(_REFERENCES.get(field, ""))
        list_choices = known.get(_LIST_REFERENCES.get(field, ""))
        if choices:
            parts[field] = st.one_of(st.just(value), st.sampled_from(choices))
        elif list_choices:
            seeded_list = st.lists(st.sampled_from(list_choices), min_size=1, max_size=3, unique=True)
            parts[field] = st.one_of(st.just(value), seeded_list)
        else:
            parts[field] = st.just(value)
    return st.fixed_dictionaries(parts)


@schema.hook("flatmap_path_parameters")
def _seeded_path_parameters(context: Any, path_parameters: Any) -> st.SearchStrategy[Any]:
    choices = known.get(context.operation.path.split("/")[3])  # /api/v1/<resource>/{id}/...
    if not choices or not isinstance(path_parameters, dict) or len(path_parameters) != 1:
        return st.just(path_parameters)
    ((name, value),) = path_parameters.items()
    return st.fixed_dictionaries({name: st.one_of(st.just(value), st.sampled_from(choices))})


@schema.hook("flatmap_body")
def _seeded_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
    return _sometimes_known(body) if isinstance(body, dict) else st.just(body)


@schema.hook("flatmap_query")
def _seeded_query(context: Any, query: Any) -> st.SearchStrategy[Any]:
    return _sometimes_known(query) if isinstance(query, dict) else st.just(query)


# --- the database and the caller -------------------------------------------------------------


def _person(username: str, group: str) -> User:
    user = User.objects.create_user(username=f"fuzz-{username}", password="pw-" + username)
    user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


@pytest.fixture(scope="module")
def seeded(django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[User]:
    """Once per module (judging runs takes seconds): tickets in several states, routes and runs.

    The rows live in an outer transaction, as ``TestCase.setUpTestData``'s do, so each operation's
    test rolls back only its own changes and the module leaves the database as it found it.
    """
    root = tmp_path_factory.getbasetemp() / "models"
    root.mkdir(exist_ok=True)
    # What the autouse ``_isolated_settings`` sets for each test, needed here before the first one.
    isolated = override_settings(OPTGATE_MODEL_ROOTS=[root.resolve()], OPTGATE_VALIDATE_WITH_VLLM=False)
    with django_db_blocker.unblock(), isolated:
        # The atomic blocks setUpClass opens for setUpTestData (durable=True services nest in them).
        atomics = TestCase._enter_atomics()  # type: ignore[attr-defined]
        try:
            admin, engineer, reviewer = (
                _person("ada", "admin"),
                _person("erin", "engineer"),
                _person("rita", "reviewer"),
            )
            baseline, _ = backend_services.backend_register(actor=engineer, **backend_fields(root, "fuzz-bf16"))
            candidate, _ = backend_services.backend_register(
                actor=engineer,
                **backend_fields(root, "fuzz-prefix-cache", engine_args={"enable_prefix_caching": True, "seed": 0}),
            )
            for task in ("cs_summary", "code_assistant", "knowledge_qa"):
                routing.routes_set(task=task, backend=baseline, actor=admin, reason="initial fleet")
            services.ticket_create(owner=engineer, **ticket_fields(baseline, candidate))  # a draft
            submitted = services.ticket_create(owner=engineer, **ticket_fields(baseline, candidate, title="Second try"))
            services.ticket_submit(ticket=submitted, actor=engineer)
            decided("restrict", engineer, baseline, candidate)  # evaluated, waiting for sign-off
            approved = decided("approve", engineer, baseline, candidate)
            signoff.signoff_record(
                ticket=approved, actor=reviewer, verdict="approve", reason_code="evidence_sufficient"
            )
            routing.routes_start_canary(ticket=approved, actor=engineer)
            run_open_for_import(backend=candidate, tasks=["cs_summary"], actor=engineer)
            known.update(
                {
                    "tickets": list(ReleaseTicket.objects.values_list("pk", flat=True)),
                    "backends": list(Backend.objects.values_list("pk", flat=True)),
                    "backend-names": list(Backend.objects.values_list("name", flat=True)),
                    "runs": list(EvaluationRun.objects.values_list("pk", flat=True)),
                    "ledger": list(LedgerEntry.objects.values_list("pk", flat=True)[:20]),
                    "task-types": list(TaskType.objects.values_list("slug", flat=True)),
                    "policies": ["default", "default@7"],
                    "users": list(User.objects.values_list("username", flat=True)),
                }
            )
            yield admin
            known.clear()
        finally:
            TestCase._rollback_atomics(atomics)  # type: ignore[attr-defined]


@pytest.fixture
def admin_cookies(seeded: User, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Session and CSRF cookies of the admin, with throttling off and the connection kept open."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
    # Views copy their throttle classes when DRF is imported, so the setting alone cannot undo them.
    monkeypatch.setattr(APIView, "get_throttles", lambda self: [])
    client = Client()
    client.force_login(seeded)
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield {"sessionid": client.cookies["sessionid"].value, "csrftoken": CSRF_TOKEN}
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _call_kwargs(cookies: dict[str, str]) -> dict[str, Any]:
    # An empty Authorization header carries no token, so the session cookie decides who calls.
    return {"headers": {"Authorization": "", "X-CSRFToken": CSRF_TOKEN}, "cookies": cookies}


# --- the fuzz tests ----------------------------------------------------------------------------


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=SUPPRESSED, derandomize=True)
def test_no_generated_request_gets_a_server_error(case: Any, admin_cookies: dict[str, str]) -> None:
    sent[case.operation.label] += 1
    case.call_and_validate(**_call_kwargs(admin_cookies), checks=[not_a_server_error])


def _link(operation_id: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation_id, "parameters": parameters}


_FIRST_ID, _ID = "$response.body#/results/0/id", "$response.body#/id"
_TICKET_ACTIONS = (
    "submit",
    "evaluate",
    "cancel_evaluation",
    "request_evidence",
    "sign_off",
    "start_canary",
    "promote",
    "roll_back",
    "resume_canary",
    "retire",
    "accept_evidence",
)
# (operation, status) → links: from the lists to their first item, and from a ticket to its actions.
LINKS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("v1_tickets_list", "200"): {
        "detail": _link("v1_tickets_retrieve", id=_FIRST_ID),
        "edit": _link("v1_tickets_partial_update", id=_FIRST_ID),
        "decision": _link("v1_tickets_decision_retrieve", id=_FIRST_ID),
        **{name: _link(f"v1_tickets_{name}_create", id=_FIRST_ID) for name in _TICKET_ACTIONS},
    },
    ("v1_tickets_retrieve", "200"): {name: _link(f"v1_tickets_{name}_create", id=_ID) for name in _TICKET_ACTIONS},
    ("v1_tickets_submit_create", "200"): {"evaluate": _link("v1_tickets_evaluate_create", id=_ID)},
    ("v1_tickets_evaluate_create", "202"): {"cancel": _link("v1_tickets_cancel_evaluation_create", id=_ID)},
    ("v1_runs_list", "200"): {
        "detail": _link("v1_runs_retrieve", id=_FIRST_ID),
        "evidence": _link("v1_runs_evidence_create", id=_FIRST_ID),
        "close": _link("v1_runs_close_create", id=_FIRST_ID),
    },
    ("v1_runs_create", "201"): {"evidence": _link("v1_runs_evidence_create", id=_ID)},
    ("v1_backends_list", "200"): {"detail": _link("v1_backends_retrieve", id=_FIRST_ID)},
    ("v1_ledger_list", "200"): {"detail": _link("v1_ledger_retrieve", id=_FIRST_ID)},
    ("v1_users_list", "200"): {
        name: _link(f"v1_users_{name}", username="$response.body#/results/0/username")
        for name in ("retrieve", "grant_create", "revoke_create")
    },
}


def _linked_schema() -> Any:
    raw = copy.deepcopy(schema.raw_schema)
    operations = {
        op["operationId"]: op for path in raw["paths"].values() for op in path.values() if "operationId" in op
    }
    for (operation_id, status), links in LINKS.items():
        response = operations[operation_id]["responses"].setdefault(status, {"description": ""})
        response["links"] = {name: link for name, link in links.items() if link["operationId"] in operations}
    linked = schemathesis.openapi.from_dict(raw)
    linked.app = application  # what from_wsgi sets: call the application in-process
    return linked


@pytest.mark.django_db
def test_no_sequence_of_linked_requests_gets_a_server_error(admin_cookies: dict[str, str]) -> None:
    cookies = admin_cookies

    class Workflow(_linked_schema().as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return _call_kwargs(cookies)

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            steps[case.operation.label] += 1
            case.validate_response(response, checks=[not_a_server_error], transport_kwargs=kwargs)

    run_state_machine_as_test(
        Workflow,
        settings=settings(
            max_examples=20, stateful_step_count=6, deadline=None, suppress_health_check=SUPPRESSED, derandomize=True
        ),
    )
    assert sum(steps.values()) > 0


def test_the_fuzzer_sent_enough_cases() -> None:
    # pytest-django runs this test (no database) after the fuzz tests above.
    if len(sent) < OPERATIONS:
        pytest.skip(f"only {len(sent)} of the {OPERATIONS} operations were fuzzed in this session")
    total = sum(sent.values())
    print(
        f"schemathesis sent {total} generated requests over {OPERATIONS} operations, "
        f"and {sum(steps.values())} more in linked sequences"
    )
    assert total >= MINIMUM_TOTAL_CASES, sent
