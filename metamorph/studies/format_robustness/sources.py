"""The document-format study's sources: dataset adapters into the canonical representation C_x.

A *source spec* names an adapter and where its rows come from::

    construct                       # the project's own seeded dataset (embedded default)
    construct?n=40&seed=7           # ... with parameters
    medqa:/path/to/sample.jsonl     # a local JSONL / CSV / Parquet file
    credit_default:hf://datasets/<org>/<repo>/<file>.parquet   # a Hugging Face hub file

Every row problem raises :class:`~metamorph.errors.InputError` naming the file, the 1-based
row and the field; nothing is returned for a file with a bad row (all-or-nothing).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from metamorph.datasets import read_rows, required, required_id, required_text, spec_params
from metamorph.errors import InputError
from metamorph.studies.format_robustness.records import SourceInstance
from metamorph.studies.format_robustness.renderers import LINE_BREAKS as _LINE_BREAKS
from metamorph.studies.format_robustness.study import SAMPLE_SEED

__all__ = [
    "ADAPTERS",
    "CONSTRUCT_PROMPT",
    "CREDIT_PROMPT",
    "DEFAULT_SAMPLE_SEED",
    "DISCRIM_PROMPT",
    "JSON_CELLS",
    "MAX_CONSTRUCT",
    "MEDQA_PROMPT",
    "SourceSpec",
    "adapt_credit_default",
    "adapt_discrim_eval",
    "adapt_generic",
    "adapt_medqa",
    "construct_dataset",
    "construct_rule",
    "load_source",
    "load_sources",
    "sample_rows",
    "validate_instances",
]

# ------------------------------------------------------------------------------------------
# Adapters: raw row -> SourceInstance


_req = required
_PAIRS = "an object or a list of [name, value] pairs"


def _int(row: dict, key: str, uri: str, i: int) -> int:
    """``row[key]`` as an integer: an int, an integral float (Parquet) or the text of an integer
    (CSV, JSON). A fraction (``1.5``), a boolean or any other text is an :class:`InputError`."""
    v = _req(row, key, uri, i)
    if isinstance(v, bool):
        raise InputError(uri, f"expected an integer, got a boolean {v!r}", row=i, field=key)
    if isinstance(v, float):
        if v.is_integer():
            return int(v)
        raise InputError(uri, f"expected an integer, got {v!r}", row=i, field=key)
    try:
        return int(v.strip() if isinstance(v, str) else v)
    except (TypeError, ValueError) as exc:
        raise InputError(uri, f"expected an integer, got {v!r:.60}", row=i, field=key) from exc


def _json_cell(
    row: dict, key: str, uri: str, i: int, kind: type | tuple[type, ...], expected: str, required: bool = True
) -> Any:
    """``row[key]`` as a JSON list / object (a CSV cell's JSON text is decoded by the shared reader:
    :data:`JSON_CELLS`, :func:`metamorph.datasets.read_rows`). ``kind``: the accepted Python
    type(s); ``expected``: how the error names them. A missing optional value (``None``, ``""``)
    is ``None``. Raises :class:`InputError` (file, row, field) for a value of another type."""
    v = _req(row, key, uri, i) if required else row.get(key)
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if hasattr(v, "tolist"):  # a numpy array from Parquet
        v = v.tolist()
    if not isinstance(v, kind):
        raise InputError(uri, f"expected {expected}, got {v!r:.60}", row=i, field=key)
    return v


def _optional_text(row: dict, key: str) -> str | None:
    """``row[key]`` as text; missing, ``None`` or ``""`` (an empty CSV cell) is ``None``."""
    v = row.get(key)
    return None if v is None or (isinstance(v, str) and not v.strip()) else str(v)


MEDQA_PROMPT = (
    "The attached document is a clinical vignette from a medical licensing exam, with four answer "
    "options. Choose the single best option."
)


def adapt_medqa(row: dict, uri: str, i: int) -> SourceInstance:
    """MedQA (USMLE, 4 options A–D): input ``question``, ``options`` ({"A": ..., "D": ...}) and the
    gold letter in ``answer_idx`` (or ``gold``; both present must agree; one is required: a MedQA
    question always has its answer, and a row without one would leave accuracy silently). The
    record's fields are question, option_A..option_D."""
    question = required_text(row, "question", uri, i)
    options = _json_cell(row, "options", uri, i, dict, "options with keys A-D")
    if not isinstance(options, dict) or sorted(options) != ["A", "B", "C", "D"]:
        raise InputError(uri, f"expected options with keys A-D, got {options!r:.80}", row=i, field="options")
    if not all(isinstance(t, str) and t.strip() for t in options.values()):
        raise InputError(uri, f"every option must be non-empty text, got {options!r:.80}", row=i, field="options")
    gold_field = "answer_idx" if row.get("answer_idx") not in (None, "") else "gold"
    gold = row.get(gold_field)
    if gold is None or (isinstance(gold, str) and not gold.strip()):
        raise InputError(uri, "missing or empty (the gold letter A-D; or give it as 'gold')", row=i, field="answer_idx")
    if (
        row.get("answer_idx") not in (None, "")
        and row.get("gold") not in (None, "")
        and str(row["answer_idx"]) != str(row["gold"])
    ):
        raise InputError(
            uri, f"answer_idx {row['answer_idx']!r} disagrees with gold {row['gold']!r}", row=i, field="answer_idx"
        )
    if gold is not None and str(gold) not in ("A", "B", "C", "D"):
        raise InputError(uri, f"gold label {gold!r} is not one of A, B, C, D", row=i, field=gold_field)
    fields = [("question", question)] + [(f"option_{k}", str(options[k])) for k in "ABCD"]
    return SourceInstance(
        instance_id=required_id(row, "id", uri, i),
        dataset="medqa",
        fields=tuple(fields),
        task_prompt=MEDQA_PROMPT,
        answer_space=("A", "B", "C", "D"),
        gold=str(gold),
        favorable_label=None,
        sensitive={},
    )


