"""Web UI of the gates app, one module per page or group of pages.

Views parse input with the forms in ``gates.forms``, read through ``gates.selectors`` and write
through ``gates.services``; they never save models. Service errors come back as pages
(``gates.views.errors``): ``InvalidInput`` as inline field errors (400), ``NotAllowed`` as 403 and
``DomainError`` as 409, each with the service's own message.

* ``dashboard`` — the signed-in user's starting page and its live evaluation-progress partial;
* ``tickets`` — ticket list, form, page, lifecycle actions and sign-off;
* ``evidence`` and ``decision`` — what the ticket page shows of the runs and of the gate decision;
* ``backends`` — the backend list, registration and a backend's page;
* ``calculator`` — the KV-cache calculator;
* ``routes`` — the route table;
* ``review_queue`` — reviews of active optimizations;
* ``errors`` — the refusal page for a service's 403 or 409.
"""
