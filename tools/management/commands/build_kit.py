"""``manage.py build_kit``: build (or reuse) the tiny model kit under ``settings.OPTGATE_KIT_DIR``."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from tools.kit import ensure_kit
from tools.kit.__main__ import describe


class Command(BaseCommand):
    help = "Build the tiny model kit (tokenizer, trained base model, rounded variants) or reuse the cached one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="rebuild even when a valid kit exists")
        parser.add_argument("--json", action="store_true", help="print the manifest as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        # The build logs its progress (training loss, accuracies) at INFO; show it on the console.
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        kit = ensure_kit(force=options["force"], cache_root=settings.OPTGATE_KIT_DIR)
        if options["json"]:
            self.stdout.write(json.dumps({"root": str(kit.root), **kit.manifest}, indent=2))
        else:
            self.stdout.write(describe(kit))
