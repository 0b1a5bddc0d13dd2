"""The house rules that keep the apps one-way: the import contracts in pyproject.toml (import-linter).

Each test runs ``lint-imports`` on a copy of the product's packages, so a planted import proves the
contract catches what it is meant to catch, not just that today's code happens to pass.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "core",
    "ledger",
    "accounts",
    "backends",
    "evaluators",
    "gates",
    "workers",
    "tools",
    "optgate",
    "optgate_cli",
)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The product's packages and the contracts, copied (Python sources only)."""
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.jsonl", "*.safetensors")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(tree: Path, module: str, line: str) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def test_a_copy_of_the_tree_keeps_the_contracts(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_upward_import_breaks_the_layers(tree: Path) -> None:
    # The evaluators know nothing of tickets: reading one from there is an import from a layer above.
    plant(tree, "evaluators/selectors.py", "from gates.models import ReleaseTicket  # noqa")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "Apps import downwards only" in result.stdout and "BROKEN" in result.stdout
    assert "evaluators.selectors -> gates.models" in result.stdout


def test_a_function_level_import_is_an_import_too(tree: Path) -> None:
    plant(tree, "ledger/services.py", "def _later() -> None:\n    from workers import tasks  # noqa")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "ledger.services -> workers.tasks" in result.stdout


def test_a_cycle_between_modules_of_one_app_breaks_the_contract(tree: Path) -> None:
    # gates.services.tickets is below gates.services.evaluation; importing back makes a cycle.
    plant(tree, "gates/services/tickets.py", "from gates.services import evaluation  # noqa")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "No import cycles between the modules of a package BROKEN" in result.stdout


def test_the_cli_may_not_import_the_server(tree: Path) -> None:
    plant(tree, "optgate_cli/client.py", "from core.errors import DomainError  # noqa")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "The CLI speaks to OptGate over HTTP only BROKEN" in result.stdout
