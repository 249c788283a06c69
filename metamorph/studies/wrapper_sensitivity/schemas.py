"""pandera schemas of the prompt-wrapper study's intermediate tables.

Lineage: ``task, item_id`` (item) → ``wrapper, template_version`` (prompt) → ``model_id, seed,
generation_key`` (generation) → ``mode`` (scored answer) → metric cells.

Metric tables
-------------
pandera schemas of the tables produced by :mod:`metamorph.studies.wrapper_sensitivity.metrics`.

One :class:`pandera.pandas.DataFrameModel` per output table of the prompt-wrapper
sensitivity study ("Format Sensitivity Index: Token-Controlled Prompt Wrapper
Robustness and Schema Compliance in LLM Benchmarking", arXiv 2607.09665, §4–5, and the
review's objections major 1, major 3 and minor 2). Every column has a description with its
unit; percentages are in percent (0–100), differences of percentages in percentage points
(pp). All models are ``strict=True`` (no undeclared column) and ``coerce=True``.

A *cell* is one (model, task, wrapper) combination; a *combination* is one (model, task).
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

from metamorph.schemas import GenerationRecord, StrictModel
from metamorph.studies.wrapper_sensitivity.vocab import (
    ANSWER_TYPES,
    CORRELATION_SCOPES,
    FAMILIES,
    INDEX_NAMES,
    INDEX_UNITS,
    MODES,
    WRAPPERS,
)

__all__ = [
    "QAItems",
    "ScoredAnswers",
    "TokenBalance",
    "WrappedPrompts",
    "WrapperCells",
    "WrapperConstrainedFalsifier",
    "WrapperCorrelation",
    "WrapperDecomposition",
    "WrapperFERegression",
    "WrapperFSI",
    "WrapperGenerations",
    "WrapperItemModel",
    "WrapperMatchedFSI",
    "WrapperMeanIndices",
    "WrapperWins",
]


class QAItems(StrictModel):
    """``qa_items``: the canonical items (item_id, task, answer_type, question, choices, gold)."""

    task: Series[str] = pa.Field(description="Task name (boolq, arc_challenge, gsm8k, ..., synth_*).")
    item_id: Series[str] = pa.Field(description="Item id, unique within its task.")
    answer_type: Series[str] = pa.Field(isin=list(ANSWER_TYPES), description="Answer type.")
    question: Series[str] = pa.Field(description="Question text (task framing included).")
    passage: Series[str] = pa.Field(nullable=True, description="Reading passage / context, or null.")
    choices_json: Series[str] = pa.Field(description="[[label, text], ...] as JSON; [] for boolean/numeric.")
    n_choices: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=2, description="Number of options (choice tasks).")
    gold: Series[str] = pa.Field(description="Canonical gold: a label, true/false, or a normalised number.")
    source: Series[str] = pa.Field(description="Source spec the item came from.")

    @pa.dataframe_check(description="(task, item_id) is unique")
    def unique_items(cls, df):  # noqa: N805
        return ~df.duplicated(["task", "item_id"], keep=False)


class WrappedPrompts(StrictModel):
    """``wrapped_prompts``: every item × wrapper family, padded to the task's character budget."""

    task: Series[str] = pa.Field(description="Task name.")
    item_id: Series[str] = pa.Field(description="Item id.")
    wrapper: Series[str] = pa.Field(isin=list(FAMILIES), description="Wrapper family (§3.2).")
    template_version: Series[str] = pa.Field(description="Version of the wrapper templates.")
    pad_chars: Series[int] = pa.Field(ge=0, description="Newline characters of padding inserted (§3.3).")
    pad_offset: Series[int] = pa.Field(ge=0, description="Character offset of the padding in the user message.")
    prompt_chars: Series[int] = pa.Field(ge=1, description="Characters of the padded prompt (= the task budget).")
    char_budget: Series[int] = pa.Field(ge=1, description="The task's character budget.")
    messages_json: Series[str] = pa.Field(description="The exact chat messages sent (JSON).")

    @pa.dataframe_check(description="every prompt of a task has exactly the task's character budget")
    def padded_to_budget(cls, df):  # noqa: N805
        return df["prompt_chars"] == df["char_budget"]


