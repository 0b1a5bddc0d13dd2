"""A/A calibrations of a backend over the API.

``POST /api/v1/backends/{name}/calibrate/`` asks for one (engineers and admins; 202, measured by a
GPU worker), ``GET /api/v1/backends/{name}/calibrations/`` lists the ones that speak for the
backend's configuration, newest first, each current or expired with the reason.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.request import Request
from rest_framework.response import Response

from backends.models import Backend
from backends.selectors import backend_get
from core.api import StrictInputSerializer
from gates.selectors.calibrations import backend_calibrations, calibration_row, current_calibration
from gates.services.calibration import calibration_request


class CalibrateInputSerializer(StrictInputSerializer):
    tasks = serializers.ListField(
        child=serializers.SlugField(),
        required=False,
        allow_empty=False,
        help_text="task types to calibrate (default: every task type)",
    )
    load_profile = serializers.DictField(
        required=False,
        help_text='changes to the load tickets are measured with, e.g. {"requests_per_task": 100}',
    )


class CalibrationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    backend = serializers.CharField()
    state = serializers.ChoiceField(
        choices=["current", "expired", "measuring", "failed"],
        help_text="current only for the same fingerprint, engine version and hardware class, newest first",
    )
    why = serializers.CharField(help_text="why it is expired or failed; empty when current")
    status = serializers.CharField()
    fingerprint = serializers.CharField()
    engine_version = serializers.CharField()
    hardware_class = serializers.CharField()
    tasks = serializers.ListField(child=serializers.CharField())
    baseline_run = serializers.IntegerField()
    candidate_run = serializers.IntegerField()
    floors = serializers.DictField(help_text="task → metric → noise floor, a fraction on the judged scale")
    discordance = serializers.DictField(help_text="task → {rate, discordant, paired}")
    task_errors = serializers.DictField()
    error = serializers.CharField()
    requested_by = serializers.CharField(allow_null=True)
    created_at = serializers.CharField()
    finished_at = serializers.CharField(allow_null=True)


def _backend(name: str) -> Backend:
    backend = backend_get(name=name)
    if backend is None:
        raise Http404("no such backend")
    return backend


@extend_schema(request=CalibrateInputSerializer, responses={202: CalibrationSerializer})
@api_view(["POST"])
@permission_classes([permissions.IsAuthenticated])
def backend_calibrate(request: Request, name: str) -> Response:
    """Measure the backend against itself (two engines, interleaved) for its A/A noise floors."""
    backend = _backend(name)
    body = CalibrateInputSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    calibration = calibration_request(backend=backend, actor=request.user, **body.validated_data)
    row = calibration_row(calibration, backend, current_calibration(backend)).to_dict()
    return Response(CalibrationSerializer(row).data, status=status.HTTP_202_ACCEPTED)


@extend_schema(responses={200: CalibrationSerializer(many=True)})
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated])
def backend_calibration_list(request: Request, name: str) -> Response:
    """The calibrations that speak for the backend's configuration, newest first."""
    rows = [row.to_dict() for row in backend_calibrations(_backend(name))]
    return Response(CalibrationSerializer(rows, many=True).data)
