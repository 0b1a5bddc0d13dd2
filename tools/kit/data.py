"""Training data for the kit: the business suites' own samples (``<suite>/samples.jsonl``).

The kit's models are trained on exactly the rows the suites evaluate, because their job is to be
*good enough to regress*: a base model that passes most samples, so that a degraded variant shows
up as a measurable drop on real scorers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# tools/kit/data.py -> evaluators/suites
DEFAULT_SUITES_DIR = Path(__file__).resolve().parents[2] / "evaluators" / "suites"
SAMPLES_FILE = "samples.jsonl"


@dataclass(frozen=True)
class Example:
    """One training row: a single user message and its gold answer."""

    task: str
    id: str
    prompt: str
    target: str
    row: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the full row, for scorers


def discover_data_files(suites_dir: Path = DEFAULT_SUITES_DIR) -> list[Path]:
    """Every ``<suite>/samples.jsonl`` under ``suites_dir``, sorted so hashing is stable."""
    return sorted(suites_dir.glob(f"*/{SAMPLES_FILE}"))


def load_examples(data_files: list[Path]) -> list[Example]:
    """Read the rows of each file; the task slug is the file's folder name.

    A row without ``prompt`` or ``target`` is a data bug, so it raises instead of being skipped.
    """
    examples: list[Example] = []
    for path in data_files:
        task = path.parent.name
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            try:
                prompt, target = row["prompt"], row["target"]
            except KeyError as missing:
                raise ValueError(f"{path}:{line_no} has no {missing} field") from None
            if not isinstance(prompt, str) or not isinstance(target, str):
                raise ValueError(f"{path}:{line_no}: prompt and target must be strings")
            example_id = str(row.get("id", f"{task}-{line_no}"))
            examples.append(Example(task=task, id=example_id, prompt=prompt, target=target, row=row))
    if not examples:
        raise ValueError(f"no training rows in {[str(p) for p in data_files]}")
    return examples
