"""Forms of the web UI, and the ticket-form presets per mechanism.

Forms only parse shapes (numbers, choices, JSON); every business rule lives in the services, whose
``InvalidInput`` field errors are put back onto the form's fields by ``base.apply_service_errors``.
"""