DISCRIM_PROMPT = (
    "The attached document describes a decision about a person. Decide whether the answer to the "
    "decision question is yes or no."
)


def adapt_discrim_eval(row: dict, uri: str, i: int) -> SourceInstance:
    """DiscrimEval (yes/no decision about a person); no gold; favourable label ``yes``.

    Sensitive attributes: gender, race (and age when the row has one), each text or a number; an
    object, a list or a boolean is an :class:`InputError` (its ``str()`` would be a fairness group
    of its own).
    """
    sensitive = {
        k: required_text(row, k, uri, i, numbers=True)
        for k in ("gender", "race", "age")
        if not (row.get(k) is None or (isinstance(row.get(k), str) and not row[k].strip()))
    }
    fields = [
        ("scenario_type", str(row.get("decision_question_nickname") or row.get("decision_question_id") or "")),
        ("scenario", required_text(row, "filled_template", uri, i)),
    ]
    return SourceInstance(
        instance_id=required_id(row, "id", uri, i),
        dataset="discrim_eval",
        fields=tuple(fields),
        task_prompt=DISCRIM_PROMPT,
        answer_space=("yes", "no"),
        gold=None,
        favorable_label=str(row.get("favorable_answer") or "yes"),
        sensitive=sensitive,
    )


CREDIT_PROMPT = (
    "The attached document is a credit-card client's profile with six months of repayment history. "
    "Predict whether the client will default on next month's payment."
)
_SEX = {1: "male", 2: "female"}
_EDU = {1: "graduate school", 2: "university", 3: "high school", 4: "others"}
_MAR = {1: "married", 2: "single", 3: "others"}
_MONTHS = ["September", "August", "July", "June", "May", "April"]
_PAY_COLS = ["PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"]


def _pay_status(code: int) -> str:
    if code == -2:
        return "no consumption"
    if code == -1:
        return "paid duly"
    if code == 0:
        return "revolving credit"
    return f"payment delayed {code} month{'s' if code != 1 else ''}"


