"""CI/CD regression gate of the WorkflowPerturb study (Kanda et al., arXiv:2602.17990
§6 and Table 1): thresholds, metric bundles, verdicts. Pure functions — no file is scored here;
:mod:`metamorph.cli` (``metamorph gate``) loads the workflows, scores them and prints.

Thresholds
----------
One *bundle* per failure mode (:data:`FAILURE_MODES`), defaults from Table 1 in
``metamorph/studies/workflow_perturb/data/gate_thresholds.json`` (:func:`load_thresholds`):

=====================  ================================  ===================================
failure mode           primary                           secondary
=====================  ================================  ===================================
``missing``            Graph F1 < 0.75, Chain F1 < 0.75  LLM judge < 0.70
``compressed``         Kendall τ < 0.65                  Graph F1 < 0.75, Chain F1 < 0.75
``description``        BLEU < 0.70, GLEU < 0.70          BERTScore F1 (rescaled) < 0.85
=====================  ================================  ===================================

The primary thresholds are Table 1's. The secondary ones are not in the paper's extracted text;
they are project choices, each following the secondary's role in App. C: judge 0.70
lies between rubric level 4 ("only one minor step missing", 0.8) and level 3 (0.6); structural F1
of the Compressed Steps bundle reuses the Missing Steps value 0.75; the Description Changes
secondary says whether the *meaning* changed, so BERTScore 0.85 lies between the lowest
Description Changes mean (0.934 at 50 %) and the highest Missing/Compressed mean (0.701) of the
rescaled MiniLM BERTScore on the shared WorFBench sample with the deterministic operators. With it
the bundle's false alarms on paraphrases fall from 9.0 % / 29.3 % (30 % / 50 %, mode ``any``) to
0 % / 0 %, the effect §6 attributes to the pairing. (The primaries' rule — the midpoint of the
10 % and 30 % means, 0.97 — would leave them at 9.0 % / 29.3 %.) Re-derive them on your own
goldens with :func:`metamorph.studies.workflow_perturb.analysis.recalibrate`.

The file format (also written by
:func:`metamorph.studies.workflow_perturb.analysis.recalibrated_thresholds`)::

    {"comparison": "<",                       # optional; only "<" is allowed
     "failure_modes": {
        "<mode>": {"name": "...",             # optional display name
                   "primary":   {"<metric>": <number>, ...},     # at least one
                   "secondary": {"<metric>": <number or null>, ...}}},   # optional
     ...}                                     # other top-level keys (description, source,
                                              # version, calibration) are kept as metadata

Metrics are :data:`GATE_METRICS`; a threshold is a finite number in the metric's range
(Kendall τ and the rescaled BERTScore in [−1, 1], every other metric in [0, 1]). Anything else raises
:class:`ThresholdsError` naming the file and the offending key.

Breach and firing (exact definitions)
-------------------------------------
* **Breach**: a metric breaches when ``value < threshold`` — strictly, after rounding both to
  :data:`BREACH_DECIMALS` (10) decimals, so float noise never decides: ``value == threshold``
  does **not** breach, and neither does 0.7499999999999999 (= 2PR/(P+R) with P = 1, R = 3/5)
  against 0.75. A null/NaN/absent value is *undefined*: it neither breaches nor passes and is
  never read as 0.
* **Bundle firing**, over the bundle's *defined* metrics (undefined ones are skipped). The
  primary family breaches when at least one defined primary breaches; the secondary family when
  at least one defined secondary with a threshold breaches.

  - mode ``"primary_and_secondary"`` (default, §6 and Table 1: a failure mode is flagged when
    its primary **and** its secondary metric breach; §6 names this pairing as what suppresses
    false alarms): fires iff the primary family breaches and the secondary family breaches.
    When **no** secondary can be evaluated (every secondary is undefined, e.g. the LLM judge was
    not run, or has no threshold) the bundle is decided by its primary family alone and the
    result says so (``secondary_evaluated = False``) — a regression is never passed because a
    secondary is missing, and a missing value is never read as a breach or a pass;
  - mode ``"any"`` (the earlier default): fires iff at least one defined primary
    breaches (secondaries reported only);
  - mode ``"joint"``: fires iff at least one primary is defined and **every** defined primary
    breaches (secondaries reported only).

  With no defined primary the bundle is ``UNDEFINED`` (not fired).
* **Verdicts**: a bundle is ``FAIL`` when it fires, ``PASS`` when it does not and has a defined
  primary, ``UNDEFINED`` otherwise. One candidate (:func:`evaluate_gate`) is ``FAIL`` iff any
  bundle fires. Several candidates (:func:`gate_report`): a failure mode is ``FAIL`` iff it fires
  on at least one pair; the gate fails iff some failure mode fails or a golden workflow has no
  candidate.
* **Exit codes** (:data:`EXIT_PASS`, :data:`EXIT_REGRESSION`, :data:`EXIT_BAD_INPUT`,
  :data:`EXIT_INTERNAL`): 0 when nothing fires, 1 on a regression (a bundle fired, or a candidate
  is missing), 2 on bad input, 3 when the gate itself failed (an unexpected error: no verdict was
  reached, so CI must not read it as a regression of the candidate, nor as a pass).

Size bound
----------
A workflow (golden or candidate) may have at most :data:`MAX_GATE_STEPS` (200) steps and
:data:`MAX_GATE_EDGES` edges; a larger one is bad input, refused when the file is read, before
any metric. The metrics align every golden step with every candidate step (an n × m similarity
matrix and an assignment over it, plus BERTScore over the aligned pairs), so time and memory
grow with the square of the steps: 1,000 steps took 14 s and 745 MB, 10,000 steps more than
400 s and 4.3 GB. WorFBench's goldens have 5 to 13 steps (the shared sample's largest: 13 steps,
19 edges), so 200 is about 15 times the largest real workflow, and a 200-step pair costs little
more than a small one: 37 s and 1.0 GB peak for the whole command against 34 s and 0.96 GB for
6 steps (mpnet encoder; loading the encoder is most of both; docs/gate.md). :data:`MAX_GATE_EDGES` is the most edges a DAG on 200 steps has without repeating
one (every pair of steps once, plus an edge from START and one into END per step).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from metamorph.datasets import read_json_file
from metamorph.errors import InputError
from metamorph.studies.workflow_perturb.vocab import DEFAULT_GATE_MODE, FAILURE_MODES, GATE_MODES, METRICS

__all__ = [
    "BREACH_DECIMALS",
    "COMPARISON",
    "DEFAULT_MODE",
    "EXIT_BAD_INPUT",
    "EXIT_INTERNAL",
    "EXIT_PASS",
    "EXIT_REGRESSION",
    "FAILURE_MODES",
    "GATE_METRICS",
    "MAX_GATE_EDGES",
    "MAX_GATE_STEPS",
    "METRIC_RANGES",
    "MODES",
    "Bundle",
    "BundleResult",
    "GateReport",
    "GateResult",
    "MetricCheck",
    "Thresholds",
    "ThresholdsError",
    "breaches",
    "bundle_decision",
    "default_thresholds",
    "default_thresholds_path",
    "evaluate_bundle",
    "evaluate_gate",
    "gate_report",
    "load_thresholds",
    "metric_value",
    "secondary_evaluated",
    "thresholds_from_dict",
    "bundle_decisions",
]

#: Metrics a bundle may name (the judge is never computed by the gate itself; it is reported
#: as undefined unless the metrics dict carries it).
GATE_METRICS = METRICS
#: Closed range of each metric (a threshold must lie in it).
METRIC_RANGES: dict[str, tuple[float, float]] = {m: (0.0, 1.0) for m in GATE_METRICS} | {
    "kendall_tau": (-1.0, 1.0),
    "bertscore_f1": (-1.0, 1.0),
}  # rescaled BERTScore can be negative
#: Bundle firing modes (the first is the default; see the module docstring).
MODES = GATE_MODES
DEFAULT_MODE = DEFAULT_GATE_MODE
#: Values and thresholds are rounded to this many decimals before ``<`` (no float artefacts).
BREACH_DECIMALS = 10
#: The only comparison: a metric breaches when ``value < threshold``.
COMPARISON = "<"
EXIT_PASS, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
#: The gate itself failed (an unexpected error, not the input and not the candidate): no verdict.
EXIT_INTERNAL = 3
#: Most steps of one workflow the gate scores (module docstring, "Size bound").
MAX_GATE_STEPS = 200
#: Most edges of one workflow: a DAG on MAX_GATE_STEPS steps with every pair of steps joined once,
#: plus START -> step and step -> END for every step.
MAX_GATE_EDGES = MAX_GATE_STEPS * (MAX_GATE_STEPS - 1) // 2 + 2 * MAX_GATE_STEPS
PASS, FAIL, UNDEFINED = "PASS", "FAIL", "UNDEFINED"

_PACKAGE_FILE = ("data", "gate_thresholds.json")
_BUNDLE_KEYS = {"name", "primary", "secondary", "description"}


class ThresholdsError(InputError):
    """A thresholds file (or dict) is missing, not JSON, or breaks the format; names the file."""


# --------------------------------------------------------------------------- thresholds


@dataclass(frozen=True)
class Bundle:
    """The metric bundle of one failure mode.

    Attributes:
        failure_mode: key (``missing``, ``compressed``, ``description`` or a custom one).
        name: display name (``Missing Steps``...).
        primary: ``(metric, threshold)`` pairs that decide (at least one).
        secondary: ``(metric, threshold or None)`` pairs that are only reported.
    """

    failure_mode: str
    name: str
    primary: tuple[tuple[str, float], ...]
    secondary: tuple[tuple[str, float | None], ...] = ()

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.primary) + tuple(m for m, _ in self.secondary)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "primary": dict(self.primary), "secondary": dict(self.secondary)}


@dataclass(frozen=True)
class Thresholds:
    """All bundles, in file order, plus where they came from and the file's other keys."""

    bundles: tuple[Bundle, ...]
    source: str = "<dict>"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def bundle(self, failure_mode: str) -> Bundle:
        for b in self.bundles:
            if b.failure_mode == failure_mode:
                return b
        raise KeyError(f"no bundle for failure mode {failure_mode!r}; have {[b.failure_mode for b in self.bundles]}")

    @property
    def failure_modes(self) -> tuple[str, ...]:
        return tuple(b.failure_mode for b in self.bundles)

    def to_dict(self) -> dict[str, Any]:
        """The JSON file format (metadata keys first, then ``comparison`` and ``failure_modes``)."""
        out = {k: v for k, v in self.meta.items() if k not in ("comparison", "failure_modes")}
        out["comparison"] = COMPARISON
        out["failure_modes"] = {b.failure_mode: b.to_dict() for b in self.bundles}
        return out


