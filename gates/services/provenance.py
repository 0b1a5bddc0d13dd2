"""Accepting evidence the ticket's owner imported: the step the policy asks for before such
evidence may approve anything (``evidence.owner_imported: inform``)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from core.errors import DomainError, InvalidInput, NotAllowed
from core.roles import REVIEWER, Actor, has_role, person
from evaluators.models import EvaluationRun
from gates.models import EvidenceAcceptance, ReleaseTicket
from gates.selectors.evidence import owner_imported_unaccepted, ticket_runs
from ledger.services import ledger_append


def evidence_accept(*, ticket: ReleaseTicket, run: EvaluationRun, actor: Actor, reason: str) -> EvidenceAcceptance:
    """A reviewer other than the owner (and other than whoever imported it) accepts the owner's
    imported evidence in ``run`` for this ticket, saying why; ledgered as ``ticket.evidence_accepted``."""
    user = person(actor)
    if user is None or not has_role(user, REVIEWER):
        raise NotAllowed("imported evidence is accepted by reviewers")
    if user.pk in (ticket.owner_id, run.imported_by_id):
        raise NotAllowed("the ticket's owner, who imported this evidence, cannot accept it")
    if not reason.strip():
        raise InvalidInput({"reason": "say why this imported evidence can be trusted"})
    with transaction.atomic(durable=True):
        locked = ReleaseTicket.objects.select_for_update().get(pk=ticket.pk)
        runs = dict(ticket_runs(locked))
        if run.pk not in {r.pk for r in runs.values()}:
            raise InvalidInput({"run": f"run #{run.pk} is not evidence of ticket #{locked.pk}"})
        if not owner_imported_unaccepted(locked, [run]):
            raise DomainError(f"run #{run.pk} needs no acceptance: not imported by the owner, or accepted already")
        try:
            with transaction.atomic():
                acceptance = EvidenceAcceptance.objects.create(ticket=locked, run=run, accepted_by=user, reason=reason)
        except IntegrityError:
            raise DomainError(f"run #{run.pk} was accepted concurrently") from None
        ledger_append(
            kind="ticket.evidence_accepted",
            subject_type="ticket",
            subject_id=locked.pk,
            subject_name=locked.title,
            actor=user,
            payload={
                "run": run.pk,
                "role": next(role for role, r in runs.items() if r.pk == run.pk),
                "imported_by": run.imported_by.get_username() if run.imported_by else None,
                "reason": reason,
            },
        )
    return acceptance