class WrapperGenerations(GenerationRecord):
    """``wrapper_generations``: model × task × wrapper × item × seed (partition = model_id)."""

    model_id: Series[str] = pa.Field(description="Registry model id (dynamic partition key).")
    task: Series[str] = pa.Field(description="Task name.")
    item_id: Series[str] = pa.Field(description="Item id.")
    wrapper: Series[str] = pa.Field(
        isin=list(WRAPPERS), description="Wrapper family, or json_constrained (constrained-decoding arm)."
    )
    seed: Series[int] = pa.Field(description="Sampling seed (part of the cache key).")

    @pa.dataframe_check(description="one row per (model, task, item, wrapper, seed)")
    def unique_cells(cls, df):  # noqa: N805
        return ~df.duplicated(["model_id", "task", "item_id", "wrapper", "seed"], keep=False)


class ScoredAnswers(StrictModel):
    """``scored_answers``: every generation under the paper's extractor (``paper``, the headline) and the
    strict / normalized / lenient variants (§3.5)."""

    model_id: Series[str] = pa.Field(description="Registry model id (partition key).")
    task: Series[str] = pa.Field(description="Task name.")
    answer_type: Series[str] = pa.Field(isin=list(ANSWER_TYPES), description="Answer type.")
    wrapper: Series[str] = pa.Field(isin=list(WRAPPERS), description="Wrapper family / arm.")
    item_id: Series[str] = pa.Field(description="Item id.")
    seed: Series[int] = pa.Field(description="Sampling seed.")
    mode: Series[str] = pa.Field(
        isin=list(MODES),
        description="Extraction variant: paper (the paper's §3.5 extractor, headline), strict, normalized, lenient.",
    )
    value: Series[str] = pa.Field(
        nullable=True, description="Extracted canonical answer; null when unparseable (never guessed)."
    )
    gold: Series[str] = pa.Field(description="The item's canonical gold (qa_items.gold).")
    parseable: Series[bool] = pa.Field(description="An answer was extracted under this mode.")
    correct: Series[bool] = pa.Field(description="parseable and value == gold.")
    reason: Series[str] = pa.Field(description="Extraction reason code (ok, truncated, no_answer, call_error, ...).")
    finish_reason: Series[str] = pa.Field(nullable=True, description="Provider finish reason (length = truncated).")
    prompt_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, description="Realised prompt tokens.")
    n_choices: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Options of a choice item (chance = 1/n).")
    generation_key: Series[str] = pa.Field(description="Generation cache key (lineage to the raw completion).")

    @pa.dataframe_check(description="an unparseable answer has no value and is never correct")
    def unparseable_has_no_value(cls, df):  # noqa: N805
        return df["parseable"] | (df["value"].isna() & ~df["correct"])


class TokenBalance(StrictModel):
    """``token_balance``: realised prompt tokens per item over the wrappers, Δtok, matched (§3.3)."""

    model_id: Series[str] = pa.Field(description="Model whose tokenizer counted the tokens.")
    task: Series[str] = pa.Field(description="Task name.")
    item_id: Series[str] = pa.Field(description="Item id.")
    n_wrappers: Series[int] = pa.Field(ge=1, description="Wrappers with a generation for the item.")
    min_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Fewest prompt tokens over wrappers.")
    max_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Most prompt tokens over wrappers.")
    tokens_json: Series[str] = pa.Field(description="{wrapper: prompt tokens} as JSON.")
    delta_tok: Series[float] = pa.Field(
        nullable=True, ge=0, description="Δtok = (max − min)/mean over wrappers (ratio); null when a count is missing."
    )
    matched: Series[bool] = pa.Field(description="Δtok ≤ 5%: the item is in the matched subset.")


