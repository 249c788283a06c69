"""Synthetic upstream tables at a fraction of each paper's scale, for ``metric_scale.py``.

Inputs (items, instances, documents, prompts) come from the real loaders and renderers on the
shared samples (``../shared/datasets``), cycled with suffixed ids up to the paper's counts; the
*generation* tables are synthetic: seeded replies in the shapes real models write (clean answers,
code fences, prose, cut-off replies, refusals, call errors), so the extraction and metric code
does its real work. Every table is validated against its pandera schema before it is written.

Paper scale (fraction 1.0):

* format_robustness — 4 workflows (models) × 4 datasets × 250 instances × k=3 × 4 formats =
  48,000 generations (12,000 MR groups);
* wrapper_sensitivity — 4 models × 7 tasks × 200 items × 5 wrappers × 5 seeds = 140,000;
* workflow_perturb — 4,973 goldens × 3 types × 3 severities = 44,757 scored variants (the
  scores table is synthetic; scoring itself is ``workflow_scoring.py``) + one judge model;
* order_probe — 3,543 expressions × (23 patterns + the unperturbed run) × 3 settings, one model
  (sent inputs only: repeated-unit expressions send fewer).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from metamorph.schemas import validate_frame

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
GEN_COLUMNS = [
    "generation_key",
    "request_json",
    "response_text",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "latency_s",
    "model_version",
    "system_fingerprint",
    "cache_hit",
    "error",
]
ERROR = "RateLimitError: 429 Too Many Requests (retries exhausted)"


def _key(*parts) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def _cycle(items: Sequence, n: int, rename: Callable) -> list:
    """``n`` items: the loaded ones, then copies with suffixed ids (``rename(x, j)``)."""
    return [
        items[i % len(items)] if i < len(items) else rename(items[i % len(items)], i // len(items)) for i in range(n)
    ]


def _generation_frame(ids: list[dict], keys, requests, texts, finish, errors, rng) -> pd.DataFrame:
    n = len(ids)
    df = pd.DataFrame(ids)
    df["generation_key"] = keys
    df["request_json"] = requests
    df["response_text"] = texts
    df["finish_reason"] = finish
    df["prompt_tokens"] = pd.array(rng.integers(80, 900, n), dtype="Int64")
    df["completion_tokens"] = pd.array(rng.integers(3, 120, n), dtype="Int64")
    df["latency_s"] = rng.gamma(2.0, 0.6, n)
    df["model_version"] = "bench-2026-01-01"
    df["system_fingerprint"] = None
    df["cache_hit"] = False
    df["error"] = errors
    err = df["error"].notna()
    df.loc[err, ["response_text", "finish_reason"]] = None
    df.loc[err, ["prompt_tokens", "completion_tokens"]] = pd.NA
    return df


def _choose(rng, kinds: dict[str, float], n: int) -> np.ndarray:
    names = list(kinds)
    p = np.array([kinds[k] for k in names])
    return np.array(names)[rng.choice(len(names), size=n, p=p / p.sum())]


# ------------------------------------------------------------------------------ format_robustness

FORMAT_MODELS = ["bench-a", "bench-b", "bench-c", "bench-d"]
FORMAT_KINDS = {
    "json": 0.72,
    "fenced": 0.08,
    "prose": 0.06,
    "single_quotes": 0.03,
    "truncated": 0.05,
    "no_label": 0.04,
    "error": 0.02,
}


def format_inputs(fraction: float) -> dict[str, pd.DataFrame]:
    """``source_instances`` and ``rendered_documents``: 4 datasets × round(250·fraction) instances."""
    from metamorph.studies.format_robustness import schemas as S
    from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, render
    from metamorph.studies.format_robustness.sources import load_sources

    n = max(2, round(250 * fraction))
    specs = [
        "construct?n=250",
        *(f"{d}:{SHARED / d / 'sample.jsonl'}" for d in ("medqa", "discrim_eval", "credit_default")),
    ]
    by_ds: dict[str, list] = {}
    for spec, x in load_sources(specs):
        by_ds.setdefault(x.dataset, []).append((spec, x))
    rows, docs = [], []
    for pairs in by_ds.values():
        for spec, x in _cycle(
            pairs, n, lambda p, j: (p[0], dataclasses.replace(p[1], instance_id=f"{p[1].instance_id}~{j}"))
        ):
            rows.append({**x.to_row(), "source": spec, "n_fields": len(x.fields)})
            for fmt in DEFAULT_FORMATS:
                d = render(x, fmt)
                docs.append(
                    {
                        "dataset": d.dataset,
                        "instance_id": d.instance_id,
                        "format": d.format,
                        "media_type": d.media_type,
                        "filename": d.filename,
                        "renderer_version": d.renderer_version,
                        "document_text": d.text,
                        "document_sha256": d.sha256,
                        "n_bytes": len(d.content),
                        "round_trip_ok": True,
                    }
                )
    return {
        "source_instances": validate_frame(S.SourceInstances, pd.DataFrame(rows)),
        "rendered_documents": validate_frame(S.RenderedDocuments, pd.DataFrame(docs)),
    }


def _format_reply(kind: str, label: str, evidence: list[str], rng) -> tuple[str | None, str | None, str | None]:
    """(text, finish_reason, error) of one reply of the given kind."""
    obj = json.dumps({"decision": label, "evidence": evidence}, ensure_ascii=False)
    if kind == "json":
        return obj, "stop", None
    if kind == "fenced":
        return f"Here is my answer:\n```json\n{obj}\n```", "stop", None
    if kind == "prose":
        return f"Decision: {label}\n\nThe record shows {'; '.join(evidence)}.", "stop", None
    if kind == "single_quotes":
        return obj.replace('"', "'"), "stop", None
    if kind == "truncated":
        cut = int(rng.integers(max(1, len(obj) // 3), len(obj)))
        return obj[:cut], "length", None
    if kind == "no_label":
        return "I cannot make this decision from the document alone; more information is needed.", "stop", None
    return None, None, ERROR


def format_generations(
    inputs: dict[str, pd.DataFrame], model: str, seed: int, k: int = 3, routed: dict[tuple[str, str], str] | None = None
) -> pd.DataFrame:
    """``workflow_generations`` of one model (``routed``: ``routed_generations`` with the
    document in ``routed[(workflow_id, dataset)]``)."""
    from metamorph.studies.format_robustness import schemas as S

    rng = np.random.default_rng(seed)
    m = FORMAT_MODELS.index(model) if model in FORMAT_MODELS else 0
    acc, flip = 0.85 - 0.1 * m, 0.08 + 0.04 * m
    docs = {(r.dataset, r.instance_id, r.format): r for r in inputs["rendered_documents"].itertuples()}
    fmts = list(dict.fromkeys(inputs["rendered_documents"]["format"]))
    wf = f"{model}/inline"
    ids, keys, reqs, texts, finish, errors = [], [], [], [], [], []
    for x in inputs["source_instances"].itertuples():
        space = json.loads(x.answer_space_json)
        fields = [f"{k_}: {v}"[:70] for k_, v in json.loads(x.fields_json)]
        base = x.gold if x.gold is not None and rng.random() < acc else space[int(rng.integers(len(space)))]
        for f in fmts:
            sent = routed[(wf, x.dataset)] if routed else f
            doc = docs[(x.dataset, x.instance_id, sent)]
            label_f = space[int(rng.integers(len(space)))] if rng.random() < flip else base
            request = json.dumps(
                {
                    "model": model,
                    "messages": [
                        {
                            "role": "user",
                            "content": f"{x.task_prompt}\n\n<<<DOCUMENT>>>\n{doc.document_text}<<<END DOCUMENT>>>",
                        }
                    ],
                    "params": {"temperature": 0.0, "max_tokens": 256, "seed": 0},
                }
            )
            for r in range(1, k + 1):
                label = space[int(rng.integers(len(space)))] if rng.random() < 0.05 else label_f
                ev = [
                    fields[i]
                    for i in rng.choice(len(fields), size=min(len(fields), int(rng.integers(1, 5))), replace=False)
                ]
                kind = _choose(rng, FORMAT_KINDS, 1)[0]
                t, fr, e = _format_reply(kind, label, ev, rng)
                ids.append(
                    {
                        "model_id": model,
                        "workflow_id": wf,
                        "provider": "openai_compatible",
                        "ingestion": "inline",
                        "dataset": x.dataset,
                        "instance_id": x.instance_id,
                        "format": f,
                        "repeat": r,
                        "document_sha256": doc.document_sha256,
                        **({"routed_format": sent} if routed else {}),
                    }
                )
                keys.append(_key(model, x.dataset, x.instance_id, f, r, sent if routed else ""))
                reqs.append(request)
                texts.append(t)
                finish.append(fr)
                errors.append(e)
    df = _generation_frame(ids, keys, reqs, texts, finish, errors, rng)
    return validate_frame(S.RoutedGenerations if routed else S.WorkflowGenerations, df)


# ------------------------------------------------------------------------------ wrapper_sensitivity

WRAPPER_TASKS = ("boolq", "arc_challenge", "gsm8k", "commonsense_qa", "winogrande", "hellaswag", "piqa")
WRAPPER_MODELS = {"bench-a": (0.85, 0.98), "bench-b": (0.7, 0.9), "bench-c": (0.6, 0.7), "bench-d": (0.5, 0.85)}


def wrapper_inputs(fraction: float) -> tuple[dict[str, pd.DataFrame], list, list]:
    """``qa_items`` (7 tasks × round(200·fraction) items), the items and their wrapped prompts."""
    from metamorph.studies.wrapper_sensitivity import schemas as S
    from metamorph.studies.wrapper_sensitivity.tasks import load_task
    from metamorph.studies.wrapper_sensitivity.wrappers import render_token_controlled

    n = max(2, round(200 * fraction))
    items = [x for t in WRAPPER_TASKS for x in load_task(f"{t}:{SHARED / t / 'sample.jsonl'}", limit=n)]
    rows = [
        {
            "task": x.task,
            "item_id": x.item_id,
            "answer_type": x.answer_type,
            "question": x.question,
            "passage": x.passage,
            "choices_json": json.dumps([list(c) for c in x.choices]),
            "n_choices": len(x.choices) if x.answer_type == "choice" else None,
            "gold": x.gold,
            "source": x.task,
        }
        for x in items
    ]
    df = pd.DataFrame(rows)
    df["n_choices"] = df["n_choices"].astype("Int64")
    return {"qa_items": validate_frame(S.QAItems, df)}, items, render_token_controlled(items)


def _wrong(x, rng) -> str:
    if x.answer_type == "choice":
        return [lab for lab, _ in x.choices if lab != x.gold][int(rng.integers(len(x.choices) - 1))]
    if x.answer_type == "boolean":
        return "false" if x.gold == "true" else "true"
    return str(int(float(x.gold)) + int(rng.integers(1, 9)))


def _wrapper_reply(family: str, x, value: str, compliant: bool, rng) -> tuple[str, str]:
    if not compliant:
        return [
            f"I think it is probably {value}, but the question is ambiguous.",
            "Sorry, I can't determine the answer from the information given.",
            "",
        ][int(rng.integers(3))], "stop"
    lit = value if x.answer_type != "choice" else json.dumps(value)
    return {
        "plain": (value, "stop"),
        "json": (f'{{"answer": {lit}}}', "stop"),
        "structured": (f"Answer: {value}", "stop"),
        "structured_delim": (f"<answer>{value}</answer>", "stop"),
        "deliberate": (
            ("Let's think step by step. The question asks about the key detail, so", "length")
            if rng.random() < 0.25
            else (f"Step 1: read the question.\nFinal answer: {value}", "stop")
        ),
    }[family]


def wrapper_generations(items: list, prompts: list, model: str, seed: int, seeds=(0, 1, 2, 3, 4)) -> pd.DataFrame:
    """``wrapper_generations`` of one model: every prompt × seed."""
    from metamorph.studies.wrapper_sensitivity import schemas as S

    rng = np.random.default_rng(seed)
    acc, comply = WRAPPER_MODELS[model]
    by = {(x.task, x.item_id): x for x in items}
    ids, keys, reqs, texts, finish, errors, tokens = [], [], [], [], [], [], []
    for p in prompts:
        x = by[(p.task, p.item_id)]
        request = json.dumps({"model": model, "messages": p.messages, "params": {"temperature": 0.7, "max_tokens": 24}})
        base_tok = len(request) // 4
        c = comply * (0.6 if (p.family == "json" and model == "bench-c") else 1.0)
        for s in seeds:
            value = x.gold if rng.random() < acc else _wrong(x, rng)
            t, fr = _wrapper_reply(p.family, x, value, rng.random() < c, rng)
            ids.append({"model_id": model, "task": p.task, "item_id": p.item_id, "wrapper": p.family, "seed": s})
            keys.append(_key(model, p.task, p.item_id, p.family, s))
            reqs.append(request)
            texts.append(t)
            finish.append(fr)
            errors.append(ERROR if rng.random() < 0.01 else None)
            tokens.append(base_tok + int(rng.integers(-2, 3)))
    df = _generation_frame(ids, keys, reqs, texts, finish, errors, rng)
    df["prompt_tokens"] = pd.array(tokens, dtype="Int64")
    return validate_frame(S.WrapperGenerations, df)


# ------------------------------------------------------------------------------ workflow_perturb


def workflow_tables(fraction: float, seed: int = 0) -> dict[str, pd.DataFrame]:
    """``perturbation_scores`` (round(4,973·fraction) goldens × 3 types × 3 severities) and one
    judge model's ``judge_scores`` for every variant (partition ``bench-judge``)."""
    from metamorph.studies.workflow_perturb import schemas as S
    from metamorph.studies.workflow_perturb.perturb import PERTURBATION_TYPES, SEVERITIES, target_score
    from metamorph.studies.workflow_perturb.workflows import size_stratum

    rng = np.random.default_rng(seed)
    n = max(3, round(4973 * fraction))
    sizes = np.concatenate([rng.integers(5, 8, n), rng.integers(8, 16, n), rng.integers(16, 42, n)])
    pick = rng.choice(3, size=n, p=[3842 / 4973, 1109 / 4973, 22 / 4973])
    n_nodes = sizes.reshape(3, n)[pick, np.arange(n)]
    rows = []
    for gi in range(n):
        for t in PERTURBATION_TYPES:
            for p in SEVERITIES:
                target = target_score(t, p)
                m = {
                    name: float(np.clip(target - 0.1 * i * p + rng.normal(0, 0.08), 0, 1))
                    for i, name in enumerate(("chain_f1", "graph_f1", "bleu", "gleu"))
                }
                undefined = rng.random() < 0.02
                rows.append(
                    {
                        "model_id": "deterministic",
                        "variant_id": f"g{gi}-{t}-{p}",
                        "golden_id": f"g{gi}",
                        "type": t,
                        "severity": p,
                        "n_nodes": int(n_nodes[gi]),
                        "stratum": size_stratum(int(n_nodes[gi])),
                        "operator": "deterministic",
                        "status": "valid" if rng.random() > 0.01 else "invalid",
                        "target_score": target,
                        **m,
                        "bertscore_f1": float(np.clip(target - 0.3 * p + rng.normal(0, 0.1), -0.5, 1)),
                        "kendall_tau": None if undefined else float(np.clip(1 - p + rng.normal(0, 0.1), -1, 1)),
                        "kendall_tau_reason": "constant_ranks" if undefined else None,
                        "n_aligned": int(n_nodes[gi]),
                        "encoder": "sentence-transformers/all-MiniLM-L6-v2",
                        "bertscore_model": "sentence-transformers/all-MiniLM-L6-v2",
                        "bertscore_rescaled": True,
                        "bertscore_baseline": "packaged:bertscore_baseline_all-MiniLM-L6-v2.tsv",
                    }
                )
    scores = pd.DataFrame(rows)
    scores["n_aligned"] = scores["n_aligned"].astype("Int64")
    valid = rng.integers(0, 4, len(scores))
    judge = pd.DataFrame(
        {
            "model_id": "bench-judge",
            "variant_id": scores["variant_id"],
            "golden_id": scores["golden_id"],
            "type": scores["type"],
            "severity": scores["severity"],
            "judge": np.where(
                valid > 0, np.clip(scores["target_score"] + rng.normal(0, 0.15, len(scores)), 0, 1), np.nan
            ),
            "judge_valid": valid,
            "judge_invalid": 3 - valid,
            "judge_reasons": [json.dumps(["ok"] * v + ["truncated"] * (3 - v)) for v in valid],
            "generation_keys": [json.dumps([_key(v, i) for i in range(3)]) for v in scores["variant_id"]],
        }
    )
    return {
        "perturbation_scores": validate_frame(S.PerturbationScores, scores),
        "judge_scores": validate_frame(S.JudgeScores, judge),
    }


