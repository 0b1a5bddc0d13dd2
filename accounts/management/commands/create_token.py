"""Issue an API token for a user and print its key (shown this once; only its hash is stored)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from accounts.services import api_token_issue, api_token_replace_named
from core.errors import InvalidInput


class Command(BaseCommand):
    help = (
        "Issue an API token for USER and print the key (only now: it is stored hashed). "
        "--rotate first revokes the user's live tokens of the same --name."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="default", help="what the token is for (default: default)")
        parser.add_argument("--rotate", action="store_true", help="revoke the live tokens of this name first")
        parser.add_argument("--expires-in-days", type=int, default=None, help="no expiry when omitted")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named {options['username']!r}")
        days = options["expires_in_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        expires_at = timezone.now() + timedelta(days=days) if days else None
        # actor=None: the system, i.e. an operator with shell access to the server.
        issue = api_token_replace_named if options["rotate"] else api_token_issue
        try:
            issued = issue(actor=None, user=user, name=options["name"], expires_at=expires_at)
        except InvalidInput as exc:
            raise CommandError("; ".join(f"{field}: {message}" for field, message in exc.errors.items())) from None
        # The key alone on stdout, so `OPTGATE_TOKEN=$(manage.py create_token ci-bot)` works.
        self.stdout.write(issued.key)