def _threshold(value: Any, metric: str, source: str, where: str, *, nullable: bool) -> float | None:
    if value is None:
        if nullable:
            return None
        raise ThresholdsError(source, "a primary threshold must be a number, got null", field=where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ThresholdsError(source, f"threshold must be a number, got {value!r:.40}", field=where)
    v = float(value)
    lo, hi = METRIC_RANGES[metric]
    if not math.isfinite(v):
        raise ThresholdsError(source, f"threshold must be a finite number, got {value!r}", field=where)
    if not lo <= v <= hi:
        raise ThresholdsError(
            source, f"threshold {value!r} is outside the range [{lo:g}, {hi:g}] of {metric}", field=where
        )
    return v


def _metric_map(obj: Any, source: str, where: str, *, nullable: bool) -> tuple[tuple[str, float | None], ...]:
    if not isinstance(obj, Mapping):
        raise ThresholdsError(source, f"must be an object {{metric: threshold}}, got {type(obj).__name__}", field=where)
    out = []
    for metric, value in obj.items():
        if metric not in GATE_METRICS:
            raise ThresholdsError(
                source, f"unknown metric {metric!r}; known: {list(GATE_METRICS)}", field=f"{where}.{metric}"
            )
        out.append((metric, _threshold(value, metric, source, f"{where}.{metric}", nullable=nullable)))
    return tuple(out)


def thresholds_from_dict(data: Any, source: str = "<dict>") -> Thresholds:
    """Validate the thresholds format (module docstring) and build :class:`Thresholds`.

    Raises:
        ThresholdsError: not an object; ``comparison`` other than ``"<"``; no or empty
            ``failure_modes``; a bundle that is not an object, has unknown keys, no primary
            metric, an unknown metric, a metric both primary and secondary, or a threshold that
            is not a finite number in the metric's range (null is allowed for secondaries only).
    """
    if not isinstance(data, Mapping):
        raise ThresholdsError(source, f"the thresholds must be a JSON object, got {type(data).__name__}")
    if data.get("comparison", COMPARISON) != COMPARISON:
        raise ThresholdsError(
            source,
            f"only the comparison {COMPARISON!r} (breach iff value < threshold) is supported, "
            f"got {data['comparison']!r}",
            field="comparison",
        )
    modes = data.get("failure_modes")
    if not isinstance(modes, Mapping) or not modes:
        raise ThresholdsError(
            source, "needs a non-empty object 'failure_modes' {mode: {primary, secondary}}", field="failure_modes"
        )
    bundles = []
    for fm, spec in modes.items():
        where = f"failure_modes.{fm}"
        if fm not in FAILURE_MODES:
            raise ThresholdsError(source, f"unknown failure mode {fm!r}; known: {list(FAILURE_MODES)}", field=where)
        if not isinstance(spec, Mapping):
            raise ThresholdsError(
                source, f"must be an object with 'primary' (and 'secondary'), got {type(spec).__name__}", field=where
            )
        unknown = sorted(set(spec) - _BUNDLE_KEYS)
        if unknown:
            raise ThresholdsError(source, f"unknown key(s) {unknown}; allowed: {sorted(_BUNDLE_KEYS)}", field=where)
        if "primary" not in spec:
            raise ThresholdsError(source, "missing 'primary'", field=where)
        primary = _metric_map(spec["primary"], source, f"{where}.primary", nullable=False)
        if not primary:
            raise ThresholdsError(source, "needs at least one primary metric", field=f"{where}.primary")
        secondary = _metric_map(spec.get("secondary") or {}, source, f"{where}.secondary", nullable=True)
        both = sorted({m for m, _ in primary} & {m for m, _ in secondary})
        if both:
            raise ThresholdsError(source, f"metric(s) {both} are both primary and secondary", field=where)
        name = spec.get("name", fm)
        if not isinstance(name, str) or not name.strip():
            raise ThresholdsError(source, "name must be a non-empty string", field=f"{where}.name")
        bundles.append(Bundle(str(fm), name, primary, secondary))  # type: ignore[arg-type]
    meta = {k: v for k, v in data.items() if k != "failure_modes"}
    return Thresholds(tuple(bundles), source, meta)


def default_thresholds_path():
    """The packaged Table-1 defaults (``metamorph/studies/workflow_perturb/data/gate_thresholds.json``) as a resource path."""
    return resources.files(__package__).joinpath(*_PACKAGE_FILE)


def load_thresholds(path: str | Path | None = None) -> Thresholds:
    """Read and validate a thresholds JSON file; ``None`` = the packaged Table-1 defaults.

    A file may list only some failure modes: the missing ones keep the Table-1 defaults (a
    partial file never switches a failure mode off). Unknown failure-mode names are errors, and
    so is a file listing none (``{"failure_modes": {}}`` would otherwise pass silently as the
    defaults).

    Raises:
        ThresholdsError: the file does not exist or cannot be read, is not valid JSON (line and
            column given), or breaks the format (:func:`thresholds_from_dict`). The message
            starts with the file's path.
    """
    if path is None:
        res = default_thresholds_path()
        return thresholds_from_dict(
            read_json_file(res, "thresholds file", ThresholdsError),
            "metamorph/studies/workflow_perturb/data/gate_thresholds.json",
        )
    p = Path(path)
    if not p.is_file():
        raise ThresholdsError(str(p), "thresholds file not found" if not p.exists() else "not a regular file")
    data = read_json_file(p, "thresholds file", ThresholdsError)
    if isinstance(data, Mapping) and isinstance(data.get("failure_modes"), Mapping) and data["failure_modes"]:
        # a user file may override some failure modes; the others keep the Table-1 defaults, so a
        # partial file can never silently switch a failure mode off
        defaults = read_json_file(default_thresholds_path(), "thresholds file", ThresholdsError)["failure_modes"]
        data = {**data, "failure_modes": {**defaults, **data["failure_modes"]}}
    return thresholds_from_dict(data, str(p))


def default_thresholds() -> Thresholds:
    """:func:`load_thresholds` of the packaged defaults."""
    return load_thresholds(None)


# --------------------------------------------------------------------------- evaluation


def metric_value(metrics: Mapping[str, Any], metric: str) -> float | None:
    """The metric's value as a float, or ``None`` when absent, None or NaN (undefined).

    Raises ``ValueError`` for a value that is not a number (a bool included)."""
    v = metrics.get(metric)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise ValueError(f"metric {metric!r} must be a number or None, got {v!r:.40}")
    f = float(v)
    return None if math.isnan(f) else f


def breaches(value: float | None, threshold: float | None) -> bool | None:
    """``round(value, 10) < round(threshold, 10)`` (strict; equality does not breach, float noise
    below 1e-10 never decides); ``None`` when either is undefined. source: Table 1, App. C."""
    if value is None or threshold is None:
        return None
    return bool(round(float(value), BREACH_DECIMALS) < round(float(threshold), BREACH_DECIMALS))


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")


def secondary_evaluated(values: Mapping[str, Any], bundle: Bundle) -> bool:
    """Whether at least one secondary metric of ``bundle`` has a value and a threshold."""
    return any(breaches(metric_value(values, m), t) is not None for m, t in bundle.secondary)


def bundle_decision(values: Mapping[str, Any], bundle: Bundle, mode: str = DEFAULT_MODE) -> tuple[bool, bool]:
    """``(defined, fired)`` of ``bundle`` on one instance's metric values (module docstring).

    ``defined``: at least one primary value is defined. ``fired``: mode
    ``primary_and_secondary`` — some defined primary breaches and some defined secondary breaches
    (the primary alone when no secondary can be evaluated); ``any`` — some defined primary
    breaches; ``joint`` — every defined primary breaches. Raises ``ValueError`` for an unknown
    mode or a non-numeric value. source: §6, Table 1."""
    _check_mode(mode)
    flags = [breaches(metric_value(values, m), t) for m, t in bundle.primary]
    known = [f for f in flags if f is not None]
    if not known:
        return False, False
    if mode == "joint":
        return True, all(known)
    primary = any(known)
    if mode == "any" or not primary:
        return True, primary
    sec = [breaches(metric_value(values, m), t) for m, t in bundle.secondary]
    sec_known = [f for f in sec if f is not None]
    return True, (any(sec_known) if sec_known else True)


def _breach_columns(values: Mapping[str, Any], metric: str, threshold: float | None, n: int):
    """``(known, breached)`` boolean arrays of :func:`breaches` over a column of values."""
    import numpy as np

    v = np.asarray(values[metric], dtype=float) if metric in values else np.full(n, np.nan)
    known = ~np.isnan(v) if threshold is not None else np.zeros(n, dtype=bool)
    if threshold is None:
        return known, known
    t = float(threshold)
    out = v < t
    # round(v, 10) < round(t, 10) decides only where v is within 1e-9 of t: Python's round there
    near = np.flatnonzero(known & (np.abs(v - t) <= 1e-9))
    out[near] = [breaches(float(v[i]), t) for i in near]
    return known, out & known


def bundle_decisions(values: Mapping[str, Any], bundle: Bundle, mode: str = DEFAULT_MODE):
    """:func:`bundle_decision` over many instances at once: ``values`` maps each metric to a
    column of numbers (NaN = undefined; a missing metric is undefined), e.g. a DataFrame of
    float columns. Returns ``(defined, fired)`` boolean numpy arrays, row ``i`` equal to
    ``bundle_decision`` of row ``i`` (the same strict comparison rounded to
    :data:`BREACH_DECIMALS`). source: §6, Table 1."""
    import numpy as np

    _check_mode(mode)
    n = len(values[next(iter(values))]) if len(values.keys()) else 0
    prim = [_breach_columns(values, m, t, n) for m, t in bundle.primary]
    defined = np.logical_or.reduce([k for k, _ in prim]) if prim else np.zeros(n, dtype=bool)
    if mode == "joint":
        return defined, defined & np.logical_and.reduce([b | ~k for k, b in prim])
    primary = np.logical_or.reduce([b for _, b in prim]) if prim else np.zeros(n, dtype=bool)
    if mode == "any":
        return defined, primary
    sec = [_breach_columns(values, m, t, n) for m, t in bundle.secondary]
    if not sec:
        return defined, primary
    sec_known = np.logical_or.reduce([k for k, _ in sec])
    sec_fired = np.logical_or.reduce([b for _, b in sec])
    return defined, primary & (sec_fired | ~sec_known)


@dataclass(frozen=True)
class MetricCheck:
    """One metric of a bundle: its value, threshold and whether it breaches (None = undefined)."""

    metric: str
    role: str  # "primary" | "secondary"
    value: float | None
    threshold: float | None
    breached: bool | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "role": self.role,
            "value": self.value,
            "threshold": self.threshold,
            "comparison": COMPARISON,
            "breached": self.breached,
        }


