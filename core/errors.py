"""Domain exceptions shared by every app; the API maps each type to one HTTP status."""

from __future__ import annotations


class DomainError(Exception):
    """A request that conflicts with the current state (illegal transition, duplicate): HTTP 409."""


class InvalidInput(Exception):
    """Input that fails a business rule. ``errors`` maps a field name to a message: HTTP 400."""

    def __init__(self, errors: dict[str, str] | str, field: str = "non_field_errors") -> None:
        self.errors = errors if isinstance(errors, dict) else {field: errors}
        super().__init__("; ".join(f"{key}: {value}" for key, value in self.errors.items()))


class NotAllowed(Exception):
    """The actor may not perform this operation (role, separation of duties): HTTP 403."""
