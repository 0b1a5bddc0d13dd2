"""Lining up per-sample values of the baseline and candidate runs.

Dicts are paired on the intersection of sample ids and the unmatched ids are reported; lists are
paired by position, the longer list's tail counting as unmatched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gates.judge.records import Samples


@dataclass(frozen=True)
class Pairing:
    base: list[Any]
    cand: list[Any]
    by_id: bool
    unmatched_base: tuple[str, ...] = ()
    unmatched_cand: tuple[str, ...] = ()

    def unmatched_counts(self) -> dict[str, int]:
        """How many samples of each side found no partner (a verdict's details)."""
        return {"unmatched_base": len(self.unmatched_base), "unmatched_cand": len(self.unmatched_cand)}


def pair_samples(base: Samples, cand: Samples) -> Pairing:
    """Pair per-sample values: dicts on the intersection of ids, lists by position."""
    if isinstance(base, Mapping) or isinstance(cand, Mapping):
        base_map = base if isinstance(base, Mapping) else {str(i): v for i, v in enumerate(base)}
        cand_map = cand if isinstance(cand, Mapping) else {str(i): v for i, v in enumerate(cand)}
        common = sorted(set(base_map) & set(cand_map), key=str)
        return Pairing(
            base=[base_map[k] for k in common],
            cand=[cand_map[k] for k in common],
            by_id=True,
            unmatched_base=tuple(sorted(str(k) for k in set(base_map) - set(cand_map))),
            unmatched_cand=tuple(sorted(str(k) for k in set(cand_map) - set(base_map))),
        )
    n = min(len(base), len(cand))
    return Pairing(
        base=list(base[:n]),
        cand=list(cand[:n]),
        by_id=False,
        unmatched_base=tuple(str(i) for i in range(n, len(base))),
        unmatched_cand=tuple(str(i) for i in range(n, len(cand))),
    )


def sample_values(samples: Samples) -> list[float]:
    """The values of a list or an id-keyed dict, as floats (order kept, ids dropped)."""
    return [float(v) for v in (samples.values() if isinstance(samples, Mapping) else samples)]


def scalar(value: float | Sequence[float] | None) -> float | None:
    """One figure from one measurement or the mean of several (None when there are none)."""
    if value is None:
        return None
    if isinstance(value, Sequence):
        return sum(value) / len(value) if len(value) else None
    return float(value)
