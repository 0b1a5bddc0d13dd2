"""``python -m evaluators.kit build [--force] [--json]``: build or reuse the kit and describe it."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from .build import Kit, ensure_kit


def describe(kit: Kit) -> str:
    """Human-readable summary: where each variant lives and how accurate it measured."""
    manifest = kit.manifest
    lines = [
        f"kit {kit.hash[:16]} at {kit.root}",
        f"  built in {manifest['build_seconds']}s, training loss {manifest['training']['final_loss']}, "
        f"degraded variant: {kit.degraded}",
    ]
    for name, path in kit.variants.items():
        accuracy = manifest["variants"][name].get("accuracy")
        lines.append(f"  {name:8s} {path}  sha256 {kit.revision(name)[:12]}")
        if accuracy:
            tasks = "  ".join(f"{task}={value['accuracy']:.2f}" for task, value in accuracy["per_task"].items())
            lines.append(f"           accuracy {accuracy['overall']:.3f}  {tasks}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluators.kit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the kit unless a valid one for this tree is cached")
    build.add_argument("--force", action="store_true", help="rebuild even when a valid kit exists")
    build.add_argument("--json", action="store_true", help="print the manifest as JSON instead of a summary")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    kit = ensure_kit(force=args.force)
    print(json.dumps({"root": str(kit.root), **kit.manifest}, indent=2) if args.json else describe(kit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
