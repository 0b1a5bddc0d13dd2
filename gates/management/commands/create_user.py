"""Create (or update) a user with one of the roles, optionally issuing and printing an API token."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from gates.tokens import api_token_replace_named
from optgate.roles import ROLES


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
        User = get_user_model()
        username = options["username"].strip()
        if not username:
            raise CommandError("username must not be empty")
        with transaction.atomic():
            user, created = User.objects.get_or_create(username=username, defaults={"email": options["email"]})
            if options["password"]:
                user.set_password(options["password"])
            user.is_staff = options["role"] == "admin"
            user.is_superuser = options["role"] == "admin"
            user.save()
            user.groups.add(Group.objects.get(name=options["role"]))
        self.stdout.write(f"{'created' if created else 'updated'} {options['role']} {username}")
        if options["token"]:
            # Keys are stored hashed, so an existing one cannot be shown again: issue a fresh one.
            issued = api_token_replace_named(actor=None, user=user, name="default")
            self.stdout.write(f"token: {issued.key}")