# ------------------------------------------------------------------------------ order_probe

ORDER_MODELS = ["bench-a"]


def order_inputs(fraction: float) -> dict[str, pd.DataFrame]:
    """``order_items`` (round(3,543·fraction) expressions), ``scrambled_inputs``, ``order_prompts``."""
    from metamorph.studies.order_probe import plan as op
    from metamorph.studies.order_probe import schemas as S
    from metamorph.studies.order_probe.sources import load_sources

    n = max(4, round(3543 * fraction))
    loaded = load_sources([f"orderprobe:{SHARED / 'orderprobe' / 'sample.jsonl'}"])
    items = _cycle(loaded, n, lambda x, j: dataclasses.replace(x, item_id=f"{x.item_id}~{j}"))
    df = pd.DataFrame(
        [
            {
                "item_id": x.item_id,
                "language": x.language,
                "canonical": x.canonical,
                "meanings_json": json.dumps(list(x.meanings), ensure_ascii=False),
                "n_meanings": len(x.meanings),
                "structure": x.structure,
                "frequency": x.frequency,
                "repeated_unit": len(set(x.units)) < 4,
                "source": x.source,
            }
            for x in items
        ]
    )
    df["frequency"] = df["frequency"].astype(float)
    scrambled = op.scrambled_inputs(items)
    return {
        "order_items": validate_frame(S.OrderItems, df),
        "scrambled_inputs": validate_frame(S.ScrambledInputs, scrambled),
        "order_prompts": validate_frame(S.OrderPrompts, op.prompts_frame(scrambled)),
    }


