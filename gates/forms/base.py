"""What every form of the UI shares."""

from __future__ import annotations

from django import forms


def apply_service_errors(form: forms.Form, errors: dict[str, str], mapping: dict[str, str] | None = None) -> None:
    """Show an ``InvalidInput``'s field errors next to the matching form fields."""
    mapping = mapping or {}
    for key, message in errors.items():
        name = mapping.get(key, key)
        if name in form.fields:
            form.add_error(name, message)
        else:
            prefix = "" if key == "non_field_errors" else f"{key.replace('_', ' ')}: "
            form.add_error(None, f"{prefix}{message}")
