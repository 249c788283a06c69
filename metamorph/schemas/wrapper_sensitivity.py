"""pandera schemas of the prompt-wrapper study's intermediate tables (issue #3).

Lineage: ``task, item_id`` (item) → ``wrapper, template_version`` (prompt) → ``model_id, seed,
generation_key`` (generation) → ``mode`` (scored answer) → metric cells.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

WRAPPERS = ["plain", "json", "structured", "structured_delim", "deliberate", "json_constrained"]


class _Strict(pa.DataFrameModel):
    class Config:
        strict = True
        coerce = True


class QAItems(_Strict):
    """``qa_items``: the canonical items (item_id, task, answer_type, question, choices, gold)."""

    task: Series[str] = pa.Field(description="Task name (boolq, arc_challenge, gsm8k, ..., synth_*).")
    item_id: Series[str] = pa.Field(description="Item id, unique within its task.")
    answer_type: Series[str] = pa.Field(isin=["choice", "boolean", "numeric"], description="Answer type.")
    question: Series[str] = pa.Field(description="Question text (task framing included).")
    passage: Series[str] = pa.Field(nullable=True, description="Reading passage / context, or null.")
    choices_json: Series[str] = pa.Field(description="[[label, text], ...] as JSON; [] for boolean/numeric.")
    n_choices: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=2, description="Number of options (choice tasks).")
    gold: Series[str] = pa.Field(description="Canonical gold: a label, true/false, or a normalised number.")
    source: Series[str] = pa.Field(description="Source spec the item came from.")

    @pa.dataframe_check(description="(task, item_id) is unique")
    def unique_items(cls, df):  # noqa: N805
        return ~df.duplicated(["task", "item_id"], keep=False)


class WrappedPrompts(_Strict):
    """``wrapped_prompts``: every item × wrapper family, padded to the task's character budget."""

    task: Series[str] = pa.Field(description="Task name.")
    item_id: Series[str] = pa.Field(description="Item id.")
    wrapper: Series[str] = pa.Field(isin=WRAPPERS[:5], description="Wrapper family (§3.2).")
    template_version: Series[str] = pa.Field(description="Version of the wrapper templates.")
    pad_chars: Series[int] = pa.Field(ge=0, description="Newline characters of padding inserted (§3.3).")
    pad_offset: Series[int] = pa.Field(ge=0, description="Character offset of the padding in the user message.")
    prompt_chars: Series[int] = pa.Field(ge=1, description="Characters of the padded prompt (= the task budget).")
    char_budget: Series[int] = pa.Field(ge=1, description="The task's character budget.")
    messages_json: Series[str] = pa.Field(description="The exact chat messages sent (JSON).")

    @pa.dataframe_check(description="every prompt of a task has exactly the task's character budget")
    def padded_to_budget(cls, df):  # noqa: N805
        return df["prompt_chars"] == df["char_budget"]


class WrapperGenerations(_Strict):
    """``wrapper_generations``: model × task × wrapper × item × seed (partition = model_id)."""

    model_id: Series[str] = pa.Field(description="Registry model id (dynamic partition key).")
    task: Series[str] = pa.Field(description="Task name.")
    item_id: Series[str] = pa.Field(description="Item id.")
    wrapper: Series[str] = pa.Field(isin=WRAPPERS, description="Wrapper family, or json_constrained (constrained-decoding arm).")
    seed: Series[int] = pa.Field(description="Sampling seed (part of the cache key).")
    generation_key: Series[str] = pa.Field(str_length={"min_value": 64, "max_value": 64}, description="Generation cache key.")
    request_json: Series[str] = pa.Field(description="The exact request (messages, params); no secrets.")
    response_text: Series[str] = pa.Field(nullable=True, description="Raw completion; null when the call failed.")
    finish_reason: Series[str] = pa.Field(nullable=True, description="stop / length / ...")
    prompt_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, description="Realised prompt tokens (target model's tokenizer / provider usage).")
    completion_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, ge=0, description="Completion tokens.")
    latency_s: Series[float] = pa.Field(nullable=True, ge=0, description="Call latency (s).")
    model_version: Series[str] = pa.Field(nullable=True, description="Provider-reported resolved model version.")
    cache_hit: Series[bool] = pa.Field(description="Served from the generation cache in this run.")
    error: Series[str] = pa.Field(nullable=True, description="Error of the call (never a completion).")

    @pa.dataframe_check(description="one row per (model, task, item, wrapper, seed)")
    def unique_cells(cls, df):  # noqa: N805
        return ~df.duplicated(["model_id", "task", "item_id", "wrapper", "seed"], keep=False)


class ScoredAnswers(_Strict):
    """``scored_answers``: every generation under strict / normalized / lenient extraction (§3.5)."""

    model_id: Series[str] = pa.Field(description="Registry model id (partition key).")
    task: Series[str] = pa.Field(description="Task name.")
    answer_type: Series[str] = pa.Field(isin=["choice", "boolean", "numeric"], description="Answer type.")
    wrapper: Series[str] = pa.Field(isin=WRAPPERS, description="Wrapper family / arm.")
    item_id: Series[str] = pa.Field(description="Item id.")
    seed: Series[int] = pa.Field(description="Sampling seed.")
    mode: Series[str] = pa.Field(isin=["strict", "normalized", "lenient"], description="Extraction variant.")
    value: Series[str] = pa.Field(nullable=True, description="Extracted canonical answer; null when unparseable (never guessed).")
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


class TokenBalance(_Strict):
    """``token_balance``: realised prompt tokens per item over the wrappers, Δtok, matched (§3.3)."""

    model_id: Series[str] = pa.Field(description="Model whose tokenizer counted the tokens.")
    task: Series[str] = pa.Field(description="Task name.")
    item_id: Series[str] = pa.Field(description="Item id.")
    n_wrappers: Series[int] = pa.Field(ge=1, description="Wrappers with a generation for the item.")
    min_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Fewest prompt tokens over wrappers.")
    max_tokens: Series[pd.Int64Dtype] = pa.Field(nullable=True, description="Most prompt tokens over wrappers.")
    tokens_json: Series[str] = pa.Field(description="{wrapper: prompt tokens} as JSON.")
    delta_tok: Series[float] = pa.Field(nullable=True, ge=0, description="Δtok = (max − min)/mean over wrappers (ratio); null when a count is missing.")
    matched: Series[bool] = pa.Field(description="Δtok ≤ 5%: the item is in the matched subset.")
