"""Requests and scoring of the prompt-wrapper sensitivity study (FSI paper §3).

* :func:`plan_wrapper_generations` — model × task × wrapper × item × seed requests from the
  token-controlled prompts (:mod:`metamorph.studies.wrapper_sensitivity.wrappers`); the optional constrained-decoding arm
  (the review's falsifier) adds the ``json`` prompts again as wrapper ``json_constrained`` with a
  JSON-schema decoding constraint (llama.cpp grammar / OpenAI structured outputs).
* :func:`score_generations` — every generation under the four extraction modes (``paper``, the
  headline, and strict / normalized / lenient)
  (:func:`metamorph.studies.wrapper_sensitivity.extract.extract_answer`), in the "scored generations" contract of
  :mod:`metamorph.studies.wrapper_sensitivity.metrics`.
* :func:`token_balance` — realised prompt tokens per item and wrapper, Δtok and the matched subset
  (§3.3).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from metamorph.models import ModelSpec
from metamorph.providers.base import GenerationRequest
from metamorph.studies.wrapper_sensitivity.extract import extract_answer
from metamorph.studies.wrapper_sensitivity.study import STUDY as DECLARED
from metamorph.studies.wrapper_sensitivity.tasks import QAItem
from metamorph.studies.wrapper_sensitivity.vocab import CONSTRAINED_ARM, MODES
from metamorph.studies.wrapper_sensitivity.wrappers import (
    MATCH_THRESHOLD,
    WrappedPrompt,
    answer_json_schema,
    delta_tok,
    matched_subset,
)

__all__ = [
    "CONSTRAINED",
    "DEFAULT_PARAMS",
    "STUDY",
    "PlannedWrapperGeneration",
    "cost_steps",
    "count_and_check_budget",
    "plan_wrapper_generations",
    "score_generations",
    "token_balance",
]

#: The constrained-decoding arm's wrapper name (:data:`.vocab.CONSTRAINED_ARM`).
CONSTRAINED = CONSTRAINED_ARM

#: This study's name: the registry's ``study_params`` key (:meth:`metamorph.models.ModelSpec.params_for`).
STUDY = "wrapper_sensitivity"

#: Decoding defaults (§3.4): short answers (``max_tokens``: the study's declared default,
#: :attr:`metamorph.study.Study.max_tokens_default`; the review warns it truncates ``deliberate``;
#: the truncation rate is reported per wrapper), sampling so that seeds differ.
DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0.7, "max_tokens": DECLARED.max_tokens_default}


@dataclass(frozen=True)
class PlannedWrapperGeneration:
    """One request with the lineage ids of its row."""

    model_id: str
    task: str
    item_id: str
    wrapper: str
    seed: int
    prompt: WrappedPrompt
    request: GenerationRequest


def plan_wrapper_generations(
    items: Sequence[QAItem],
    prompts: Sequence[WrappedPrompt],
    model: ModelSpec,
    seeds: Sequence[int],
    params: dict[str, Any] | None = None,
    constrained_arm: bool = False,
) -> list[PlannedWrapperGeneration]:
    """Requests for every prompt × seed (plus the constrained ``json`` arm when asked).

    Parameter precedence as in the format study: defaults < ``params`` < registry params; a
    registry ``null`` unsets. The seed of each request is its ``seed`` parameter (so it is part of
    the cache key). Raises ``ValueError`` for no seeds or a prompt of an unknown item.
    """
    if not seeds:
        raise ValueError("at least one seed is needed")
    by_key = {(x.task, x.item_id): x for x in items}
    base = {**DEFAULT_PARAMS, **(params or {}), **model.params_for(STUDY)}
    base.pop("response_format", None)  # the wrapper, not the registry, decides the output constraint here
    base = {k: v for k, v in base.items() if v is not None}
    out = []
    for p in prompts:
        item = by_key.get((p.task, p.item_id))
        if item is None:
            raise ValueError(f"prompt for unknown item {p.task}/{p.item_id}")
        arms = [(p.family, {})]
        if constrained_arm and p.family == "json":
            arms.append((CONSTRAINED, {"response_format": {"type": "json_object", "schema": answer_json_schema(item)}}))
        for wrapper, extra in arms:
            for s in seeds:
                req = GenerationRequest(
                    provider=model.provider,
                    model=model.model,
                    messages=tuple(p.messages),
                    params={**base, **extra, "seed": int(s)},
                    base_url=model.base_url,
                    renderer_version=f"wrapper-{p.template_version}",
                )
                out.append(PlannedWrapperGeneration(model.id, p.task, p.item_id, wrapper, int(s), p, req))
    return out


def score_generations(generations: pd.DataFrame, items: Sequence[QAItem]) -> pd.DataFrame:
    """Score every generation under the paper's extractor and strict / normalized / lenient extraction.

    Args:
        generations: ``wrapper_generations`` rows (model_id, task, item_id, wrapper, seed,
            generation_key, response_text, finish_reason, prompt_tokens, error).
        items: the study's items (gold, answer type, labels).

    Returns:
        One row per generation × mode: model_id, task, answer_type, wrapper, item_id, seed, mode,
        value, gold (the item's canonical gold), parseable, correct, reason, finish_reason, prompt_tokens, n_choices,
        generation_key (modes in the order of
        :data:`metamorph.studies.wrapper_sensitivity.extract.MODES`). A call error is unparseable
        with reason ``call_error`` in every mode.
        The ``json_constrained`` arm is read with the ``json`` family's contract.
    """
    by_key = {(x.task, x.item_id): x for x in items}
    rows = []
    for g in generations.itertuples():
        x = by_key[(g.task, g.item_id)]
        family = "json" if g.wrapper == CONSTRAINED else g.wrapper
        failed = g.error is not None and not (isinstance(g.error, float) and pd.isna(g.error))
        for mode in MODES:
            if failed:
                value, parseable, reason = None, False, "call_error"
            else:
                e = extract_answer(
                    g.response_text, x.answer_type, x.labels, family=family, mode=mode, finish_reason=g.finish_reason
                )
                value, parseable, reason = e.value, e.parseable, e.reason
            rows.append(
                {
                    "model_id": g.model_id,
                    "task": g.task,
                    "answer_type": x.answer_type,
                    "wrapper": g.wrapper,
                    "item_id": g.item_id,
                    "seed": int(g.seed),
                    "mode": mode,
                    "value": value,
                    "gold": x.gold,
                    "parseable": bool(parseable),
                    "correct": bool(parseable and value == x.gold),
                    "reason": reason,
                    "finish_reason": None if pd.isna(g.finish_reason) else g.finish_reason,
                    "prompt_tokens": None if pd.isna(g.prompt_tokens) else int(g.prompt_tokens),
                    "n_choices": len(x.choices) if x.answer_type == "choice" else None,
                    "generation_key": g.generation_key,
                }
            )
    out = pd.DataFrame(rows)
    out["prompt_tokens"] = out["prompt_tokens"].astype("Int64")
    out["n_choices"] = out["n_choices"].astype("Int64")
    return out


def token_balance(generations: pd.DataFrame, threshold: float = MATCH_THRESHOLD) -> pd.DataFrame:
    """Δtok per (model, task, item) over the standard wrappers from realised prompt tokens (§3.3).

    Uses ``prompt_tokens`` as counted by the target model (llama.cpp tokenizer for the local
    model, the provider's reported usage for APIs); the constrained arm is excluded (its prompt
    equals ``json``'s). Δtok = (max − min)/mean over wrappers; ``matched`` = Δtok ≤ threshold.
    Items with a wrapper lacking a token count get null Δtok and ``matched`` False.
    """
    g = generations[generations["wrapper"] != CONSTRAINED]
    rows = []
    for (model, task, item), grp in g.groupby(["model_id", "task", "item_id"], sort=True):
        per = grp.groupby("wrapper")["prompt_tokens"].first()
        known = per.dropna()
        counts = {w: int(v) for w, v in known.items()}
        complete = len(known) == len(per) and len(per) >= 2
        d = delta_tok(counts) if complete else None
        rows.append(
            {
                "model_id": model,
                "task": task,
                "item_id": item,
                "n_wrappers": int(len(per)),
                "min_tokens": int(known.min()) if len(known) else None,
                "max_tokens": int(known.max()) if len(known) else None,
                "tokens_json": json.dumps({w: int(v) for w, v in known.items()}, sort_keys=True),
                "delta_tok": d,
                "matched": complete and item in matched_subset({item: counts}, threshold),
            }
        )
    out = pd.DataFrame(
        rows,
        columns=[
            "model_id",
            "task",
            "item_id",
            "n_wrappers",
            "min_tokens",
            "max_tokens",
            "tokens_json",
            "delta_tok",
            "matched",
        ],
    )
    for c in ("min_tokens", "max_tokens"):
        out[c] = out[c].astype("Int64")
    out["delta_tok"] = out["delta_tok"].astype(float)
    return out


def count_and_check_budget(
    prompts: Sequence[WrappedPrompt], count_tokens, max_tokens: int, n_ctx: int
) -> dict[tuple[str, str, str], int]:
    """Count every prompt with the target model's tokenizer and check the context budget for ALL of
    them before any call (§3.3): raises :class:`~metamorph.errors.ContextBudgetError` (via
    :func:`metamorph.studies.wrapper_sensitivity.wrappers.check_context_budget`) naming the first prompt that does not fit.

    Returns ``{(task, item_id, wrapper): prompt_tokens}``.
    """
    from metamorph.errors import ContextBudgetError
    from metamorph.studies.wrapper_sensitivity.wrappers import check_context_budget

    counts = {}
    for p in prompts:
        n = count_tokens(p.messages)
        try:
            check_context_budget(n, max_tokens, n_ctx)
        except ContextBudgetError as exc:
            raise ContextBudgetError(f"{p.task}/{p.item_id} [{p.family}]: {exc}") from None
        counts[(p.task, p.item_id, p.family)] = n
    return counts


def cost_steps(model: ModelSpec, options) -> list:
    """The requests ``wrapper_generations`` sends for ``model`` (``metamorph plan``,
    :mod:`metamorph.costplan`), with the assets' defaults: sources ``synthetic``, every wrapper
    family, template v1, the default seeds, :data:`DEFAULT_PARAMS` (``options`` overrides sources,
    limit, seeds, max_tokens, constrained_arm). Raises the loader's ``InputError``."""
    from metamorph.costplan import PlanStep
    from metamorph.studies.wrapper_sensitivity.wrappers import FAMILIES, render_token_controlled

    items = [x for _, x in DECLARED.sources_of(options)]
    prompts = render_token_controlled(items, list(FAMILIES), "v1")
    seeds = options.seeds
    planned = plan_wrapper_generations(
        items,
        prompts,
        model,
        seeds,
        {} if options.max_tokens is None else {"max_tokens": options.max_tokens},  # else DEFAULT_PARAMS
        options.constrained_arm,
    )
    return [PlanStep.exact("wrapper_generations", [p.request for p in planned])]
