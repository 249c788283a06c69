"""Question-answering task items for the prompt-wrapper study (FSI paper, arXiv 2607.09665, §3.1–3.2).

One canonical item, :class:`QAItem`, for every benchmark the wrapper study uses: the wrappers of
:mod:`metamorph.studies.wrapper_sensitivity.wrappers` only ever see ``question``, ``passage`` and ``choices``, so one template
serves every task of an answer type. Three answer types:

* ``choice``  — pick one option; ``choices`` are ``(label, text)`` pairs, ``gold`` is a label
  (``"B"``, or ``"2"`` for WinoGrande / PIQA / the few ARC items numbered 1–4);
* ``boolean`` — ``gold`` is ``"true"`` or ``"false"``; no choices;
* ``numeric`` — ``gold`` is a normalised decimal string (:func:`normalize_number`: ``"18"``,
  ``"0.5"``, ``"-3"``, ``"1250"``); no choices.

A *task spec* names a loader and where its rows come from::

    synthetic                                   # the embedded default (synthetic_tasks)
    synthetic?n_per_task=4&seed=1               # ... with parameters
    boolq:/path/to/sample.jsonl                 # a local JSONL / JSON / CSV / Parquet file
    arc_challenge:hf://datasets/<org>/<repo>/<file>.parquet

Loaders (field names as in the original releases and in ``shared/datasets/*/PROVENANCE.md``):

============== ========= =========================================================================
task           type      fields -> item
============== ========= =========================================================================
boolq          boolean   ``question``, ``passage``; gold from ``answer`` (else ``gold``):
                         a bool, ``true``/``false``/``yes``/``no`` or 0/1
arc_challenge  choice    ``question``; ``choices`` as ``[{label, text}]`` or ``{label: [...],
                         text: [...]}``; labels kept as given (A–D, A–C, or 1–4); gold
                         ``answerKey`` (else ``gold``)
gsm8k          numeric   ``question``; gold = the number after ``####`` in ``answer`` with
                         thousands separators removed (else ``gold``)
commonsense_qa choice    as arc_challenge (labels A–E)
winogrande     choice    ``sentence`` (one ``_`` blank), ``option1``/``option2`` -> options
                         ``"1"``/``"2"``; gold ``answer`` (else ``gold``) ``"1"``/``"2"``
hellaswag      choice    ``ctx`` (else ``ctx_a`` + ``ctx_b``) with ``activity_label`` as the
                         passage; ``endings`` -> options A, B, C, ...; gold = letter of the 0-based
                         ``label`` (else ``gold``)
piqa           choice    ``goal``; ``sol1``/``sol2`` -> options ``"1"``/``"2"``; gold =
                         ``label`` + 1 (``label`` 0 -> ``"1"``)
============== ========= =========================================================================

The item id is the row's ``id``; rows without one (Hugging Face copies) fall back to
``<task>-<idx|ind|qID>`` where the source has such an index, else ``<task>-row<n>`` (1-based record
number: stable only for an unchanged file). When a row has both the source's gold field and the
``gold`` copy of the shared samples, the two must agree.

Task-specific framing (WinoGrande's blank, HellaSwag's continuation, PIQA's goal) is part of
``question`` and fixed per task (:data:`QUESTION_TEMPLATES`), so it is identical across wrappers.

Every problem raises :class:`~metamorph.errors.InputError` naming the file, the 1-based row and the
field; nothing is returned for a file with a bad row (all-or-nothing). Duplicate item ids are
rejected.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from metamorph.datasets import check_id_text, read_rows, required, required_id, required_text, spec_params
from metamorph.errors import InputError
from metamorph.studies.wrapper_sensitivity.vocab import ANSWER_TYPES

__all__ = [
    "ANSWER_TYPES",
    "LOADERS",
    "QUESTION_TEMPLATES",
    "SYNTHETIC_TASKS",
    "QAItem",
    "load_task",
    "normalize_number",
    "synthetic_tasks",
    "synth_arith_rule",
    "synth_choice_rule",
    "synth_compare_rule",
    "MAX_SYNTHETIC",
    "load_tasks",
]


#: Fixed per-task question framing (``{...}`` filled from the row).
QUESTION_TEMPLATES = {
    "winogrande": "Which option correctly fills the blank (_) in this sentence?\n{sentence}",
    "hellaswag": "Which ending most plausibly continues the passage?",
    "piqa": "Goal: {goal}\nWhich solution achieves the goal?",
}


def normalize_number(value: Any) -> str:
    """Canonical decimal string of a number: ``"1,250.00"`` -> ``"1250"``, ``"0.50"`` -> ``"0.5"``,
    ``-3`` -> ``"-3"``, ``"-0"`` -> ``"0"``. No exponent, no trailing zeros, no ``+``.

    Accepts int, float (not bool) or str (surrounding whitespace and ``,`` separators removed).
    Raises ``ValueError`` for anything that is not a finite number.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"not a number: {value!r}")
    text = str(value).strip().replace(",", "")
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a number: {value!r}") from None
    if not d.is_finite() or not text:
        raise ValueError(f"not a finite number: {value!r}")
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


