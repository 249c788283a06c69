"""pandera schemas of every OrderProbe table.

Lineage: ``item_id`` (item) → ``pattern`` (scrambled input; ``ABCD`` = the unperturbed run) →
``setting, template_version`` (prompt) → ``model_id, generation_key`` (generation) → scored reply
→ metric cells. Percentages are in percent (0–100); S_* scores are in [0, 1] (S_seq may leave
[0, 1], see :mod:`.semantic`).
"""

from __future__ import annotations

import pandera.pandas as pa
from pandera.typing.pandas import Series

from metamorph.schemas import GenerationRecord, StrictModel
from metamorph.studies.order_probe.vocab import (
    BREAKDOWN_DIMENSIONS,
    INPUT_KINDS,
    ITEM_STATUSES,
    LANGUAGES,
    PARSE_REASONS,
    POOLED_LANGUAGE,
    SETTINGS,
    STRUCTURES,
)

__all__ = [
    "LANGS_ALL",
    "PATTERN_RE",
    "Diagnostics",
    "ErrorCategories",
    "OrderGenerations",
    "OrderItems",
    "OrderPrompts",
    "RecoveryBreakdown",
    "RecoveryRates",
    "RecoveryRegression",
    "ScoredReplies",
    "ScrambledInputs",
    "SemanticScores",
]

LANGS_ALL = [*LANGUAGES, POOLED_LANGUAGE]
PATTERN_RE = r"^[ABCD]{4}$"


class OrderItems(StrictModel):
    """``order_items``: one row per canonical expression."""

    item_id: Series[str] = pa.Field(unique=True, description="Item id (the source's id).")
    language: Series[str] = pa.Field(isin=list(LANGUAGES), description="zh_cn, zh_tw, ja or ko.")
    canonical: Series[str] = pa.Field(
        str_length={"min_value": 4, "max_value": 4}, description="The four-unit expression in canonical order (= gold)."
    )
    meanings_json: Series[str] = pa.Field(description="Reference meanings as a JSON list (may be []).")
    n_meanings: Series[int] = pa.Field(ge=0, description="Number of reference meanings.")
    structure: Series[str] = pa.Field(
        nullable=True, isin=list(STRUCTURES), description="Syntactic structure label, or null when the source has none."
    )
    frequency: Series[float] = pa.Field(nullable=True, gt=0, description="Corpus frequency, or null.")
    repeated_unit: Series[bool] = pa.Field(description="The expression repeats a unit (fewer distinct orders).")
    source: Series[str] = pa.Field(description="Source spec the item came from.")


class ScrambledInputs(StrictModel):
    """``scrambled_inputs``: item × 23 patterns, plus the unperturbed run (pattern ABCD)."""

    item_id: Series[str] = pa.Field(description="Item id.")
    language: Series[str] = pa.Field(isin=list(LANGUAGES), description="Language.")
    canonical: Series[str] = pa.Field(description="Gold expression.")
    pattern: Series[str] = pa.Field(
        str_matches=PATTERN_RE, description="Pattern name (ABDC … DCBA; ABCD = unperturbed)."
    )
    pattern_index: Series[int] = pa.Field(ge=0, le=23, description="0–22 lexicographic; 23 = unperturbed.")
    input_kind: Series[str] = pa.Field(isin=list(INPUT_KINDS), description="Scrambled or unperturbed run.")
    scrambled: Series[str] = pa.Field(description="The input string shown to the model.")
    kept_adjacent: Series[int] = pa.Field(
        ge=0, le=3, description="Canonical adjacent pairs (AB, BC, CD) kept in order."
    )
    status: Series[str] = pa.Field(
        isin=list(ITEM_STATUSES),
        description="scored; equals_canonical (dropped: already solved); duplicate "
        "(dropped: same string as an earlier pattern of the item).",
    )
    duplicate_of: Series[str] = pa.Field(nullable=True, description="For duplicates: the pattern that is scored.")
    sent: Series[bool] = pa.Field(description="Sent to the models (status == scored).")

    @pa.dataframe_check(description="(item_id, pattern) is unique")
    def unique_rows(cls, df):  # noqa: N805
        return ~df.duplicated(["item_id", "pattern"], keep=False)