@dataclass(frozen=True)
class BundleResult:
    """The verdict of one failure mode's bundle on one candidate."""

    failure_mode: str
    name: str
    mode: str
    verdict: str  # PASS | FAIL | UNDEFINED
    primary: tuple[MetricCheck, ...]
    secondary: tuple[MetricCheck, ...]
    secondary_evaluated: bool = False

    @property
    def fired(self) -> bool:
        return self.verdict == FAIL

    def to_dict(self) -> dict[str, Any]:
        return {
            "failure_mode": self.failure_mode,
            "name": self.name,
            "mode": self.mode,
            "verdict": self.verdict,
            "fired": self.fired,
            "secondary_evaluated": self.secondary_evaluated,
            "primary": [c.to_dict() for c in self.primary],
            "secondary": [c.to_dict() for c in self.secondary],
        }


def evaluate_bundle(metrics: Mapping[str, Any], bundle: Bundle, mode: str = DEFAULT_MODE) -> BundleResult:
    """Evaluate one bundle on one candidate's metrics (see :func:`bundle_decision`)."""
    defined, fired = bundle_decision(metrics, bundle, mode)

    def check(metric: str, threshold: float | None, role: str) -> MetricCheck:
        v = metric_value(metrics, metric)
        return MetricCheck(metric, role, v, threshold, breaches(v, threshold))

    verdict = FAIL if fired else PASS if defined else UNDEFINED
    return BundleResult(
        bundle.failure_mode,
        bundle.name,
        mode,
        verdict,
        tuple(check(m, t, "primary") for m, t in bundle.primary),
        tuple(check(m, t, "secondary") for m, t in bundle.secondary),
        secondary_evaluated(metrics, bundle),
    )