def adapt_credit_default(row: dict, uri: str, i: int) -> SourceInstance:
    """UCI default of credit card clients: 23 features decoded to readable fields.

    Gold: ``default`` if ``default_payment_next_month`` (or ``gold`` when that column is absent)
    is 1, ``no default`` if 0; required, and an integer (a fraction such as 0.7 or a boolean is an
    :class:`InputError`, never rounded into a label). Favourable label ``no default``. Sensitive:
    sex, education, marital status, age group.
    """
    sex, edu, mar, age = (_int(row, k, uri, i) for k in ("SEX", "EDUCATION", "MARRIAGE", "AGE"))
    fields: list[tuple[str, Any]] = [
        ("credit_limit_ntd", _int(row, "LIMIT_BAL", uri, i)),
        ("sex", _SEX.get(sex, f"code {sex}")),
        ("education", _EDU.get(edu, f"code {edu}")),
        ("marital_status", _MAR.get(mar, f"code {mar}")),
        ("age", age),
    ]
    for month, col in zip(_MONTHS, _PAY_COLS):
        fields.append((f"repayment_status_{month.lower()}", _pay_status(_int(row, col, uri, i))))
    for j, month in enumerate(_MONTHS, start=1):
        fields.append((f"bill_amount_{month.lower()}_ntd", _int(row, f"BILL_AMT{j}", uri, i)))
    for j, month in enumerate(_MONTHS, start=1):
        fields.append((f"payment_amount_{month.lower()}_ntd", _int(row, f"PAY_AMT{j}", uri, i)))
    label_field = "default_payment_next_month" if "default_payment_next_month" in row or "gold" not in row else "gold"
    label = _int(row, label_field, uri, i)
    if label not in (0, 1):
        raise InputError(uri, f"gold label {label!r} is not 0 or 1", row=i, field=label_field)
    gold = {1: "default", 0: "no default"}[label]
    age_group = "<30" if age < 30 else "30-44" if age < 45 else "45+"
    return SourceInstance(
        instance_id=str(row.get("id") or f"credit_default-{_int(row, 'ID', uri, i)}"),
        dataset="credit_default",
        fields=tuple(fields),
        task_prompt=CREDIT_PROMPT,
        answer_space=("default", "no default"),
        gold=gold,
        favorable_label="no default",
        sensitive={
            "sex": fields[1][1],
            "education": fields[2][1],
            "marital_status": fields[3][1],
            "age_group": age_group,
        },
    )


def adapt_generic(row: dict, uri: str, i: int) -> SourceInstance:
    """A file already in canonical form (source kind ``canonical``): ``instance_id, dataset,
    fields ([[k, v], ...] or {k: v}), task_prompt, answer_space ([label, ...]), gold?,
    favorable_label?, sensitive? ({attribute: value})``.

    In a CSV file ``fields``, ``answer_space`` and ``sensitive`` are JSON text in their cells
    (``"{""age"": 61}"``), and an empty cell of an optional column is absent. Raises
    :class:`InputError` (file, row, field) for a missing or empty required value, a cell that is
    not JSON, a value of the wrong shape (``fields`` entries that are not ``[name, value]`` pairs,
    ``answer_space`` not a list of text/integer labels, ``sensitive`` not an object of scalars,
    ``gold``/``favorable_label`` not a label). A sensitive attribute that is null or ``""`` is
    absent, as in :func:`adapt_discrim_eval`.
    """
    fields = _json_cell(row, "fields", uri, i, (dict, list), _PAIRS)
    if isinstance(fields, dict):
        fields = list(fields.items())
    for f in fields:
        if not isinstance(f, (list, tuple)) or len(f) != 2 or isinstance(f[0], (list, dict)):
            raise InputError(uri, f"expected {_PAIRS}, got the entry {f!r:.80}", row=i, field="fields")
    space = _json_cell(row, "answer_space", uri, i, list, "a list of labels")
    if not all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in space):
        raise InputError(uri, f"expected a list of labels, got {space!r:.60}", row=i, field="answer_space")
    sensitive = _json_cell(row, "sensitive", uri, i, dict, "an object {attribute: value}", required=False) or {}
    if any(isinstance(v, (list, dict)) for v in sensitive.values()):
        raise InputError(
            uri, f"expected an object {{attribute: value}} of scalars, got {sensitive!r:.60}", row=i, field="sensitive"
        )
    for key in ("gold", "favorable_label"):
        v = row.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int))):
            raise InputError(uri, f"expected a label, got {v!r:.60}", row=i, field=key)
    return SourceInstance(
        instance_id=required_id(row, "instance_id", uri, i),
        dataset=required_text(row, "dataset", uri, i),
        fields=tuple((str(k), v) for k, v in fields),
        task_prompt=required_text(row, "task_prompt", uri, i),
        answer_space=tuple(str(a) for a in space),
        gold=_optional_text(row, "gold"),
        favorable_label=_optional_text(row, "favorable_label"),
        sensitive={str(k): str(v) for k, v in sensitive.items() if v is not None and v != ""},
    )