# ------------------------------------------------------------------------------------------
# Metric tables
_PCT = dict(ge=0.0, le=100.0)
_PP = dict(ge=-100.0, le=100.0)
_UNIT = dict(ge=0.0, le=1.0)


class _ModelTask(StrictModel):
    model_id: Series[str] = pa.Field(description="Registry model id.")
    task: Series[str] = pa.Field(description="QA task (boolq, arc_challenge, gsm8k, ...).")


class WrapperCells(_ModelTask):
    """Per (model, task, wrapper) cell metrics on one extraction mode (§4; review major 1 for
    Acc | parseable)."""

    answer_type: Series[str] = pa.Field(isin=list(ANSWER_TYPES), description="Answer type of the task.")
    wrapper: Series[str] = pa.Field(
        description="Prompt wrapper family (plain, json, structured, structured_delim, deliberate, ...)."
    )
    mode: Series[str] = pa.Field(
        isin=list(MODES), description="Extraction mode the cell was computed on (paper = the headline)."
    )
    accuracy_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="A: % of replies correct (unparseable counts as incorrect; a failed call is no reply) (percent); "
        "null when the cell has no reply (see not_measurable).",
    )
    parseability_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="P: % of replies parseable (percent); null when the cell has no reply."
    )
    acc_given_parse_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Acc | parseable: % correct among parseable generations (percent); null when none is parseable. A = P × Acc|parse.",
    )
    truncation_rate_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="% of generations with finish_reason == 'length' (percent; a null finish_reason counts as not truncated).",
    )
    chance_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Chance accuracy of a uniform guesser: mean over generations of 100/n_choices (choice), 50 (boolean), "
        "0 (numeric) (percent); null when a choice generation lacks n_choices.",
    )
    n: Series[int] = pa.Field(
        ge=0, description="Replies in the cell, all items × seeds, failed calls left out (count)."
    )
    n_correct: Series[int] = pa.Field(ge=0, description="Correct generations (count).")
    n_parseable: Series[int] = pa.Field(ge=0, description="Parseable generations (count).")
    n_truncated: Series[int] = pa.Field(ge=0, description="Generations with finish_reason == 'length' (count).")
    n_items: Series[int] = pa.Field(ge=0, description="Distinct items with a reply in the cell (count).")
    n_seeds: Series[int] = pa.Field(ge=0, description="Distinct seeds with a reply in the cell (count).")
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )
    n_unpaired: Series[int] = pa.Field(
        ge=0,
        description="Replies left out because the same item × seed failed under another wrapper (count; only in "
        "the paired cells FSI / PSI compare, 0 in wrapper_cells).",
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's null metrics are null: 'not measurable: every call failed (N of N)', "
        "'not measurable: no reply parsed (N of N unparseable)' or no item answered under every wrapper; "
        "null when measured.",
    )


