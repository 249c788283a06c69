"""The 23 scrambled orders of a four-unit expression (paper §3, "full non-identity permutation
space"; release notes §1).

Label the canonical's units A B C D by position. The 23 patterns are the non-identity
permutations of ABCD in lexicographic order (ABDC … DCBA) — the order of the release's
full-permutation files (whose column headers are shifted by one; the contents follow this rule).
The unperturbed run uses the identity pattern :data:`IDENTITY` (``ABCD``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

__all__ = [
    "CANONICAL_PAIRS",
    "IDENTITY",
    "PATTERNS",
    "apply_pattern",
    "kept_adjacent_pairs",
]

IDENTITY = "ABCD"
#: the 23 non-identity permutations of ABCD, lexicographic (index 0 = ABDC, 22 = DCBA)
PATTERNS: tuple[str, ...] = tuple("".join(p) for p in itertools.permutations(IDENTITY) if "".join(p) != IDENTITY)
#: canonical adjacent pairs (A·B, B·C, C·D)
CANONICAL_PAIRS = ("AB", "BC", "CD")


def apply_pattern(units: Sequence[str], pattern: str) -> str:
    """The units written in the order ``pattern`` gives (``apply_pattern("爱莫能助", "ABDC")`` →
    ``"爱莫助能"``). Raises ``ValueError`` unless there are 4 units and ``pattern`` is a
    permutation of ABCD."""
    if len(units) != 4:
        raise ValueError(f"apply_pattern: expected 4 units, got {len(units)} ({list(units)!r})")
    if sorted(pattern) != list(IDENTITY):
        raise ValueError(f"apply_pattern: {pattern!r} is not a permutation of ABCD")
    return "".join(units[IDENTITY.index(ch)] for ch in pattern)


def kept_adjacent_pairs(pattern: str) -> int:
    """How many of the canonical adjacent pairs (AB, BC, CD) the pattern keeps adjacent and in
    order (0–3; 3 only for the identity). Paper App. Table 23 ("retained local adjacency")."""
    return sum(1 for i in range(3) if pattern[i : i + 2] in CANONICAL_PAIRS)
