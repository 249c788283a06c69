"""Evidence items -> semantic categories, with a per-dataset keyword lexicon (paper §5.1).

MR2 (evidence consistency) and evidence drift compare the *categories* of the evidence a model
cites, not its wording: "BP 165/95" and "systolic_bp_mmhg: 165" are both ``vital_sign``. Each
dataset has a lexicon, kept as data in ``metamorph/studies/format_robustness/data/lexicons/<dataset>.json``::

    {"dataset": "construct", "version": "1",
     "categories": {"vital_sign": ["blood pressure", "heart rate", "regex:spo2(?:_pct)?"], ...}}

Matching rules (:meth:`Lexicon.categories_for`):

* case-insensitive; the item's curly apostrophes are read as ``'``;
* a **keyword or phrase** matches as whole words: it may not start or end inside a word
  ("age" does not match "page" or "stage"); an underscore counts as a word separator, so
  "heart rate" matches ``heart_rate_bpm``. Between the words of a phrase any run of spaces,
  ``_`` or ``-`` (or none) is allowed ("x ray" matches "X-ray" and "xray"). The last word may
  carry a plural ``s``/``es`` ("symptom" matches "symptoms"); other inflections are written as
  regex entries;
* a ``regex:<pattern>`` entry is a Python regular expression matched the same way: it is wrapped
  in the same whole-word boundaries (a match that starts/ends with a letter or digit may not
  start/end inside a word; one that starts/ends with punctuation, like "/mm3" after "50,000", is
  free on that side), case-insensitive.

An item's categories are the sorted unique categories with at least one matching entry; an
item with none is *unmapped*. :meth:`Lexicon.mapping_rate` is the share of items with at least
one category (the paper reports > 90 % for its lexicons); it is ``None`` for zero items (no
rate is defined), never an error.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from metamorph.datasets import read_json_file
from metamorph.errors import InputError

__all__ = ["LEXICON_PACKAGE_DIR", "Lexicon", "available_lexicons", "compile_entry", "load_lexicon"]

#: Where the lexicons live inside the ``metamorph`` package.
LEXICON_PACKAGE_DIR = ("data", "lexicons")

_REGEX_PREFIX = "regex:"
# Whole-word boundaries that only bind where the match itself starts/ends with a letter or digit:
# a match starting with a letter/digit may not be preceded by one, and one ending with a
# letter/digit may not be followed by one ("age" never matches inside "page"); a match that
# starts or ends with punctuation ("/mm3", "°C") is free on that side ("50,000/mm3").
# Underscore and punctuation are separators.
_LEFT = r"(?:(?<![^\W_])|(?![^\W_]))"
_RIGHT = r"(?:(?![^\W_])|(?<![^\W_]))"
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")


def compile_entry(entry: str) -> re.Pattern[str]:
    """Compile one lexicon entry (keyword, phrase or ``regex:<pattern>``) to a pattern.

    Raises ``re.error`` for an invalid regex and ``ValueError`` for an empty entry.
    """
    if entry.startswith(_REGEX_PREFIX):
        body = entry[len(_REGEX_PREFIX) :]
        if not body.strip():
            raise ValueError("empty regex entry")
    else:
        words = entry.strip().split()
        if not words:
            raise ValueError("empty keyword")
        parts = [re.escape(w) for w in words]
        # Only a final letter may take a plural ending.
        tail = "(?:s|es)?" if words[-1][-1].isalpha() else ""
        body = r"[\s_\-]*".join(parts) + tail
    return re.compile(f"{_LEFT}(?:{body}){_RIGHT}", re.IGNORECASE)


def _normalise_item(item: str) -> str:
    t = unicodedata.normalize("NFKC", item)
    return t.replace("\u2019", "'").replace("\u2018", "'")


@dataclass(frozen=True)
class Lexicon:
    """A dataset's category lexicon: category -> entries, compiled once.

    Attributes:
        dataset: dataset name the lexicon is for.
        version: lexicon version string (recorded with every mapped item).
        categories: category -> its entries as written in the file.
        source: where it was loaded from (a path, or ``<memory>``).
    """

    dataset: str
    version: str
    categories: Mapping[str, tuple[str, ...]]
    source: str = "<memory>"
    _patterns: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...] = field(default=(), repr=False, compare=False)
    #: item -> its categories: an evidence item recurs across formats, repeats and routed re-runs
    #: (the same field quoted 12 times per instance), and every lookup runs every pattern
    _memo: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_mapping(cls, data: Any, source: str = "<memory>", expected_dataset: str | None = None) -> "Lexicon":
        """Build and validate a lexicon from the parsed file content.

        Raises :class:`~metamorph.errors.InputError` naming ``source`` and the offending field.
        """
        if not isinstance(data, dict):
            raise InputError(source, f"a lexicon is a JSON object, got {type(data).__name__}")
        for key in ("dataset", "version", "categories"):
            if key not in data:
                raise InputError(source, "missing key", field=key)
        dataset, version, cats = data["dataset"], data["version"], data["categories"]
        if not isinstance(dataset, str) or not dataset:
            raise InputError(source, f"expected a non-empty string, got {dataset!r}", field="dataset")
        if expected_dataset is not None and dataset != expected_dataset:
            raise InputError(
                source, f"lexicon is for dataset {dataset!r}, expected {expected_dataset!r}", field="dataset"
            )
        if not isinstance(version, str) or not version:
            raise InputError(source, f"expected a non-empty string, got {version!r}", field="version")
        if not isinstance(cats, dict) or not cats:
            raise InputError(source, "expected a non-empty object of category -> entries", field="categories")
        categories: dict[str, tuple[str, ...]] = {}
        patterns = []
        for cat, entries in cats.items():
            where = f"categories.{cat}"
            if not isinstance(cat, str) or not _NAME_RE.match(cat):
                raise InputError(source, "category names are letters, digits and '_'", field=where)
            if not isinstance(entries, list) or not entries:
                raise InputError(source, "expected a non-empty list of keywords", field=where)
            compiled = []
            for i, entry in enumerate(entries):
                if not isinstance(entry, str):
                    raise InputError(source, f"expected a string, got {entry!r}", field=f"{where}[{i}]")
                try:
                    compiled.append(compile_entry(entry))
                except (re.error, ValueError) as exc:
                    raise InputError(source, f"bad entry {entry!r}: {exc}", field=f"{where}[{i}]") from exc
            categories[cat] = tuple(entries)
            patterns.append((cat, tuple(compiled)))
        return cls(dataset, version, categories, source, tuple(patterns))

    def categories_for(self, item: str) -> tuple[str, ...]:
        """Sorted unique categories whose entries occur in ``item`` (``()`` when unmapped)."""
        if not isinstance(item, str):
            raise TypeError(f"evidence items are strings, got {type(item).__name__}")
        hit = self._memo.get(item)
        if hit is not None:
            return hit
        text = _normalise_item(item)
        cats = tuple(sorted(cat for cat, pats in self._patterns if any(p.search(text) for p in pats)))
        self._memo[item] = cats
        return cats

    def map_items(self, items: Iterable[str]) -> list[tuple[str, ...]]:
        """:meth:`categories_for` of each item, in order."""
        return [self.categories_for(x) for x in items]

    def mapping_rate(self, items: Iterable[str]) -> float | None:
        """Share of ``items`` with at least one category, in [0, 1]; ``None`` for zero items."""
        mapped = self.map_items(items)
        if not mapped:
            return None
        return sum(1 for c in mapped if c) / len(mapped)

    @property
    def tag(self) -> str:
        """``<dataset>@<version>``, the value recorded as ``lexicon_version``."""
        return f"{self.dataset}@{self.version}"


def _lexicon_dir() -> Any:
    return resources.files(__package__).joinpath(*LEXICON_PACKAGE_DIR)


def available_lexicons(directory: str | Path | None = None) -> list[str]:
    """Dataset names that have a lexicon file (sorted)."""
    d = Path(directory) if directory is not None else _lexicon_dir()
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


def load_lexicon(dataset: str, directory: str | Path | None = None) -> Lexicon:
    """Load and validate ``<dataset>.json`` from the package lexicon dir (or ``directory``).

    Raises :class:`~metamorph.errors.InputError` naming the file path when the file is missing,
    is not valid JSON, or does not follow the lexicon format (see the module docstring).
    """
    if not isinstance(dataset, str) or not _NAME_RE.match(dataset):
        raise InputError(str(dataset), "a dataset name is letters, digits and '_'")
    base = Path(directory) if directory is not None else _lexicon_dir()
    path = base / f"{dataset}.json"
    if not path.is_file():
        try:
            known = available_lexicons(base)
        except OSError:
            known = []
        raise InputError(str(path), f"no lexicon for dataset {dataset!r} (available: {known})")
    data = read_json_file(path, "lexicon")
    return Lexicon.from_mapping(data, source=str(path), expected_dataset=dataset)
