"""Grant or revoke a role or a reviewer capacity through the ledgered service."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import group_grant, group_revoke
from core.errors import DomainError, InvalidInput
from core.roles import GRANTABLE_GROUPS


class Command(BaseCommand):
    help = "Grant (or with --revoke take away) a role or reviewer capacity; each change is a ledger entry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("group", choices=GRANTABLE_GROUPS)
        parser.add_argument("--revoke", action="store_true", help="take the group away instead of granting it")
        parser.add_argument("--reason", default="", help="recorded in the ledger entry")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}; create it with create_user")
        change = group_revoke if options["revoke"] else group_grant
        try:
            changed = change(actor=None, user=user, group=options["group"], reason=options["reason"])
        except (InvalidInput, DomainError) as exc:
            raise CommandError(str(exc)) from None
        verb = "revoked" if options["revoke"] else "granted"
        if changed:
            self.stdout.write(f"{verb} {options['group']} for {user.get_username()}")
        else:
            self.stdout.write(
                f"nothing to do: {user.get_username()} {'lacks' if options['revoke'] else 'has'} {options['group']}"
            )