class WrapperFSI(_ModelTask):
    """Per (model, task): FSI, PSI, nFSI and the bounded chance-adjusted nFSI (§4; review minor 2)."""

    n_wrappers: Series[int] = pa.Field(ge=1, description="Wrappers with a cell for this model × task (count).")
    fsi: Series[float] = pa.Field(
        nullable=True,
        **_UNIT,
        description="FSI = max − min accuracy over wrappers as a fraction (0–1), as the paper reports it; null when n_wrappers < 2.",
    )
    psi: Series[float] = pa.Field(
        nullable=True,
        **_UNIT,
        description="PSI = max − min parseability over wrappers as a fraction (0–1), as the paper reports it; null when n_wrappers < 2.",
    )
    fsi_pp: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="FSI = max − min accuracy over wrappers (percentage points); null when n_wrappers < 2.",
    )
    psi_pp: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="PSI = max − min parseability over wrappers (percentage points); null when n_wrappers < 2.",
    )
    mean_accuracy_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Unweighted mean accuracy over the wrappers (percent); null when not measurable.",
    )
    nfsi: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        description="nFSI = FSI / (mean accuracy + 1e-6) (unitless ratio, unbounded above: up to n_wrappers); null when n_wrappers < 2.",
    )
    chance_pct: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="Chance accuracy c of the task's items (n-weighted over the cells) (percent); null when unknown.",
    )
    nfsi_chance: Series[float] = pa.Field(
        nullable=True,
        **_UNIT,
        description="Bounded chance-adjusted nFSI = max − min over wrappers of κ⁺ = clip((A − c)/(100 − c), 0, 1) "
        "(unitless, 0–1); null when n_wrappers < 2 or c unknown.",
    )
    n_below_chance: Series[int] = pa.Field(
        ge=0, description="Wrappers whose accuracy is below chance, floored to κ⁺ = 0 (count)."
    )
    best_wrapper: Series[str] = pa.Field(
        nullable=True,
        description="Wrapper(s) with the highest accuracy: every wrapper tied within 1e-9 pp, joined by ', ' in canonical order; null when n_wrappers < 2.",
    )
    worst_wrapper: Series[str] = pa.Field(
        nullable=True,
        description="Wrapper(s) with the lowest accuracy: every wrapper tied within 1e-9 pp, joined by ', ' in canonical order; null when n_wrappers < 2.",
    )
    n_best: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=1, description="Wrappers tied at the highest accuracy (count); null when n_wrappers < 2."
    )
    n_worst: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=1, description="Wrappers tied at the lowest accuracy (count); null when n_wrappers < 2."
    )
    all_tied: Series[pd.BooleanDtype] = pa.Field(
        nullable=True,
        description="Every wrapper has the same accuracy (FSI = 0; best and worst list all wrappers); null when n_wrappers < 2.",
    )
    best_accuracy_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="Accuracy of best_wrapper (percent)."
    )
    worst_accuracy_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="Accuracy of worst_wrapper (percent)."
    )
    note: Series[str] = pa.Field(
        nullable=True, description="Why an index is null (single wrapper, unknown chance), else null."
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )
    n_generations: Series[int] = pa.Field(
        ge=0, description="Generations of the model × task over its wrappers, failed calls included (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's null metrics are null: 'not measurable: every call failed (N of N)', "
        "'not measurable: no reply parsed (N of N unparseable)' or no item answered under every wrapper; "
        "null when measured.",
    )


