"""Sign the ledger's head now and append the checkpoint to the checkpoint directory (JSON lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.checkpoints import checkpoint_write, signing_key_generate


class Command(BaseCommand):
    help = (
        "Write a signed checkpoint of the ledger head to OPTGATE_LEDGER_CHECKPOINT_DIR (or --dir); "
        "--new-key FILE creates a signing key instead."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dir", type=Path, help="append to this directory instead of OPTGATE_LEDGER_CHECKPOINT_DIR"
        )
        parser.add_argument(
            "--new-key",
            type=Path,
            metavar="FILE",
            help="write a new Ed25519 signing key to FILE and print its public key",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["new_key"] is not None:
            try:
                public_key = signing_key_generate(options["new_key"])
            except FileExistsError:
                raise CommandError(f"{options['new_key']} exists; a key is never overwritten") from None
            self.stdout.write(f"public key: {public_key}")
            return
        try:
            checkpoint, path = checkpoint_write(directory=options["dir"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"checkpoint #{checkpoint.seq} signed by key {checkpoint.key_id}, appended to {path}")