@dataclass(frozen=True)
class QAItem:
    """One benchmark item, wrapper-free.

    Attributes:
        item_id: unique within its task.
        task: task name (``boolq``, ``arc_challenge``, ..., ``synth_arith``).
        answer_type: ``"choice"``, ``"boolean"`` or ``"numeric"``.
        question: the question text (task framing included, see :data:`QUESTION_TEMPLATES`).
        choices: ``((label, text), ...)`` in source order; >= 2 distinct labels for ``choice``,
            empty for ``boolean`` / ``numeric``.
        gold: the choice label; ``"true"``/``"false"``; or a :func:`normalize_number` string.
        passage: the reading passage / context, or ``None``.

    Raises ``ValueError`` when these invariants do not hold.
    """

    item_id: str
    task: str
    answer_type: str
    question: str
    choices: tuple[tuple[str, str], ...]
    gold: str
    passage: str | None = None

    def __post_init__(self) -> None:
        if self.answer_type not in ANSWER_TYPES:
            raise ValueError(f"answer_type must be one of {ANSWER_TYPES}, got {self.answer_type!r}")
        if not self.item_id or not self.task or not self.question.strip():
            raise ValueError("item_id, task and question must be non-empty")
        if self.answer_type == "choice":
            labels = self.labels
            if len(labels) < 2 or len(set(labels)) != len(labels):
                raise ValueError(f"a choice item needs >= 2 distinct labels, got {list(labels)}")
            if self.gold not in labels:
                raise ValueError(f"gold {self.gold!r} is not one of the choice labels {list(labels)}")
        else:
            if self.choices:
                raise ValueError(f"a {self.answer_type} item has no choices")
            if self.answer_type == "boolean" and self.gold not in ("true", "false"):
                raise ValueError(f"boolean gold must be 'true' or 'false', got {self.gold!r}")
            if self.answer_type == "numeric" and normalize_number(self.gold) != self.gold:
                raise ValueError(f"numeric gold must be normalised, got {self.gold!r}")

    @property
    def labels(self) -> tuple[str, ...]:
        """The choice labels in order (``()`` for boolean / numeric items)."""
        return tuple(label for label, _ in self.choices)


# ------------------------------------------------------------------------------------------
# Row helpers (each error names file, row and field)


_req = required


_text = required_text


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, str) and not v.strip())


def _gold_raw(row: dict, key: str, uri: str, i: int) -> tuple[str, Any]:
    """(field name, raw value) of the gold answer: the source field, else the ``gold`` copy."""
    if _present(row.get(key)):
        return key, row[key]
    if _present(row.get("gold")):
        return "gold", row["gold"]
    raise InputError(uri, "missing or empty", row=i, field=key)


def _agree(row: dict, field: str, value: str, convert: Callable[[Any], str], uri: str, i: int) -> None:
    """When the row also has a ``gold`` copy, it must give the same canonical answer."""
    if field == "gold" or not _present(row.get("gold")):
        return
    try:
        other = convert(row["gold"])
    except ValueError:
        other = None
    if other != value:
        raise InputError(uri, f"gold {row['gold']!r} disagrees with {field} ({value!r})", row=i, field="gold")


def _item_id(row: dict, task: str, uri: str, i: int, index_keys: Sequence[str] = ()) -> str:
    if _present(row.get("id")):
        return required_id(row, "id", uri, i)
    for k in index_keys:
        if _present(row.get(k)):
            return check_id_text(f"{task}-{row[k]}", uri, i, k)
    return f"{task}-row{i}"


def _listish(v: Any) -> list | None:
    """A JSON list, a tuple, or a numpy array (Parquet) as a list; ``None`` otherwise."""
    if isinstance(v, (list, tuple)):
        return list(v)
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        out = v.tolist()
        return out if isinstance(out, list) else None
    return None


