"""A/A calibration on real vLLM-on-CPU engines with the shipped kit: ``manage.py calibrate --wait``
starts two engines of one backend, measures them interleaved, and keeps the floors.

Greedy decoding over the same weights answers the same: the two sides (almost) never disagree.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from gates.models import Calibration, CalibrationStatus
from gates.selectors.calibrations import current_calibration
from tests.factories import register_kit_backend
from tools.kit import Kit

# Engines start in threads that write to the database: a real transaction, task types restored after.
pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_kit_backend_calibrated_against_itself_has_floors_and_no_discordance(
    kit: Kit, settings: Any, erin: User, tmp_path: Any
) -> None:
    settings.OPTGATE_MODEL_ROOTS = [kit.root]
    settings.OPTGATE_ARTIFACTS_DIR = tmp_path
    settings.OPTGATE_LOAD_PROFILE = {"open_loop_requests": 0}  # a small profile: 24 requests, no open loop
    backend = register_kit_backend(kit, erin, "kit-base")
    out = io.StringIO()
    call_command("calibrate", backend.name, "--tasks", "code_assistant", "--requests", "24", "--wait", stdout=out)
    print(out.getvalue())  # the floors, for the record of the run

    calibration = Calibration.objects.get()
    assert calibration.status == CalibrationStatus.FINISHED, calibration.error
    assert current_calibration(backend) == calibration
    floors = calibration.floors["code_assistant"]
    for metric in ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50", "e2e_p95", "output_throughput", "goodput"):
        assert metric in floors and floors[metric] >= 0, (metric, floors)
    counted = calibration.discordance["code_assistant"]
    assert counted["paired"] == 100  # the whole shipped suite, answered on both sides
    assert counted["rate"] <= 0.02, counted  # greedy: the same answers on both engines
    assert "code_assistant" in out.getvalue() and "±" in out.getvalue()