def order_generations(inputs: dict[str, pd.DataFrame], model: str, seed: int) -> pd.DataFrame:
    """``order_generations`` of one model: every prompt of ``order_prompts``."""
    from metamorph.studies.order_probe import plan as op
    from metamorph.studies.order_probe import schemas as S

    rng = np.random.default_rng(seed)
    items = {r.item_id: r for r in inputs["order_items"].itertuples()}
    scr = {(r.item_id, r.pattern): r.scrambled for r in inputs["scrambled_inputs"].itertuples()}
    recover = {"zero_shot": 0.35, "cot": 0.45, "few_shot": 0.5}
    ids, keys, reqs, texts, finish, errors = [], [], [], [], [], []
    for p in inputs["order_prompts"].itertuples():
        x = items[p.item_id]
        expr_l, expl_l, why_l = op._L[p.language]
        sep = op._sep(p.language)
        meanings = json.loads(x.meanings_json)
        ok = rng.random() < (0.95 if p.input_kind == "unperturbed" else recover[p.setting])
        expr = x.canonical if ok else "".join(rng.permutation(list(scr[(p.item_id, p.pattern)])))
        expl = meanings[0][: int(rng.integers(8, 40))] if meanings and rng.random() < 0.7 else "比喻做事认真，坚持到底"
        text = f"{expr_l}{sep}{expr}\n{expl_l}{sep}{expl}"
        if p.setting == "cot":
            text = f"{why_l}{sep}先看每个字的意思，再排列顺序\n{text}"
        u = rng.random()
        fr = "stop"
        if u < 0.03:
            text = ""
        elif u < 0.06:
            text = f"The expression is probably {expr} or {x.canonical}."
        elif u < 0.08:
            text, fr = text[: int(rng.integers(2, 6))], "length"
        ids.append(
            {
                "model_id": model,
                "setting": p.setting,
                "item_id": p.item_id,
                "language": p.language,
                "pattern": p.pattern,
                "input_kind": p.input_kind,
            }
        )
        keys.append(_key(model, p.setting, p.item_id, p.pattern))
        reqs.append(p.messages_json)
        texts.append(text)
        finish.append(fr)
        errors.append(ERROR if rng.random() < 0.01 else None)
    return validate_frame(S.OrderGenerations, _generation_frame(ids, keys, reqs, texts, finish, errors, rng))