@dataclass(frozen=True)
class GateResult:
    """All bundles on one candidate. ``verdict`` is FAIL iff some bundle fires."""

    mode: str
    bundles: tuple[BundleResult, ...]

    @property
    def fired_modes(self) -> tuple[str, ...]:
        return tuple(b.failure_mode for b in self.bundles if b.fired)

    @property
    def verdict(self) -> str:
        return FAIL if self.fired_modes else PASS

    def bundle(self, failure_mode: str) -> BundleResult:
        for b in self.bundles:
            if b.failure_mode == failure_mode:
                return b
        raise KeyError(failure_mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "mode": self.mode,
            "fired": list(self.fired_modes),
            "failure_modes": [b.to_dict() for b in self.bundles],
        }


def evaluate_gate(
    metrics: Mapping[str, Any], thresholds: Thresholds | None = None, mode: str = DEFAULT_MODE
) -> GateResult:
    """Every bundle of ``thresholds`` (default: :func:`default_thresholds`) on one candidate.

    ``metrics`` maps metric names to values (e.g. the dict of
    :func:`metamorph.studies.workflow_perturb.metrics.score_workflow`); absent, None or NaN values are undefined.
    Pure: no I/O besides reading the packaged defaults when ``thresholds`` is None.
    """
    _check_mode(mode)
    th = thresholds if thresholds is not None else default_thresholds()
    return GateResult(mode, tuple(evaluate_bundle(metrics, b, mode) for b in th.bundles))