def _choices_field(row: dict, uri: str, i: int) -> tuple[tuple[str, str], ...]:
    """ARC / CommonsenseQA choices: ``[{label, text}, ...]`` or ``{label: [...], text: [...]}``."""
    raw = _req(row, "choices", uri, i)
    pairs: list[tuple[Any, Any]] = []
    if isinstance(raw, dict) and "label" in raw and "text" in raw:
        labels, texts = _listish(raw["label"]), _listish(raw["text"])
        if labels is None or texts is None or len(labels) != len(texts):
            raise InputError(
                uri, "choices.label and choices.text must be lists of equal length", row=i, field="choices"
            )
        pairs = list(zip(labels, texts))
    elif (lst := _listish(raw)) is not None:
        for c in lst:
            if not isinstance(c, dict) or "label" not in c or "text" not in c:
                raise InputError(
                    uri, f"each choice must be an object with label and text, got {c!r:.60}", row=i, field="choices"
                )
            pairs.append((c["label"], c["text"]))
    else:
        raise InputError(uri, f"expected a list of {{label, text}} choices, got {raw!r:.60}", row=i, field="choices")
    return _check_choices(pairs, "choices", uri, i)


def _check_choices(pairs: Sequence[tuple[Any, Any]], field: str, uri: str, i: int) -> tuple[tuple[str, str], ...]:
    out = []
    for label, text in pairs:
        if any(isinstance(v, (bool, dict, list, tuple)) for v in (label, text)):
            raise InputError(
                uri, f"choice ({label!r:.30}, {text!r:.30}) must be a text label and a text", row=i, field=field
            )
        label, text = str(label).strip(), "" if text is None else str(text).strip()
        if not label or not text:
            raise InputError(uri, f"choice {label!r} has an empty label or text", row=i, field=field)
        out.append((label, text))
    labels = [lab for lab, _ in out]
    if len(out) < 2:
        raise InputError(uri, f"needs at least 2 choices, got {len(out)}", row=i, field=field)
    if len(set(labels)) != len(labels):
        raise InputError(uri, f"duplicate choice labels {labels}", row=i, field=field)
    return tuple(out)


def _choice_gold(
    row: dict,
    key: str,
    labels: Sequence[str],
    uri: str,
    i: int,
    convert: Callable[[Any], str] = lambda v: str(v).strip(),
) -> str:
    field, raw = _gold_raw(row, key, uri, i)
    try:
        gold = convert(raw)
    except ValueError as exc:
        raise InputError(uri, str(exc), row=i, field=field) from exc
    if gold not in labels:
        raise InputError(uri, f"gold label {gold!r} is not one of the choice labels {list(labels)}", row=i, field=field)
    _agree(row, field, gold, convert, uri, i)
    return gold


def _to_bool(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)) and v in (0, 1):
        return "true" if v == 1 else "false"
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return "true" if v.strip().lower() in ("true", "yes", "1") else "false"
    raise ValueError(f"expected a boolean answer (true/false, yes/no, 1/0), got {v!r}")


def _index(v: Any, what: str) -> int:
    try:
        if isinstance(v, bool):
            raise ValueError
        return int(str(v).strip())
    except ValueError:
        raise ValueError(f"expected a 0-based {what} index, got {v!r}") from None


def _index_plus_one(v: Any) -> str:
    """PIQA: 0-based ``label`` (0 or 1) -> option label ``"1"`` / ``"2"``; ``ValueError`` naming the
    index as given otherwise (not the shifted label, which would read as a different value)."""
    k = _index(v, "solution")
    if k not in (0, 1):
        raise ValueError(f"solution index {k} is out of range (PIQA's label is 0 for sol1 or 1 for sol2)")
    return str(k + 1)


def _index_to_letter(v: Any) -> str:
    """HellaSwag: 0-based ``label`` -> ``"A"``, ``"B"``, ..."""
    k = _index(v, "ending")
    if not 0 <= k < 26:
        raise ValueError(f"ending index {k} is out of range")
    return chr(ord("A") + k)


# ------------------------------------------------------------------------------------------
# Loaders: raw row -> QAItem


