"""Create (or update) a user with one of the roles, optionally issuing and printing an API token."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import api_token_replace_named, user_save
from core.errors import InvalidInput
from core.roles import ROLES


class Command(BaseCommand):
    help = "Create or update a user with a role (engineer, reviewer, admin)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", help="set this password (otherwise the user cannot sign in to the UI)")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--token",
            action="store_true",
            help="issue an API token named 'default' (replacing an earlier one) and print its key, shown only now",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user, created = user_save(
                actor=None,
                username=options["username"],
                role=options["role"],
                email=options["email"],
                password=options["password"],
            )
        except InvalidInput as exc:
            raise CommandError("; ".join(f"{field}: {message}" for field, message in exc.errors.items())) from None
        username = user.get_username()
        self.stdout.write(f"{'created' if created else 'updated'} {options['role']} {username}")
        if options["token"]:
            # Keys are stored hashed, so an existing one cannot be shown again: issue a fresh one.
            issued = api_token_replace_named(actor=None, user=user, name="default")
            self.stdout.write(f"token: {issued.key}")
