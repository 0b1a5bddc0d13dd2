"""``python -m tools.kit [--rebuild [--ship]] [--json]``: the kit in use, or a rebuild compared with it.

Without options it describes the kit :func:`ensure_kit` hands out (the shipped one on a fresh
checkout; nothing is trained). ``--rebuild`` trains a kit from scratch into the cache and says
whether it matches the shipped manifest (exit 0) or not (exit 1); ``--ship`` then makes the
rebuild the shipped kit under ``kit/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from .build import ensure_kit
from .manifest import SHIPPED_DIR, Kit, read_manifest
from .ship import compare_with_shipped, ship_kit


def describe(kit: Kit) -> str:
    """Human-readable summary: where each variant lives and how accurate it measured."""
    manifest = kit.manifest
    origin = "shipped with the repository" if kit.root == SHIPPED_DIR else "built on this machine"
    lines = [
        f"kit {kit.hash[:16]} at {kit.root} ({origin})",
        f"  built in {manifest['build_seconds']}s, training loss {manifest['training']['final_loss']}, "
        f"low-bit variant: {kit.degraded} ({manifest['degraded_reason']})",
    ]
    for name, path in kit.variants.items():
        accuracy = manifest["variants"][name].get("accuracy")
        lines.append(f"  {name:8s} {path}  sha256 {kit.revision(name)[:12]}")
        if accuracy:
            tasks = "  ".join(f"{task}={value['accuracy']:.2f}" for task, value in accuracy["per_task"].items())
            lines.append(f"           accuracy {accuracy['overall']:.3f}  {tasks}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kit", description=__doc__)
    parser.add_argument("--rebuild", action="store_true", help="train a kit from scratch and compare it")
    parser.add_argument("--ship", action="store_true", help="with --rebuild: replace the shipped kit with the rebuild")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON instead of a summary")
    args = parser.parse_args(argv)
    if args.ship and not args.rebuild:
        parser.error("--ship needs --rebuild")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    kit = ensure_kit(force=args.rebuild)
    print(json.dumps({"root": str(kit.root), **kit.manifest}, indent=2) if args.json else describe(kit))
    if not args.rebuild:
        return 0
    shipped = read_manifest(SHIPPED_DIR)
    status = 0
    if shipped is None:
        print(f"no shipped kit in {SHIPPED_DIR} to compare with")
    else:
        comparison = compare_with_shipped(kit, shipped)
        print("\ncompared with the shipped kit:")
        print("\n".join(f"  {line}" for line in comparison.lines))
        print(comparison.verdict)
        status = 0 if comparison.equivalent else 1
    if args.ship:
        shipped_kit = ship_kit(kit, SHIPPED_DIR)
        print(f"shipped {', '.join(shipped_kit.variants)} to {SHIPPED_DIR}")
        status = 0
    return status


if __name__ == "__main__":
    sys.exit(main())