@dataclass(frozen=True)
class GateReport:
    """The gate over several (golden, candidate) pairs.

    Attributes:
        mode: bundle firing mode.
        pairs: ``(pair id, GateResult)`` in golden order.
        missing_candidates: golden ids without a candidate (each is a failure).
        extra_candidates: candidate ids without a golden (reported, not a failure).
        failure_modes: ``(failure_mode, name)`` of the thresholds, in order.
    """

    mode: str
    pairs: tuple[tuple[str, GateResult], ...]
    missing_candidates: tuple[str, ...] = ()
    extra_candidates: tuple[str, ...] = ()
    failure_modes: tuple[tuple[str, str], ...] = ()

    def mode_summary(self) -> list[dict[str, Any]]:
        """Per failure mode: verdict (FAIL iff it fires on ≥ 1 pair; UNDEFINED iff undefined on
        every pair), pairs fired / defined / total and the ids of the pairs where it fired."""
        out = []
        for fm, name in self.failure_modes:
            res = [(pid, g.bundle(fm)) for pid, g in self.pairs]
            fired = [pid for pid, b in res if b.fired]
            defined = sum(b.verdict != UNDEFINED for _, b in res)
            verdict = FAIL if fired else PASS if defined else UNDEFINED
            out.append(
                {
                    "failure_mode": fm,
                    "name": name,
                    "verdict": verdict,
                    "n_fired": len(fired),
                    "n_defined": defined,
                    "n_pairs": len(res),
                    "fired_pairs": fired,
                }
            )
        return out

    @property
    def verdict(self) -> str:
        bad = self.missing_candidates or any(g.verdict == FAIL for _, g in self.pairs)
        return FAIL if bad else PASS

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.verdict == FAIL else EXIT_PASS

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "mode": self.mode,
            "comparison": f"value {COMPARISON} threshold breaches",
            "failure_modes": self.mode_summary(),
            "missing_candidates": list(self.missing_candidates),
            "extra_candidates": list(self.extra_candidates),
            "pairs": [{"id": pid, **g.to_dict()} for pid, g in self.pairs],
        }


def gate_report(
    pair_metrics: Iterable[tuple[str, Mapping[str, Any]]],
    thresholds: Thresholds | None = None,
    mode: str = DEFAULT_MODE,
    *,
    missing_candidates: Sequence[str] = (),
    extra_candidates: Sequence[str] = (),
) -> GateReport:
    """:func:`evaluate_gate` on each ``(pair id, metrics)``, collected in a :class:`GateReport`."""
    th = thresholds if thresholds is not None else default_thresholds()
    pairs = tuple((str(pid), evaluate_gate(m, th, mode)) for pid, m in pair_metrics)
    return GateReport(
        mode,
        pairs,
        tuple(missing_candidates),
        tuple(extra_candidates),
        tuple((b.failure_mode, b.name) for b in th.bundles),
    )