class OrderPrompts(StrictModel):
    """``order_prompts``: every sent input × setting, with the exact messages and template version."""

    item_id: Series[str] = pa.Field(description="Item id.")
    language: Series[str] = pa.Field(isin=list(LANGUAGES), description="Language.")
    pattern: Series[str] = pa.Field(str_matches=PATTERN_RE, description="Pattern name.")
    input_kind: Series[str] = pa.Field(isin=list(INPUT_KINDS), description="Scrambled or unperturbed.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="zero_shot, cot or few_shot.")
    template_version: Series[str] = pa.Field(description="Prompt template version (plan.TEMPLATE_VERSION).")
    messages_json: Series[str] = pa.Field(description="The exact chat messages (JSON).")
    stop_json: Series[str] = pa.Field(description="Stop sequences (JSON list).")
    max_tokens: Series[int] = pa.Field(ge=1, description="Completion budget in tokens.")


class OrderGenerations(GenerationRecord):
    """``order_generations``: model × setting × item × input completions (per model partition)."""

    model_id: Series[str] = pa.Field(description="Registry model id (partition).")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    item_id: Series[str] = pa.Field(description="Item id.")
    language: Series[str] = pa.Field(isin=list(LANGUAGES), description="Language.")
    pattern: Series[str] = pa.Field(str_matches=PATTERN_RE, description="Pattern name.")
    input_kind: Series[str] = pa.Field(isin=list(INPUT_KINDS), description="Scrambled or unperturbed.")


class ScoredReplies(StrictModel):
    """``scored_replies``: every generation parsed and scored (per model partition)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    language: Series[str] = pa.Field(isin=list(LANGUAGES), description="Language.")
    item_id: Series[str] = pa.Field(description="Item id.")
    pattern: Series[str] = pa.Field(str_matches=PATTERN_RE, description="Pattern name.")
    input_kind: Series[str] = pa.Field(isin=list(INPUT_KINDS), description="Scrambled or unperturbed.")
    scrambled: Series[str] = pa.Field(description="Input string.")
    canonical: Series[str] = pa.Field(description="Gold expression.")
    structure: Series[str] = pa.Field(nullable=True, description="Structure label or null.")
    frequency: Series[float] = pa.Field(nullable=True, description="Frequency or null.")
    kept_adjacent: Series[int] = pa.Field(ge=0, le=3, description="Canonical adjacent pairs kept.")
    expression: Series[str] = pa.Field(nullable=True, description="Parsed expression; null when the parse failed.")
    explanation: Series[str] = pa.Field(
        nullable=True, description="Parsed explanation ('' if none; null on call error)."
    )
    parse_ok: Series[bool] = pa.Field(description="A unique four-unit candidate was found.")
    reason: Series[str] = pa.Field(isin=[*PARSE_REASONS, "call_error"], description="Parse outcome.")
    correct: Series[bool] = pa.Field(description="Exact match with the gold (a parse failure is incorrect).")
    finish_reason: Series[str] = pa.Field(nullable=True, description="stop / length.")
    generation_key: Series[str] = pa.Field(description="Generation cache key (lineage).")


class _Rate(StrictModel):
    n_items: Series[int] = pa.Field(ge=0, description="Canonical expressions in the cell.")
    n_inputs: Series[int] = pa.Field(ge=0, description="Scored scrambled inputs in the cell (call errors left out).")
    n_correct: Series[int] = pa.Field(ge=0, description="Exactly recovered inputs.")
    recovery_pct: Series[float] = pa.Field(
        nullable=True, ge=0, le=100, description="Recovery rate (%), n_correct/n_inputs."
    )
    ci_low_pct: Series[float] = pa.Field(
        nullable=True, ge=0, le=100, description="Bootstrap 95% CI low (%), resampling canonical expressions."
    )
    ci_high_pct: Series[float] = pa.Field(nullable=True, ge=0, le=100, description="Bootstrap 95% CI high (%).")
    ci_note: Series[str] = pa.Field(nullable=True, description="Why the CI is degenerate or absent, else null.")
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Generations of the row's slice left out because the call failed at the provider (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's metric is null: 'not measurable: every call failed (N of N)' or "
        "'not measurable: no reply parsed (N of N unparseable)'; null when measured.",
    )


class RecoveryRates(_Rate):
    """``recovery_rates``: recovery per model × language × setting (language 'all' = pooled)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    language: Series[str] = pa.Field(isin=LANGS_ALL, description="Language or 'all'.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    parse_failure_pct: Series[float] = pa.Field(
        nullable=True, ge=0, le=100, description="Scrambled inputs whose reply had no unique candidate (%)."
    )
    unperturbed_recovery_pct: Series[float] = pa.Field(
        nullable=True, ge=0, le=100, description="Recovery on the unperturbed run (%)."
    )
    n_dropped_equal: Series[int] = pa.Field(ge=0, description="Variants equal to the canonical, dropped (not scored).")
    n_dropped_duplicate: Series[int] = pa.Field(ge=0, description="Duplicate variant strings, scored once.")


class RecoveryBreakdown(_Rate):
    """``recovery_breakdown``: recovery per model × language × setting × dimension level."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    language: Series[str] = pa.Field(isin=LANGS_ALL, description="Language or 'all'.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    dimension: Series[str] = pa.Field(isin=list(BREAKDOWN_DIMENSIONS), description="Breakdown dimension.")
    level: Series[str] = pa.Field(
        description="Pattern name, structure label, frequency bin (high/mid/low) or number of kept adjacent pairs."
    )


class ErrorCategories(StrictModel):
    """``error_categories``: mutually exclusive outcome categories of scrambled inputs."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    language: Series[str] = pa.Field(isin=LANGS_ALL, description="Language or 'all'.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    category: Series[str] = pa.Field(
        description="exact, related_non_canonical, valid_unrelated, literal_recombination, malformed, other."
    )
    n: Series[int] = pa.Field(ge=0, description="Inputs in the category.")
    pct: Series[float] = pa.Field(
        nullable=True, ge=0, le=100, description="Share of the cell's replies (%), call errors left out."
    )
    rule: Series[str] = pa.Field(description="The mechanical rule deciding the category.")
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Generations of the row's slice left out because the call failed at the provider (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's metric is null: 'not measurable: every call failed (N of N)' or "
        "'not measurable: no reply parsed (N of N unparseable)'; null when measured.",
    )


