"""``manage.py bench_loadgen``: compare our load generator with ``vllm bench serve`` on one engine."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tools import bench_loadgen


class Command(BaseCommand):
    help = "Launch a local model, run our load generator and vLLM's bench serve interleaved, print TTFT/TPOT ratios."

    def add_arguments(self, parser: CommandParser) -> None:
        # The options are declared once, in `python -m tools.bench_loadgen`; mirror them here.
        for action in bench_loadgen.build_parser()._actions:
            if action.dest == "help":
                continue
            kwargs: dict[str, Any] = {"dest": action.dest, "default": action.default, "help": action.help}
            if action.nargs == 0:
                kwargs["action"] = "store_true"
            else:
                kwargs.update(type=action.type, required=action.required)
            parser.add_argument(*action.option_strings, **kwargs)

    def handle(self, *args: Any, **options: Any) -> None:
        names = [a.dest for a in bench_loadgen.build_parser()._actions if a.dest != "help"]
        report = bench_loadgen.run_benchmark(argparse.Namespace(**{name: options[name] for name in names}))
        bench_loadgen.print_report(report)
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