def load_boolq_row(row: dict, uri: str, i: int) -> QAItem:
    """BoolQ: yes/no question about a Wikipedia passage (boolean)."""
    question, passage = _text(row, "question", uri, i), _text(row, "passage", uri, i)
    field, raw = _gold_raw(row, "answer", uri, i)
    try:
        gold = _to_bool(raw)
    except ValueError as exc:
        raise InputError(uri, str(exc), row=i, field=field) from exc
    _agree(row, field, gold, _to_bool, uri, i)
    return QAItem(_item_id(row, "boolq", uri, i, ("idx",)), "boolq", "boolean", question, (), gold, passage)


def _load_stem_choices(task: str) -> Callable[[dict, str, int], QAItem]:
    def load(row: dict, uri: str, i: int) -> QAItem:
        question = _text(row, "question", uri, i)
        choices = _choices_field(row, uri, i)
        gold = _choice_gold(row, "answerKey", [lab for lab, _ in choices], uri, i)
        return QAItem(_item_id(row, task, uri, i), task, "choice", question, choices, gold)

    load.__name__ = f"load_{task}_row"
    load.__doc__ = f"{task}: question stem + labelled choices; gold ``answerKey`` (choice)."
    return load


load_arc_challenge_row = _load_stem_choices("arc_challenge")
load_commonsense_qa_row = _load_stem_choices("commonsense_qa")


def _gsm8k_final(answer: Any) -> str:
    text = str(answer)
    if "####" not in text:
        raise ValueError("no '####' final-answer marker")
    tail = text.rsplit("####", 1)[1].strip()
    try:
        return normalize_number(tail)
    except ValueError:
        raise ValueError(f"the text after '####' is not a number: {tail!r:.40}") from None


def load_gsm8k_row(row: dict, uri: str, i: int) -> QAItem:
    """GSM8K: grade-school maths word problem (numeric); gold after ``####`` in ``answer``."""
    question = _text(row, "question", uri, i)
    field, raw = _gold_raw(row, "answer", uri, i)
    convert = _gsm8k_final if field == "answer" else normalize_number
    try:
        gold = convert(raw)
    except ValueError as exc:
        raise InputError(uri, str(exc), row=i, field=field) from exc
    _agree(row, field, gold, normalize_number, uri, i)
    return QAItem(_item_id(row, "gsm8k", uri, i), "gsm8k", "numeric", question, (), gold)


def load_winogrande_row(row: dict, uri: str, i: int) -> QAItem:
    """WinoGrande: fill the ``_`` blank with option ``"1"`` or ``"2"`` (choice)."""
    sentence = _text(row, "sentence", uri, i)
    if sentence.count("_") != 1:
        raise InputError(uri, f"expected exactly one blank '_', found {sentence.count('_')}", row=i, field="sentence")
    choices = _check_choices(
        [("1", _text(row, "option1", uri, i)), ("2", _text(row, "option2", uri, i))], "option1", uri, i
    )
    gold = _choice_gold(row, "answer", ("1", "2"), uri, i)
    question = QUESTION_TEMPLATES["winogrande"].format(sentence=sentence)
    return QAItem(_item_id(row, "winogrande", uri, i, ("qID",)), "winogrande", "choice", question, choices, gold)


def load_hellaswag_row(row: dict, uri: str, i: int) -> QAItem:
    """HellaSwag: the most plausible continuation among the endings, labelled A, B, ... (choice)."""
    if _present(row.get("ctx")):
        ctx = _text(row, "ctx", uri, i)
    else:
        ctx_a = _text(row, "ctx_a", uri, i)
        ctx_b = str(row.get("ctx_b") or "").strip()
        ctx = f"{ctx_a} {ctx_b}" if ctx_b else ctx_a
    activity = str(row.get("activity_label") or "").strip()
    endings = _listish(_req(row, "endings", uri, i))
    if endings is None:
        raise InputError(uri, "expected a list of endings", row=i, field="endings")
    if len(endings) > 26:
        raise InputError(uri, f"too many endings ({len(endings)})", row=i, field="endings")
    choices = _check_choices([(chr(ord("A") + k), e) for k, e in enumerate(endings)], "endings", uri, i)
    gold = _choice_gold(row, "label", [lab for lab, _ in choices], uri, i, _index_to_letter)
    passage = f"{activity}: {ctx}" if activity else ctx
    return QAItem(
        _item_id(row, "hellaswag", uri, i, ("ind",)),
        "hellaswag",
        "choice",
        QUESTION_TEMPLATES["hellaswag"],
        choices,
        gold,
        passage,
    )


