"""Backends: immutable, routable serving configurations identified by their fingerprint."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from core.canonical import canonical_json, sha256_hex
from ledger.models import ImmutableModel


class Backend(ImmutableModel):
    """One routable serving configuration: weights, engine, engine arguments, sampling, hardware.

    Changing any serving field means registering a new Backend; the fingerprint identifies the
    configuration independently of its human name.
    """

    name = models.SlugField(max_length=100, unique=True)
    model_id = models.CharField(max_length=200, help_text="Model identity, e.g. Qwen/Qwen3-32B-AWQ")
    model_path = models.CharField(max_length=500, help_text="Local weights directory under an allowed model root")
    model_revision = models.CharField(max_length=128, help_text="Revision or checksum of the weights")
    engine = models.CharField(max_length=40, default="vllm")
    engine_version = models.CharField(max_length=40)
    engine_args = models.JSONField(default=dict)
    sampling_params = models.JSONField(default=dict)
    prefix_cache_key_recipe = models.JSONField(default=dict)
    gpu_pool = models.CharField(max_length=100, blank=True)
    hardware_class = models.CharField(max_length=100)
    model_card = models.JSONField(default=dict)
    fingerprint = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The table keeps the name it had when backends lived in the ledger app.
        db_table = "ledger_backend"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.name

    def serving_config(self) -> dict[str, Any]:
        """The fields that define what is served; the fingerprint is computed over exactly these."""
        return {
            "model_id": self.model_id,
            "model_path": self.model_path,
            "model_revision": self.model_revision,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "engine_args": self.engine_args,
            "sampling_params": self.sampling_params,
            "prefix_cache_key_recipe": self.prefix_cache_key_recipe,
            "gpu_pool": self.gpu_pool,
            "hardware_class": self.hardware_class,
        }

    def compute_fingerprint(self) -> str:
        return sha256_hex(canonical_json(self.serving_config()))


class ArgsCheckStatus(models.TextChoices):
    PENDING = "pending"
    PASSED = "passed"
    FAILED = "failed"  # vLLM's parser refused the arguments
    ERROR = "error"  # the check itself could not run (timeout, crash): not a verdict on the arguments


class EngineArgsCheck(models.Model):
    """vLLM's own parser's verdict on a backend's engine arguments.

    Importing vLLM's parser takes seconds, so registration does only the cheap catalogue checks and
    leaves this row ``pending``; a worker runs the parser (``backends.services.backend_args_check``)
    and records the verdict once: ``pending`` → ``passed`` | ``failed`` | ``error``.
    """

    backend = models.OneToOneField(Backend, on_delete=models.PROTECT, related_name="args_check")
    status = models.CharField(max_length=10, choices=ArgsCheckStatus.choices, default=ArgsCheckStatus.PENDING)
    errors = models.JSONField(default=dict, help_text="option → vLLM's message (failed), or the check's own error")
    created_at = models.DateTimeField(auto_now_add=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"engine-args check of {self.backend_id}: {self.status}"

    def shown(self) -> dict[str, Any]:
        """What the API and the backend page show of the check."""
        return {
            "status": self.status,
            "errors": self.errors,
            "checked_at": self.checked_at.isoformat() if self.checked_at else None,
        }