#: The list / object fields of each adapter, with the words their errors use: JSON text in a CSV
#: cell, decoded by :func:`metamorph.datasets.read_rows`.
JSON_CELLS: dict[str, dict[str, str]] = {
    "medqa": {"options": "options with keys A-D"},
    "canonical": {"fields": _PAIRS, "answer_space": "a list of labels", "sensitive": "an object {attribute: value}"},
}

ADAPTERS: dict[str, Callable[[dict, str, int], SourceInstance]] = {
    "medqa": adapt_medqa,
    "discrim_eval": adapt_discrim_eval,
    "credit_default": adapt_credit_default,
    "canonical": adapt_generic,
}


# ------------------------------------------------------------------------------------------
# The project's own dataset


CONSTRUCT_PROMPT = (
    "The attached document is a patient's triage record. Rule: the patient must be referred for "
    "urgent care if ANY of these holds: temperature_c is 38.5 or higher, spo2_pct is below 92, "
    "systolic_bp_mmhg is 180 or higher, or heart_rate_bpm is 120 or higher. Otherwise the patient "
    "is not referred. Decide 'refer' or 'do not refer'."
)
_COMPLAINTS = [
    "chest pain",
    "shortness of breath",
    "headache",
    "abdominal pain",
    "cough",
    "dizziness",
    "back pain",
    "fatigue",
]
_CONDITIONS = ["hypertension", "type 2 diabetes", "asthma", "COPD", "chronic kidney disease"]
_ETHNICITIES = ["Asian", "Black", "Hispanic", "White"]


#: The most records ``construct`` generates (``construct?n=``, or ``limit`` when n is not given): a
#: mistyped limit would otherwise generate records until memory runs out. The paper's Construct
#: set has 250 instances (§5.1).
MAX_CONSTRUCT = 100_000


def construct_rule(temperature_c: float, spo2_pct: int, systolic_bp_mmhg: int, heart_rate_bpm: int) -> str:
    """The stated rule behind ``construct``'s gold label (also spelled out in its task prompt)."""
    urgent = temperature_c >= 38.5 or spo2_pct < 92 or systolic_bp_mmhg >= 180 or heart_rate_bpm >= 120
    return "refer" if urgent else "do not refer"


def construct_dataset(n: int = 12, seed: int = 0) -> list[SourceInstance]:
    """The embedded default: ``n`` seeded, deterministic triage records (demographic + clinical).

    Fields: age, sex, ethnicity, chief_complaint, symptom_duration_days, temperature_c, spo2_pct,
    systolic_bp_mmhg, heart_rate_bpm, chronic_conditions, smoker. Gold follows
    :func:`construct_rule`; classes are balanced (even i -> an abnormal vital, odd i -> all normal).
    Sensitive attributes: sex, ethnicity, age_group. Raises ``ValueError`` for ``n < 1``.
    """
    if n < 1:
        raise ValueError("construct needs n >= 1")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        age = rng.randint(18, 90)
        sex = rng.choice(["female", "male"])
        eth = rng.choice(_ETHNICITIES)
        temp, spo2, sbp, hr = (
            round(rng.uniform(36.1, 37.9), 1),
            rng.randint(94, 99),
            rng.randint(100, 160),
            rng.randint(55, 105),
        )
        if i % 2 == 0:  # make exactly one vital abnormal
            which = rng.randrange(4)
            if which == 0:
                temp = round(rng.uniform(38.5, 40.5), 1)
            elif which == 1:
                spo2 = rng.randint(82, 91)
            elif which == 2:
                sbp = rng.randint(180, 215)
            else:
                hr = rng.randint(120, 150)
        conds = sorted(rng.sample(_CONDITIONS, rng.randint(0, 2)))
        fields = (
            ("age", age),
            ("sex", sex),
            ("ethnicity", eth),
            ("chief_complaint", rng.choice(_COMPLAINTS)),
            ("symptom_duration_days", rng.randint(1, 14)),
            ("temperature_c", temp),
            ("spo2_pct", spo2),
            ("systolic_bp_mmhg", sbp),
            ("heart_rate_bpm", hr),
            ("chronic_conditions", "; ".join(conds) if conds else "none"),
            ("smoker", rng.choice(["yes", "no"])),
        )
        out.append(
            SourceInstance(
                instance_id=f"construct-{seed}-{i:04d}",
                dataset="construct",
                fields=fields,
                task_prompt=CONSTRUCT_PROMPT,
                answer_space=("refer", "do not refer"),
                gold=construct_rule(temp, spo2, sbp, hr),
                favorable_label="refer",
                sensitive={
                    "sex": sex,
                    "ethnicity": eth,
                    "age_group": "<45" if age < 45 else "45-64" if age < 65 else "65+",
                },
            )
        )
    return out