def load_piqa_row(row: dict, uri: str, i: int) -> QAItem:
    """PIQA: which of two solutions (``"1"``, ``"2"``) achieves the goal (choice); gold = label + 1."""
    goal = _text(row, "goal", uri, i)
    choices = _check_choices([("1", _text(row, "sol1", uri, i)), ("2", _text(row, "sol2", uri, i))], "sol1", uri, i)
    gold = _choice_gold(row, "label", ("1", "2"), uri, i, _index_plus_one)
    question = QUESTION_TEMPLATES["piqa"].format(goal=goal)
    return QAItem(_item_id(row, "piqa", uri, i), "piqa", "choice", question, choices, gold)


#: Task name -> row loader ``(row, uri, 1-based row) -> QAItem``.
#: The list / object fields of each task, with the words their errors use: JSON text in a CSV
#: cell, decoded by :func:`metamorph.datasets.read_rows`.
JSON_CELLS: dict[str, dict[str, str]] = {
    "arc_challenge": {"choices": "a list of {label, text} choices"},
    "commonsense_qa": {"choices": "a list of {label, text} choices"},
    "hellaswag": {"endings": "a list of endings"},
}

LOADERS: dict[str, Callable[[dict, str, int], QAItem]] = {
    "boolq": load_boolq_row,
    "arc_challenge": load_arc_challenge_row,
    "gsm8k": load_gsm8k_row,
    "commonsense_qa": load_commonsense_qa_row,
    "winogrande": load_winogrande_row,
    "hellaswag": load_hellaswag_row,
    "piqa": load_piqa_row,
}


# ------------------------------------------------------------------------------------------
# The embedded default: synthetic tasks with a stated rule

#: The synthetic tasks, in the order :func:`synthetic_tasks` returns them.
SYNTHETIC_TASKS = ("synth_arith", "synth_compare", "synth_choice")

_NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lena"]


def synth_arith_rule(sacks: int, kg_per_sack: int, sold_kg: int) -> str:
    """``synth_arith`` gold: ``(sacks * kg_per_sack - sold_kg) / 2``, normalised ("18", "18.5")."""
    return normalize_number(str(Decimal(sacks * kg_per_sack - sold_kg) / 2))


def synth_compare_rule(age_first: int, age_second: int) -> str:
    """``synth_compare`` gold: ``"true"`` iff the first person is strictly older."""
    return "true" if age_first > age_second else "false"


def synth_choice_rule(choices: Sequence[tuple[str, str]]) -> str:
    """``synth_choice`` gold: the label of the largest number among the options."""
    return max(choices, key=lambda c: int(c[1]))[0]


def synthetic_tasks(n_per_task: int = 8, seed: int = 0) -> list[QAItem]:
    """The embedded default task set: ``n_per_task`` seeded items of each of three tasks.

    * ``synth_arith`` (numeric) — "A mill fills {s} sacks with {k} kg of flour each, sells {c} kg
      and splits the rest equally between 2 bins. How many kilograms go in each bin?"; gold by
      :func:`synth_arith_rule` (a whole number or a half).
    * ``synth_compare`` (boolean) — passage "{A} is {x} years old. {B} is {y} years old.",
      question "Is {A} older than {B}?"; gold by :func:`synth_compare_rule`; balanced (even index
      -> true, odd -> false).
    * ``synth_choice`` (choice A–D) — "Which of these numbers is the largest?" over four distinct
      numbers 10–99; gold by :func:`synth_choice_rule`; the largest sits at position ``index % 4``.

    Deterministic in ``(n_per_task, seed)``; ids ``<task>-<seed>-<index:04d>``; items are ordered
    by task (as in :data:`SYNTHETIC_TASKS`) then index. Raises ``ValueError`` for ``n_per_task < 1``.
    """
    if n_per_task < 1:
        raise ValueError("synthetic_tasks needs n_per_task >= 1")
    rng = random.Random(seed)
    out: list[QAItem] = []
    for j in range(n_per_task):
        s, k = rng.randint(2, 9), rng.randint(5, 25)
        c = rng.randint(1, s * k - 1)
        q = (
            f"A mill fills {s} sacks with {k} kg of flour each, sells {c} kg and splits the rest equally "
            "between 2 bins. How many kilograms of flour go in each bin?"
        )
        out.append(QAItem(f"synth_arith-{seed}-{j:04d}", "synth_arith", "numeric", q, (), synth_arith_rule(s, k, c)))
    for j in range(n_per_task):
        a, b = rng.sample(_NAMES, 2)
        x, y = rng.sample(range(18, 80), 2)
        if (x > y) != (j % 2 == 0):
            x, y = y, x
        passage = f"{a} is {x} years old. {b} is {y} years old."
        out.append(
            QAItem(
                f"synth_compare-{seed}-{j:04d}",
                "synth_compare",
                "boolean",
                f"Is {a} older than {b}?",
                (),
                synth_compare_rule(x, y),
                passage,
            )
        )
    for j in range(n_per_task):
        nums = rng.sample(range(10, 100), 4)
        nums.sort()
        largest = nums.pop()
        rng.shuffle(nums)
        nums.insert(j % 4, largest)
        choices = tuple((lab, str(n)) for lab, n in zip("ABCD", nums))
        out.append(
            QAItem(
                f"synth_choice-{seed}-{j:04d}",
                "synth_choice",
                "choice",
                "Which of these numbers is the largest?",
                choices,
                synth_choice_rule(choices),
            )
        )
    return out


