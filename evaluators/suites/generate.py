"""Regenerate the committed suite data: ``python -m evaluators.suites.generate [--check] [slug ...]``.

With ``--check`` nothing is written; the exit status is 1 when a committed file
differs from what the generator produces (a CI guard against hand-edited data).
With ``--check-held-out`` every held-out sample's reference is scored by its suite's scorer
(the unit tests score a sample of code_assistant's); the exit status is 1 when one fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from evaluators.suites import SUITES, get_suite


def stale_files(slug: str) -> list[Path]:
    """Return the suite's files whose committed content differs from a fresh build."""
    suite = get_suite(slug)
    stale: list[Path] = []
    for name, text in suite.build_files().items():
        path = suite.folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def write_suite(slug: str) -> list[Path]:
    """Write the suite's generated files into its folder; return the paths written."""
    suite = get_suite(slug)
    written: list[Path] = []
    for name, text in suite.build_files().items():
        path = suite.folder / name
        # newline="\n" keeps the bytes identical on every platform.
        with path.open("w", encoding="ascii", newline="\n") as fh:
            fh.write(text)
        written.append(path)
    return written


def failing_held_out_references(slug: str) -> list[str]:
    """Ids of the held-out samples whose own target does not pass the suite's scorer in full."""
    suite = get_suite(slug)
    failing = []
    for sample in suite.held_out_samples():
        verdict = suite.score(sample, sample["target"])
        if not (verdict.passed and verdict.score == 1.0):
            failing.append(sample["id"])
    return failing


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("slugs", nargs="*", help="suites to regenerate (default: all)")
    parser.add_argument("--check", action="store_true", help="only report files that differ")
    parser.add_argument("--check-held-out", action="store_true", help="score every held-out reference")
    args = parser.parse_args(argv)
    slugs = args.slugs or list(SUITES)
    status = 0
    for slug in slugs:
        if args.check_held_out:
            started = time.perf_counter()
            failing = failing_held_out_references(slug)
            seconds = time.perf_counter() - started
            print(f"{slug}: {len(failing)} failing held-out references ({seconds:.1f} s) {' '.join(failing[:10])}")
            status = 1 if failing else status
        elif args.check:
            for path in stale_files(slug):
                print(f"stale: {path}")
                status = 1
        else:
            for path in write_suite(slug):
                print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