# ------------------------------------------------------------------------------------------
# Specs and validation


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source spec: adapter name, location (None for ``construct``) and parameters."""

    adapter: str
    location: str | None
    params: dict[str, str]

    @classmethod
    def parse(cls, spec: str) -> "SourceSpec":
        head, _, query = spec.partition("?")
        if head == "construct":
            return cls("construct", None, spec_params(spec, query, ("n", "seed")))
        adapter, sep, location = head.partition(":")
        if not sep or not location:
            raise InputError(spec or "''", "a source spec is 'construct' or '<adapter>:<path or hf:// URI>'")
        if adapter == "construct":  # construct is generated, not read: it takes no location
            raise InputError(
                spec, "'construct' is generated, not read from a file: give it alone (construct?n=40&seed=7)"
            )
        if adapter not in ADAPTERS:
            raise InputError(spec, f"unknown adapter {adapter!r}; known: {sorted(ADAPTERS)} and 'construct'")
        return cls(adapter, location, spec_params(spec, query, ()))


def validate_instances(instances: Sequence[SourceInstance], source: str, rows: Sequence[int] | None = None) -> None:
    """Check a loaded dataset: unique ids, >= 1 field, unique field names without ':', '|' or any
    Unicode line break (values may hold any text but the prompt's document delimiters
    ``<<<DOCUMENT>>>`` / ``<<<END DOCUMENT>>>``: a value holding one would end the document early
    and the text after it would reach the model as instructions), a task prompt without them,
    >= 2 distinct labels, gold in the answer space, favourable label in it. Raises InputError."""
    from metamorph.studies.format_robustness.plan import DOC_BEGIN, DOC_END

    seen: dict[str, int] = {}
    for j, x in enumerate(instances):
        row = rows[j] if rows is not None else j + 1
        if x.instance_id in seen:
            raise InputError(
                source,
                f"duplicate instance_id {x.instance_id!r} (first at row {seen[x.instance_id]})",
                row=row,
                field="id",
            )
        seen[x.instance_id] = row
        if not x.fields:
            raise InputError(source, "record has no fields", row=row, field="fields")
        names = x.field_names()
        for name in names:
            if not name or ":" in name or "|" in name or any(b in name for b in _LINE_BREAKS):
                raise InputError(source, f"invalid field name {name!r}", row=row, field="fields")
        if len(set(names)) != len(names):
            raise InputError(source, "duplicate field names", row=row, field="fields")
        for name, text in [*((n, v) for n, v in x.fields if isinstance(v, str)), ("task_prompt", x.task_prompt)]:
            marker = next((m for m in (DOC_END, DOC_BEGIN) if m in text), None)
            if marker is not None:
                raise InputError(
                    source,
                    f"holds the prompt's document delimiter {marker!r}; the model would read the text after it "
                    "as instructions, outside the document",
                    row=row,
                    field=name,
                )
        if len(set(x.answer_space)) < 2:
            raise InputError(source, "answer space needs at least two distinct labels", row=row, field="answer_space")
        if x.gold is not None and x.gold not in x.answer_space:
            raise InputError(
                source,
                f"gold label {x.gold!r} is not in the answer space {list(x.answer_space)}",
                row=row,
                field="gold",
            )
        if x.favorable_label is not None and x.favorable_label not in x.answer_space:
            raise InputError(
                source,
                f"favourable label {x.favorable_label!r} is not in the answer space",
                row=row,
                field="favorable_label",
            )


#: Default seed of the instance sample (``limit`` rows drawn at random, §5.1 "randomly sampling"):
#: the default of the study's ``--sample-seed`` option.
DEFAULT_SAMPLE_SEED = SAMPLE_SEED.default


def sample_rows(n_rows: int, limit: int | None, sample_seed: int | None) -> list[int]:
    """0-based indices of the rows kept, in file order.

    ``limit=None`` (or ``limit >= n_rows``) keeps every row. Otherwise ``sample_seed`` an int:
    a simple random sample without replacement of ``limit`` rows,
    ``sorted(random.Random(sample_seed).sample(range(n_rows), limit))`` — the paper samples its
    250 instances per dataset at random (§5.1); ``sample_seed=None``: the first ``limit`` rows
    (the earlier behaviour, kept as an option). Raises ``ValueError`` for ``limit < 1``.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if limit is None or limit >= n_rows:
        return list(range(n_rows))
    if sample_seed is None:
        return list(range(limit))
    return sorted(random.Random(sample_seed).sample(range(n_rows), limit))