# ------------------------------------------------------------------------------------------
# Specs


#: The most items per task ``synthetic`` generates (``n_per_task``, or ``limit`` when it is not
#: given): a mistyped value would otherwise generate items until memory runs out.
MAX_SYNTHETIC = 100_000


def load_task(spec: str, limit: int | None = None) -> list[QAItem]:
    """Load one task spec (see the module docstring) into items.

    ``limit`` keeps the first ``limit`` rows of the file. All-or-nothing: any bad row raises
    :class:`InputError` (file, 1-based row, field) and nothing is returned; duplicate item ids
    raise too. ``synthetic`` takes ``n_per_task`` (default 8, or ``limit``; 1 to
    :data:`MAX_SYNTHETIC`, else :class:`InputError`) and ``seed`` (default 0).
    """
    head, _, query = spec.partition("?")
    if head == "synthetic":
        params = spec_params(spec, query, ("n_per_task", "seed"))
        try:
            n = int(params.get("n_per_task", limit or 8))
            seed = int(params.get("seed", 0))
        except ValueError as exc:
            raise InputError(spec, f"n_per_task and seed must be integers ({exc})") from exc
        if not 1 <= n <= MAX_SYNTHETIC:
            raise InputError(
                spec,
                f"synthetic needs 1 <= n_per_task <= {MAX_SYNTHETIC:,} items"
                + (" (from --limit / limit)" if "n_per_task" not in params else "")
                + f", got {n}",
            )
        return synthetic_tasks(n_per_task=n, seed=seed)
    task, sep, location = spec.partition(":")
    if not sep or not location:
        raise InputError(spec, "a task spec is 'synthetic' or '<task>:<path or hf:// URI>'")
    if task not in LOADERS:
        raise InputError(spec, f"unknown task {task!r}; known: {sorted(LOADERS)} and 'synthetic'")
    raw = read_rows(location, JSON_CELLS.get(task))
    if limit is not None:
        raw = raw[:limit]
    loader = LOADERS[task]
    items: list[QAItem] = []
    seen: dict[str, int] = {}
    for j, r in enumerate(raw, start=1):
        r = dict(r)
        i = int(r.pop("__row__", j))
        x = loader(r, location, i)
        if x.item_id in seen:
            raise InputError(
                location, f"duplicate item_id {x.item_id!r} (first at row {seen[x.item_id]})", row=i, field="id"
            )
        seen[x.item_id] = i
        items.append(x)
    return items


def load_tasks(specs: Sequence[str], limit: int | None = None) -> list[tuple[str, QAItem]]:
    """Every item of ``specs`` (each loaded by :func:`load_task` with ``limit``) as ``(spec, item)``
    pairs; ``(task, item_id)`` must be unique across them — the same file given twice, or two files
    sharing ids, raise :class:`InputError` naming the later spec, the item's position in it (``row``)
    and ``id``, before anything runs (the items table's uniqueness check would fail the run later)."""
    out: list[tuple[str, QAItem]] = []
    seen: dict[tuple[str, str], str] = {}
    for spec in specs:
        for j, x in enumerate(load_task(spec, limit=limit), start=1):
            key = (x.task, x.item_id)
            if key in seen:
                raise InputError(
                    spec,
                    f"item {x.item_id!r} of task {x.task!r} was already loaded from {seen[key]}",
                    row=j,
                    field="id",
                )
            seen[key] = spec
            out.append((spec, x))
    return out