class WrapperMeanIndices(StrictModel):
    """Mean FSI / PSI / nFSI / chance-adjusted nFSI per model with percentile bootstrap 95% CIs over tasks."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    index: Series[str] = pa.Field(
        isin=list(INDEX_NAMES),
        description="Which per-task index is averaged (FSI_fraction / PSI_fraction: FSI / PSI as fractions, as the paper reports them).",
    )
    unit: Series[str] = pa.Field(
        isin=list(INDEX_UNITS),
        description="Unit of mean/ci_low/ci_high: percentage points (FSI, PSI), fraction 0–1 (FSI_fraction, PSI_fraction) or unitless ratio (nFSI, nFSI_chance).",
    )
    mean: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        description="Mean of the index over the model's tasks (unit in 'unit'); null when n_tasks = 0.",
    )
    ci_low: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        description="Lower bound of the percentile bootstrap 95% CI over tasks; null when n_tasks < 2.",
    )
    ci_high: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        description="Upper bound of the percentile bootstrap 95% CI over tasks; null when n_tasks < 2.",
    )
    n_tasks: Series[int] = pa.Field(ge=0, description="Tasks with a defined index (count).")
    n_undefined: Series[int] = pa.Field(
        ge=0, description="Tasks whose index is null (single wrapper / unknown chance), left out (count)."
    )
    n_resamples: Series[int] = pa.Field(ge=1, description="Bootstrap resamples (count).")
    seed: Series[int] = pa.Field(description="Seed of the bootstrap generator.")
    ci_note: Series[str] = pa.Field(
        nullable=True,
        description="Why the CI is special (n=0, n=1: no interval; all values equal: CI = [v, v]); null otherwise.",
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's null metrics are null: 'not measurable: every call failed (N of N)', "
        "'not measurable: no reply parsed (N of N unparseable)' or no item answered under every wrapper; "
        "null when measured.",
    )


class WrapperCorrelation(StrictModel):
    """Pearson r(accuracy, parseability) over cells, pooled and per model (§5)."""

    scope: Series[str] = pa.Field(
        isin=list(CORRELATION_SCOPES), description="pooled = all cells; model = the cells of model_id."
    )
    model_id: Series[str] = pa.Field(nullable=True, description="Model of the cells (null for pooled).")
    r: Series[float] = pa.Field(
        nullable=True,
        ge=-1.0,
        le=1.0,
        description="Pearson r between accuracy_pct and parseability_pct (unitless); null with a note when undefined.",
    )
    p_value: Series[float] = pa.Field(
        nullable=True, ge=0.0, le=1.0, description="Two-sided p-value of r = 0 (scipy.stats.pearsonr) (probability)."
    )
    n: Series[int] = pa.Field(ge=0, description="Cells used (count).")
    note: Series[str] = pa.Field(
        nullable=True, description="Why r is null (fewer than 3 cells, constant input), else null."
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )


class WrapperFERegression(StrictModel):
    """Cell-level fixed-effects WLS A = βP + α_m + γ_t + δ_f (§5), one row."""

    beta: Series[float] = pa.Field(
        nullable=True,
        description="β̂: accuracy pp per parseability pp, within model, task and wrapper effects (unitless slope).",
    )
    se: Series[float] = pa.Field(nullable=True, ge=0.0, description="Standard error of β̂ (cov_type).")
    t_value: Series[float] = pa.Field(nullable=True, description="β̂ / SE.")
    p_value: Series[float] = pa.Field(
        nullable=True, ge=0.0, le=1.0, description="Two-sided p-value of β = 0, t with df_resid (probability)."
    )
    ci_low: Series[float] = pa.Field(nullable=True, description="Lower bound of the 95% CI of β.")
    ci_high: Series[float] = pa.Field(nullable=True, description="Upper bound of the 95% CI of β.")
    partial_r2: Series[float] = pa.Field(
        nullable=True,
        **_UNIT,
        description="Partial R² of P: (SSR_reduced − SSR_full)/SSR_reduced, weighted, reduced = fixed effects only (unitless).",
    )
    r2: Series[float] = pa.Field(nullable=True, description="Weighted R² of the full model (unitless).")
    n_cells: Series[int] = pa.Field(
        ge=0, description="Cells with a reply (observations; a cell whose every call failed is none) (count)."
    )
    n_params: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=2, description="Estimated coefficients incl. intercept and P (count)."
    )
    df_resid: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=1, description="Residual degrees of freedom = n_cells − n_params."
    )
    weights: Series[str] = pa.Field(nullable=True, description="What the WLS weights are (n = generations per cell).")
    weight_min: Series[float] = pa.Field(nullable=True, gt=0.0, description="Smallest weight (generations).")
    weight_max: Series[float] = pa.Field(nullable=True, gt=0.0, description="Largest weight (generations).")
    weight_sum: Series[float] = pa.Field(nullable=True, gt=0.0, description="Sum of the weights (generations).")
    cov_type: Series[str] = pa.Field(nullable=True, description="statsmodels covariance type of the SE.")
    effects: Series[str] = pa.Field(
        nullable=True,
        description="Fixed effects in the design (model_id, task, wrapper; those with one level are not identified and dropped).",
    )
    note: Series[str] = pa.Field(nullable=True, description="Dropped effects and other caveats, else null.")
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )


class WrapperItemModel(StrictModel):
    """Item-level linear probability model correct ~ parseable + C(model) + C(task) + C(wrapper)
    with cluster-robust SEs by item (review major 3); one row per reported term."""

    term: Series[str] = pa.Field(
        nullable=True, description="Coefficient: 'parseable' or 'wrapper[<w>]' (contrast vs the reference wrapper)."
    )
    coef: Series[float] = pa.Field(
        nullable=True, description="Coefficient (difference in P(correct), probability units −1..1)."
    )
    se: Series[float] = pa.Field(
        nullable=True,
        ge=0.0,
        description="Cluster-robust (CRV1, small-sample corrected) SE, clusters = items (task, item_id).",
    )
    se_nonrobust: Series[float] = pa.Field(
        nullable=True, ge=0.0, description="Classical OLS SE, for comparison (ignores clustering)."
    )
    t_value: Series[float] = pa.Field(nullable=True, description="coef / se.")
    p_value: Series[float] = pa.Field(
        nullable=True, ge=0.0, le=1.0, description="Two-sided p-value, t with n_clusters − 1 df (probability)."
    )
    ci_low: Series[float] = pa.Field(
        nullable=True, description="Lower bound of the 95% CI (cluster-robust, t with n_clusters − 1 df)."
    )
    ci_high: Series[float] = pa.Field(nullable=True, description="Upper bound of the 95% CI.")
    n_obs: Series[int] = pa.Field(ge=0, description="Replies (observations; failed calls left out) (count).")
    n_clusters: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=2, description="Clusters = distinct (task, item_id) (count)."
    )
    df_inference: Series[pd.Int64Dtype] = pa.Field(
        nullable=True, ge=1, description="Degrees of freedom of the t reference: n_clusters − 1."
    )
    reference_wrapper: Series[str] = pa.Field(
        nullable=True, description="Baseline level of the wrapper effect (null when one wrapper)."
    )
    mode: Series[str] = pa.Field(isin=list(MODES), description="Extraction mode (paper = the headline).")
    note: Series[str] = pa.Field(nullable=True, description="Dropped effects and other caveats, else null.")
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )


class WrapperDecomposition(_ModelTask):
    """Shapley split of each FSI (best − worst wrapper) into compliance and conditional-accuracy parts (review major 1)."""

    best_wrapper: Series[str] = pa.Field(
        nullable=True,
        description="The best wrapper the split uses: the one with the highest accuracy; among tied ones the first in canonical order (the tie is in 'note'; WrapperFSI lists all).",
    )
    worst_wrapper: Series[str] = pa.Field(
        nullable=True,
        description="The worst wrapper the split uses: the one with the lowest accuracy; among tied ones the first in canonical order (the tie is in 'note').",
    )
    fsi_pp: Series[float] = pa.Field(nullable=True, **_PCT, description="FSI = A_best − A_worst (percentage points).")
    delta_parse_pp: Series[float] = pa.Field(
        nullable=True, **_PP, description="ΔP = P_best − P_worst (percentage points)."
    )
    delta_acc_given_parse_pp: Series[float] = pa.Field(
        nullable=True,
        **_PP,
        description="ΔC = C_best − C_worst, C = Acc | parseable (percentage points); null when a wrapper has no parseable generation (default; reason in 'note').",
    )
    mean_parse_pct: Series[float] = pa.Field(nullable=True, **_PCT, description="P̄ = (P_best + P_worst)/2 (percent).")
    mean_acc_given_parse_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="C̄ = (C_best + C_worst)/2 (percent); null when a C is undefined (default)."
    )
    compliance_pp: Series[float] = pa.Field(
        nullable=True,
        **_PP,
        description="Compliance-driven part ΔP·C̄ (percentage points); compliance_pp + conditional_pp = fsi_pp; null when a C is undefined (default).",
    )
    conditional_pp: Series[float] = pa.Field(
        nullable=True, **_PP, description="Conditional-accuracy-driven part ΔC·P̄ (percentage points)."
    )
    compliance_share: Series[float] = pa.Field(
        nullable=True,
        description="compliance_pp / fsi_pp (unitless; outside [0, 1] when the parts have opposite signs); null when FSI = 0.",
    )
    note: Series[str] = pa.Field(
        nullable=True,
        description="Single wrapper, ties (which wrapper the split uses), a wrapper with no parseable generation (why the parts are null, or the convention used), else null.",
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's null metrics are null: 'not measurable: every call failed (N of N)', "
        "'not measurable: no reply parsed (N of N unparseable)' or no item answered under every wrapper; "
        "null when measured.",
    )


class WrapperWins(StrictModel):
    """Per wrapper: in how many (model, task) combinations it has the highest accuracy (§5)."""

    wrapper: Series[str] = pa.Field(description="Prompt wrapper family.")
    wins: Series[int] = pa.Field(
        ge=0,
        description="Combinations where the wrapper has the highest accuracy; every tied wrapper gets a win (count).",
    )
    tied_wins: Series[int] = pa.Field(ge=0, description="Of the wins, those shared with another tied wrapper (count).")
    n_combinations: Series[int] = pa.Field(
        ge=0, description="Combinations with ≥ 2 wrappers in which this wrapper has a cell (count)."
    )
    win_pct: Series[float] = pa.Field(
        nullable=True, **_PCT, description="wins / n_combinations (percent); null when n_combinations = 0."
    )
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )


class WrapperMatchedFSI(_ModelTask):
    """FSI / PSI on the token-matched subset (items with Δtok ≤ 5%, §3.3) next to the full FSI / PSI."""

    fsi_full_pp: Series[float] = pa.Field(nullable=True, **_PCT, description="FSI on all items (percentage points).")
    fsi_matched_pp: Series[float] = pa.Field(
        nullable=True,
        **_PCT,
        description="FSI on the matched items only (percentage points); null when none or one wrapper.",
    )
    delta_fsi_pp: Series[float] = pa.Field(
        nullable=True, **_PP, description="fsi_matched_pp − fsi_full_pp (percentage points)."
    )
    psi_full_pp: Series[float] = pa.Field(nullable=True, **_PCT, description="PSI on all items (percentage points).")
    psi_matched_pp: Series[float] = pa.Field(
        nullable=True, **_PCT, description="PSI on the matched items (percentage points)."
    )
    n_items_full: Series[int] = pa.Field(ge=1, description="Distinct items of the model × task (count).")
    n_items_matched: Series[int] = pa.Field(ge=0, description="Distinct matched items of the model × task (count).")
    note: Series[str] = pa.Field(nullable=True, description="Why a matched index is null, else null.")
    n_call_errors: Series[int] = pa.Field(
        ge=0,
        description="Generations of the row's slice left out because the call failed at the provider (count).",
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's null metrics are null: 'not measurable: every call failed (N of N)', "
        "'not measurable: no reply parsed (N of N unparseable)' or no item answered under every wrapper; "
        "null when measured.",
    )


class WrapperConstrainedFalsifier(StrictModel):
    """FSI/PSI with free vs constrained ``json`` decoding (review's falsifier)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    task: Series[str] = pa.Field(description="Task name.")
    fsi_free_pp: Series[float] = pa.Field(nullable=True, description="FSI over the five free wrappers (pp).")
    fsi_constrained_pp: Series[float] = pa.Field(
        nullable=True, description="FSI with json replaced by the constrained arm (pp)."
    )
    delta_fsi_pp: Series[float] = pa.Field(
        nullable=True, description="fsi_constrained_pp − fsi_free_pp (pp); strongly negative = FSI collapses."
    )
    psi_free_pp: Series[float] = pa.Field(nullable=True, description="PSI over the free wrappers (pp).")
    psi_constrained_pp: Series[float] = pa.Field(nullable=True, description="PSI with the constrained arm (pp).")
    json_parse_free_pct: Series[float] = pa.Field(nullable=True, description="Parseability of free json (%).")
    json_parse_constrained_pct: Series[float] = pa.Field(
        nullable=True, description="Parseability of constrained json (%)."
    )
