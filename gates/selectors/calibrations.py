"""Reads of A/A calibrations: which one is current for a backend, and what the judge takes from it.

A calibration speaks for the configuration it measured. It is **current** for a backend only when
it finished and its fingerprint, engine version and hardware class are the backend's, and no newer
finished one of the same backend exists; any other is **expired**, with the reason. Backends are
immutable, so an engine upgrade or a move to other hardware registers a new backend: its page shows
the old configuration's calibration as expired (engine version or hardware changed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backends.models import Backend
from gates.judge.noise import NoiseFloor
from gates.models import Calibration, CalibrationStatus


def calibration_expiry(calibration: Calibration, backend: Backend) -> str:
    """Why ``calibration`` does not hold for ``backend`` now ("" when it matches its configuration)."""
    changes = [
        f"{label} changed from {then} to {now}"
        for label, then, now in (
            ("engine version", calibration.engine_version, backend.engine_version),
            ("hardware class", calibration.hardware_class, backend.hardware_class),
        )
        if then != now
    ]
    if not changes and calibration.fingerprint != backend.fingerprint:
        changes.append("the serving configuration (fingerprint) changed")
    return "; ".join(changes)


def current_calibration(backend: Backend) -> Calibration | None:
    """The newest finished calibration that measured exactly this backend's configuration."""
    return (
        Calibration.objects.filter(
            backend=backend,
            status=CalibrationStatus.FINISHED,
            fingerprint=backend.fingerprint,
            engine_version=backend.engine_version,
            hardware_class=backend.hardware_class,
        )
        .order_by("-created_at", "-id")
        .first()
    )


def calibration_noise(backend: Backend) -> dict[str, NoiseFloor]:
    """The judge's input: per task, the noise floors of ``backend``'s current calibration (or none)."""
    calibration = current_calibration(backend)
    if calibration is None:
        return {}
    source = f"A/A calibration #{calibration.pk} of {backend.name}"
    return {task: NoiseFloor(source=source, floors=floors) for task, floors in (calibration.floors or {}).items()}


@dataclass(frozen=True)
class CalibrationRow:
    """A calibration as the backend page and the API show it."""

    calibration: Calibration
    state: str  # current | expired | measuring | failed
    why: str

    def to_dict(self) -> dict[str, Any]:
        c = self.calibration
        return {
            "id": c.pk,
            "backend": c.backend.name,
            "state": self.state,
            "why": self.why,
            "status": c.status,
            "fingerprint": c.fingerprint,
            "engine_version": c.engine_version,
            "hardware_class": c.hardware_class,
            "tasks": list(c.tasks),
            "baseline_run": c.baseline_run_id,
            "candidate_run": c.candidate_run_id,
            "floors": c.floors,
            "discordance": c.discordance,
            "task_errors": c.task_errors,
            "error": c.error,
            "requested_by": c.requested_by.get_username() if c.requested_by else None,
            "created_at": c.created_at.isoformat(),
            "finished_at": c.finished_at.isoformat() if c.finished_at else None,
        }


def _same_serving(a: Backend, b: Backend) -> bool:
    """The same weights, arguments and sampling: the same configuration on another engine or hardware."""
    return (a.model_id, a.model_revision, a.engine_args, a.sampling_params) == (
        b.model_id,
        b.model_revision,
        b.engine_args,
        b.sampling_params,
    )


def calibration_row(calibration: Calibration, backend: Backend, current: Calibration | None) -> CalibrationRow:
    """``calibration`` read for ``backend`` (whose current calibration is ``current``): current,
    expired (and why), measuring or failed."""
    if calibration.status == CalibrationStatus.MEASURING:
        return CalibrationRow(calibration, "measuring", "its two engines are being measured")
    if calibration.status == CalibrationStatus.FAILED:
        return CalibrationRow(calibration, "failed", calibration.error)
    why = calibration_expiry(calibration, backend)
    if calibration.backend_id != backend.pk and not why:
        why = f"measured on backend {calibration.backend.name}"
    if not why and current is not None and current.pk != calibration.pk:
        why = f"superseded by calibration #{current.pk}"
    return CalibrationRow(calibration, "expired" if why else "current", why)


def backend_calibrations(backend: Backend, *, limit: int = 10) -> list[CalibrationRow]:
    """The calibrations that speak for ``backend``'s configuration, newest first: its own, and those
    of the same weights and arguments on another engine version or hardware (shown expired)."""
    candidates = Calibration.objects.filter(
        backend__model_id=backend.model_id, backend__model_revision=backend.model_revision
    ).select_related("backend", "requested_by")[: limit * 4]
    related = [c for c in candidates if c.backend_id == backend.pk or _same_serving(c.backend, backend)]
    current = current_calibration(backend)
    return [calibration_row(c, backend, current) for c in related[:limit]]