class SemanticScores(StrictModel):
    """``semantic_scores``: S_Acc, S_Logic, S_Info per generation (explanation vs references)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    language: Series[str] = pa.Field(isin=list(LANGUAGES), description="Language.")
    item_id: Series[str] = pa.Field(description="Item id.")
    pattern: Series[str] = pa.Field(str_matches=PATTERN_RE, description="Pattern (ABCD = unperturbed).")
    structure: Series[str] = pa.Field(nullable=True, description="Structure label or null.")
    n_references: Series[int] = pa.Field(ge=0, description="Reference meanings (split on '||').")
    fbeta: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="Content F-beta (beta=2), max over references."
    )
    s_acc: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="S_Acc in [0,1]; null when not computable.")
    s_acc_components: Series[str] = pa.Field(description="Components used in S_Acc and their weights.")
    s_logic: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="S_Logic, P(explanation ⇒ reference), max."
    )
    s_logic_note: Series[str] = pa.Field(nullable=True, description="Why S_Logic is null.")
    rouge_l_precision: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="ROUGE-L precision (best reference)."
    )
    verbosity_penalty: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="Verbosity penalty (best reference)."
    )
    s_info: Series[float] = pa.Field(
        nullable=True, ge=0, le=1, description="S_Info = P_ROUGE-L × penalty, max over references."
    )
    note: Series[str] = pa.Field(nullable=True, description="Why the scores are null (no reference, call error).")


class Diagnostics(StrictModel):
    """``diagnostics``: S_* per model × language × setting (language 'all' = pooled)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    language: Series[str] = pa.Field(isin=LANGS_ALL, description="Language or 'all'.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    n_items: Series[int] = pa.Field(ge=0, description="Items with a computable S_Acc.")
    s_acc_mean: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Mean S_Acc over scrambled inputs.")
    s_logic: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Mean S_Logic, or null (see note).")
    s_info: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Mean S_Info over scrambled inputs.")
    s_cons: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="S_Cons = mean over items of (1−E)(1−R).")
    mdr: Series[float] = pa.Field(nullable=True, description="Mean relative drop vs the unperturbed run.")
    mda: Series[float] = pa.Field(nullable=True, description="Max over permutations of the mean relative drop.")
    s_seq: Series[float] = pa.Field(nullable=True, description="1 − (0.5·MDR + 0.5·MDA).")
    s_struct: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="1 − CV of per-structure means, clipped.")
    s_rob: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Harmonic mean of clip(S_seq) and S_struct.")
    components: Series[str] = pa.Field(description="S_Acc components used (and S_Logic model, if any).")
    note: Series[str] = pa.Field(nullable=True, description="Why any score is null.")
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Generations of the row's slice left out because the call failed at the provider (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's metric is null: 'not measurable: every call failed (N of N)' or "
        "'not measurable: no reply parsed (N of N unparseable)'; null when measured.",
    )


class RecoveryRegression(StrictModel):
    """``recovery_regression``: Logit of exact recovery per model × setting (statsmodels)."""

    model_id: Series[str] = pa.Field(description="Registry model id.")
    setting: Series[str] = pa.Field(isin=list(SETTINGS), description="Prompt setting.")
    term: Series[str] = pa.Field(nullable=True, description="Predictor (log_frequency, C(language)[T.x], ...).")
    coef: Series[float] = pa.Field(nullable=True, description="Log-odds coefficient.")
    std_err: Series[float] = pa.Field(nullable=True, ge=0, description="Standard error.")
    p_value: Series[float] = pa.Field(nullable=True, ge=0, le=1, description="Wald p-value.")
    n_obs: Series[int] = pa.Field(ge=0, description="Scored inputs in the fit (call errors left out).")
    pseudo_r2: Series[float] = pa.Field(nullable=True, description="McFadden pseudo-R².")
    note: Series[str] = pa.Field(nullable=True, description="Dropped predictors or why no fit.")
    n_call_errors: Series[int] = pa.Field(
        ge=0, description="Generations of the row's slice left out because the call failed at the provider (count)."
    )
    not_measurable: Series[str] = pa.Field(
        nullable=True,
        description="Why the row's metric is null: 'not measurable: every call failed (N of N)' or "
        "'not measurable: no reply parsed (N of N unparseable)'; null when measured.",
    )