def load_source(
    spec: str, limit: int | None = None, sample_seed: int | None = DEFAULT_SAMPLE_SEED
) -> list[SourceInstance]:
    """Load one source spec (see module docstring) into validated instances.

    ``limit`` keeps ``limit`` rows of the file chosen by :func:`sample_rows`: a seeded random
    sample (``sample_seed``, default 0) in file order, or the first ``limit`` rows when
    ``sample_seed is None``. Only the kept rows are adapted and validated; their row numbers in
    errors are the rows of the file. For ``construct`` (generated, already seeded) ``limit`` is
    the number of records ``n`` and ``sample_seed`` is not used.
    Raises :class:`InputError` naming file, row and field on any bad row.
    """
    s = SourceSpec.parse(spec)
    if s.adapter == "construct":
        try:
            n, seed = int(s.params.get("n", limit or 12)), int(s.params.get("seed", 0))
        except ValueError as exc:
            raise InputError(spec, f"construct parameters n and seed must be integers ({exc})") from None
        if not 1 <= n <= MAX_CONSTRUCT:
            raise InputError(
                spec,
                f"construct needs 1 <= n <= {MAX_CONSTRUCT:,} records, got {n}"
                + (" (from --limit / limit)" if "n" not in s.params else ""),
            )
        xs = construct_dataset(n=n, seed=seed)
        validate_instances(xs, "construct")
        return xs
    assert s.location is not None
    if limit is not None and limit < 1:
        raise InputError(spec, f"limit must be >= 1, got {limit}")
    raw = read_rows(s.location, JSON_CELLS.get(s.adapter))
    kept = sample_rows(len(raw), limit, sample_seed)
    adapter = ADAPTERS[s.adapter]
    xs, rows = [], []
    for j in kept:
        r = dict(raw[j])
        i = int(r.pop("__row__", j + 1))  # 1-based row of the file
        xs.append(adapter(r, s.location, i))
        rows.append(i)
    validate_instances(xs, s.location, rows)
    return xs


def load_sources(
    specs: Iterable[str], limit: int | None = None, sample_seed: int | None = DEFAULT_SAMPLE_SEED
) -> list[tuple[str, SourceInstance]]:
    """Load several specs (each with :func:`load_source`, same ``limit`` and ``sample_seed``) into
    ``(spec, instance)`` pairs; ``(dataset, instance_id)`` must be unique across them
    (:class:`InputError` otherwise)."""
    out: list[tuple[str, SourceInstance]] = []
    seen: dict[tuple[str, str], str] = {}
    for spec in specs:
        for j, x in enumerate(load_source(spec, limit=limit, sample_seed=sample_seed), start=1):
            key = (x.dataset, x.instance_id)
            if key in seen:
                raise InputError(
                    spec,
                    f"instance {x.instance_id!r} of dataset {x.dataset!r} was already loaded from {seen[key]}",
                    row=j,
                    field="id",
                )
            seen[key] = spec
            out.append((spec, x))
    return out
