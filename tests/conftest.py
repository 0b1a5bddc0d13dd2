"""The test cast and shared fixtures.

Cast: ``erin`` the engineer who owns tickets, ``evan`` a second engineer, ``rita`` a platform
reviewer, ``bella`` a business-owner reviewer, ``ada`` an admin, and ``olga`` an outsider with no
role.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from accounts.services import api_token_issue
from backends import services as backend_services
from backends.models import Backend
from gates.models import ReleaseTicket
from gates.services import tickets as gate_services
from tests.factories import backend_fields, ticket_fields
from tools.kit import Kit, ensure_kit

# The demo's session-wide run and the evidence it measured, for the real-engine tests.
pytest_plugins = ["tests.demo_evidence", "tests.prometheus_server"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # schemathesis 4.32 makes one item per API operation, named ``test[GET /api/…]`` but with no
    # parametrization, and pytest 9.2 builds an item's node id from its parametrization: all fifty
    # fuzz tests of tests/test_api_fuzz.py got one id. pytest-xdist's file and group schedulers
    # (``--dist loadfile``, ``loadgroup``) key tests by id and ran one of the fifty; --lf and
    # --deselect mix them up too. The operation goes back into the id.
    for item in items:
        label = getattr(item, "operation_label", None)
        node_id = getattr(item, "_id", None)
        if label and node_id is not None and getattr(node_id, "params", "") is None:
            item._id = node_id.with_params(label)


@pytest.fixture(autouse=True)
def _isolated_settings(settings: Any, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    # Model paths in tests live under a private root; vLLM's own parser is exercised only by
    # the engine tests that ask for it, since importing vLLM costs seconds per call.
    root = tmp_path_factory.getbasetemp() / "models"
    root.mkdir(exist_ok=True)
    settings.OPTGATE_MODEL_ROOTS = [root.resolve()]
    # Engine logs and archived evidence go under runs/<id>/, and run ids restart with each test's
    # database: in the checkout's var/ two tests (or two pytest-xdist workers) would share files.
    settings.OPTGATE_ARTIFACTS_DIR = tmp_path / "artifacts"
    settings.OPTGATE_VALIDATE_WITH_VLLM = False
    # Rate limits stay on but out of reach; tests/test_rate_limits.py lowers them on purpose.
    settings.OPTGATE_RATE_LIMITS = {scope: "100000/min" for scope in settings.OPTGATE_RATE_LIMITS}
    # The cast's passwords are hashed with a deliberately cheap hasher: PBKDF2's million rounds
    # cost a third of a second per user and per sign-in, most of the suite's time otherwise.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def zombie() -> Iterator[subprocess.Popen[bytes]]:
    """A child that has exited but is not reaped yet: what a SIGKILLed process becomes where
    nobody waits for orphans. Its pid still answers ``kill(pid, 0)``."""
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    yield child
    child.wait()


@pytest.fixture
def model_root(settings: Any) -> Path:
    return Path(settings.OPTGATE_MODEL_ROOTS[0])


def _user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, email=f"{username}@example.com")
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def erin(db: None) -> User:
    return _user("erin", "engineer")


@pytest.fixture
def evan(db: None) -> User:
    return _user("evan", "engineer")


@pytest.fixture
def rita(db: None) -> User:
    return _user("rita", "reviewer")


@pytest.fixture
def bella(db: None) -> User:
    return _user("bella", "reviewer")


@pytest.fixture
def ada(db: None) -> User:
    user = _user("ada", "admin")
    return user


@pytest.fixture
def olga(db: None) -> User:
    return _user("olga", None)


@pytest.fixture
def api_for() -> Callable[[User | None], APIClient]:
    """An API client authenticated with a fresh API token of the user (or anonymous for None)."""

    def make(user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            key = api_token_issue(actor=None, user=user, name="tests").key
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client

    return make


@pytest.fixture(scope="session")
def kit() -> Kit:
    """The shipped model kit (checked against its manifest once per session)."""
    return ensure_kit()


@pytest.fixture
def make_backend(model_root: Path, erin: User) -> Callable[..., Backend]:
    def make(name: str, **overrides: Any) -> Backend:
        backend, _ = backend_services.backend_register(actor=erin, **backend_fields(model_root, name, **overrides))
        return backend

    return make


@pytest.fixture
def baseline(make_backend: Callable[..., Backend]) -> Backend:
    return make_backend("kit-bf16")


@pytest.fixture
def candidate(make_backend: Callable[..., Backend]) -> Backend:
    return make_backend(
        "kit-bf16-prefix-cache", engine_args={"max_model_len": 2048, "seed": 0, "enable_prefix_caching": True}
    )


@pytest.fixture
def draft(erin: User, baseline: Backend, candidate: Backend) -> ReleaseTicket:
    return gate_services.ticket_create(owner=erin, **ticket_fields(baseline, candidate))
