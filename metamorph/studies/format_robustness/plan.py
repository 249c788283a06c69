"""Requests of the document-format robustness study (paper §4.2, §5.1).

For a workflow (model + ingestion path), a rendered document and a repeat index r, the request
is built so that **only the document differs across formats**:

* the system message is fixed;
* the user message is P (the task prompt) + the fixed JSON output instruction
  (:func:`metamorph.studies.format_robustness.extract.output_instruction`), identical for every format;
* ``inline``: the document text follows between fixed delimiters in the same user message; for a
  binary format (pdf, docx, xlsx) that text is what the format's named extraction read back from
  the file (``extract:pypdf``, ``extract:docx``, ``extract:openpyxl``), announced by
  :data:`EXTRACT_NOTE`, and the extraction is part of the request's ``renderer_version``;
  ``openai_file`` / ``anthropic_document``: the document is attached as a file of its own media
  type and the user message carries P and the instruction only;
* ``upload`` (a workflow under test, ``http`` / ``python``): the document is the uploaded file
  and the request is one user message, P and the instruction — the task prompt the workflow is
  sent. A workflow takes no decoding parameters: its request carries only the seed (``seeded``
  entries; each replicate its own) and the workflow's ``version``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from metamorph.measurability import is_call_error, not_sent
from metamorph.models import ModelSpec
from metamorph.providers.base import Document, GenerationRequest, GenerationResult
from metamorph.providers.file_inputs import accepts
from metamorph.studies.format_robustness.extract import Extraction, extract_decision, output_instruction
from metamorph.studies.format_robustness.records import SourceInstance, canonical_text
from metamorph.ordering import ordered
from metamorph.replicates import seeded
from metamorph.studies.format_robustness.renderers import DEFAULT_FORMATS, RenderedDocument
from metamorph.studies.format_robustness.study import STUDY as DECLARED

__all__ = [
    "DEFAULT_PARAMS",
    "DOC_BEGIN",
    "DOC_END",
    "EXTRACT_NOTE",
    "FILE_NOTE",
    "PROMPT_VERSION",
    "STUDY",
    "SYSTEM_PROMPT",
    "PlannedGeneration",
    "build_messages",
    "cost_steps",
    "extract_reply",
    "generation_outcomes",
    "instruction_text",
    "metric_input",
    "not_sent_notes",
    "with_not_sent",
    "plan_generations",
    "plan_routing",
    "record_text",
    "request_renderer_version",
    "routing_params",
    "sensitive_frame",
]

SYSTEM_PROMPT = "You are a careful assistant that reads documents and answers only from their content."
DOC_BEGIN = "<<<DOCUMENT>>>"
DOC_END = "<<<END DOCUMENT>>>"
#: The user message's last line when the document is attached as a file (``{filename}`` filled in).
FILE_NOTE = "The document is attached as the file {filename}."
#: The line before the delimiters when an inline document is the text extracted from a binary file.
EXTRACT_NOTE = "The document is the file {filename}; its text, extracted by {extraction}, follows."

#: Version of the prompt text (system prompt, instruction, delimiters). It is part of every
#: request's ``renderer_version`` (``<renderer version>+<PROMPT_VERSION>``), so a reworded prompt
#: is a new cache entry *and* says so in the stored request. p2: the output instruction describes
#: the JSON object in words, without the ``"<placeholder>"`` values a model copied as evidence.
PROMPT_VERSION = "p2"

#: This study's name: the registry's ``study_params`` key (:meth:`metamorph.models.ModelSpec.params_for`).
STUDY = "format_robustness"

#: Decoding defaults of the study (temperature 0, §5.1); every key is sent explicitly.
#: ``max_tokens``: the study's declared default (:attr:`metamorph.study.Study.max_tokens_default`,
#: the generation asset's config default).
DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0.0, "max_tokens": DECLARED.max_tokens_default, "seed": 0}


@dataclass(frozen=True)
class PlannedGeneration:
    """A request plus the lineage ids of the row it will become."""

    workflow_id: str
    model_id: str
    instance_id: str
    dataset: str
    format: str
    repeat: int
    document_sha256: str
    request: GenerationRequest
    #: Format the document was converted to by format routing (None: not routed).
    routed_format: str | None = None
    #: The run's base seed, from which a sampled replicate's seed is derived (None: no seed is sent).
    base_seed: int | None = None
    #: Why the request is not sent (:func:`metamorph.measurability.not_sent`: the ingestion path
    #: cannot take the document's format); None: it is sent.
    not_sent: str | None = None


def build_messages(x: SourceInstance, doc: RenderedDocument, ingestion: str) -> list[dict[str, str]]:
    """System + user messages for one (instance, document) pair; see the module docstring."""
    instruction = f"{x.task_prompt}\n\n{output_instruction(list(x.answer_space))}"
    if ingestion == "upload":
        return [{"role": "user", "content": instruction}]
    if ingestion == "inline":
        if doc.extraction:
            instruction += "\n\n" + EXTRACT_NOTE.format(filename=doc.filename, extraction=doc.extraction)
        user = f"{instruction}\n\n{DOC_BEGIN}\n{doc.text}{'' if doc.text.endswith(chr(10)) else chr(10)}{DOC_END}"
    else:
        user = f"{instruction}\n\n{FILE_NOTE.format(filename=doc.filename)}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def request_renderer_version(doc: RenderedDocument, ingestion: str) -> str:
    """A request's ``renderer_version``: ``<renderer version>+<PROMPT_VERSION>``, with the named
    extraction between them when the model reads a binary document's extracted text inline
    (``pdf-1+extract:pypdf+p2``): a new extraction is a new cache entry and says so in the request."""
    if ingestion == "inline" and doc.extraction:
        return f"{doc.renderer_version}+{doc.extraction}+{PROMPT_VERSION}"
    return f"{doc.renderer_version}+{PROMPT_VERSION}"


def instruction_text(x: SourceInstance) -> str:
    """Everything the model is told for ``x`` besides the document: the system prompt, the task
    prompt P, the output instruction, the delimiters and the file note (without the file name).
    Evidence items that copy it are *echoed* (:mod:`metamorph.studies.format_robustness.echo`)."""
    return "\n".join(
        [
            SYSTEM_PROMPT,
            x.task_prompt,
            output_instruction(list(x.answer_space)),
            DOC_BEGIN,
            DOC_END,
            FILE_NOTE.format(filename=""),
        ]
    )


def record_text(x: SourceInstance) -> str:
    """The record's field names and values (``"name value"`` per field, one per line) — the same
    for every format; an evidence item that quotes it is never echoed."""
    return "\n".join(f"{name} {canonical_text(value)}" for name, value in x.fields)


def extract_reply(x: SourceInstance, text: str | None, finish_reason: str | None) -> Extraction:
    """:func:`~metamorph.studies.format_robustness.extract.extract_decision` of a reply to ``x``
    with its answer space, and echoed evidence split off against :func:`instruction_text` and
    :func:`record_text` — the one extraction call of ``extracted_decisions`` and ``routed_outcomes``."""
    return extract_decision(
        text, list(x.answer_space), finish_reason, instruction=instruction_text(x), record=record_text(x)
    )


def plan_generations(
    instances: Iterable[SourceInstance],
    documents: Iterable[RenderedDocument],
    model: ModelSpec,
    *,
    k: int = 3,
    params: dict[str, Any] | None = None,
) -> list[PlannedGeneration]:
    """All requests of one model: ingestion path × document × repeat r = 1..k.

    A document whose media type the ingestion path cannot send as a file
    (:func:`metamorph.providers.file_inputs.accepts`; e.g. docx on ``anthropic_document``) is
    planned with ``not_sent`` set: the run does not send it and records the row as not measurable.

    Precedence: :data:`DEFAULT_PARAMS` < ``params`` (the run's settings) < the model's registry
    ``params`` (model-specific knowledge wins). A registry parameter set to ``null`` removes it, so
    it is not sent (e.g. Anthropic's 2026-10-21 API takes no ``temperature``). When the merged
    parameters sample, repeat r is sent with its own seed derived from the base seed, r and the
    request (:func:`metamorph.replicates.seeded`), so the k repeats — and the four formats of a
    group — are independent draws (§4.1) that a rerun reproduces; greedy repeats keep the base seed (a local
    model computes them once: :mod:`metamorph.replicates`).
    Raises ``ValueError`` for ``k < 1`` or a document whose instance is unknown.
    """
    if k < 1:
        raise ValueError("k (repeats) must be >= 1")
    merged = _request_params(model, params)
    by_id = {(x.dataset, x.instance_id): x for x in instances}
    out: list[PlannedGeneration] = []
    for doc in documents:
        x = by_id.get((doc.dataset, doc.instance_id))
        if x is None:
            raise ValueError(f"document for unknown instance {doc.dataset}/{doc.instance_id}")
        for ingestion in model.ingestion:
            messages = build_messages(x, doc, ingestion)
            attached = None if ingestion == "inline" else Document(doc.content, doc.media_type, doc.filename)
            for r in range(1, k + 1):
                req = seeded(
                    GenerationRequest(
                        provider=model.provider,
                        model=model.model,
                        messages=tuple(messages),
                        params=dict(merged),
                        base_url=model.base_url,
                        ingestion=ingestion,
                        document=attached,
                        renderer_version=request_renderer_version(doc, ingestion),
                        repeat_index=r,
                        workflow_version=model.version,
                        workflow_io=model.workflow.io_key() if model.workflow else None,
                    )
                )
                out.append(
                    PlannedGeneration(
                        model.workflow_id(ingestion),
                        model.id,
                        x.instance_id,
                        x.dataset,
                        doc.format,
                        r,
                        doc.sha256,
                        req,
                        base_seed=merged.get("seed"),
                        not_sent=None
                        if accepts(ingestion, doc.media_type)
                        else not_sent(ingestion, doc.format, doc.media_type),
                    )
                )
    return out


def plan_routing(
    instances: Iterable[SourceInstance],
    documents: Iterable[RenderedDocument],
    model: ModelSpec,
    best_format: dict[tuple[str, str], str],
    *,
    k: int = 3,
    params: dict[str, Any] | None = None,
) -> list[PlannedGeneration]:
    """Requests of format routing (§5.5): every input, whatever its format, is converted to the
    workflow's best format and re-run through the workflow.

    For every instance, every *source* format f it was rendered in, every ingestion path and
    r = 1..k: the request of :func:`plan_generations` for the document in the best format
    ``b = best_format[(workflow_id, dataset)]``, with ``format = f`` (the input it stands for)
    and ``routed_format = b``. Each routed input is a *new* call: its ``repeat_index`` is
    ``r + k·j`` where j is f's position in ``[b, other formats in txt, md, json, csv order]``
    — so the input that already was in b (j = 0) is the original call (the cache serves it,
    nothing is re-asked), and the other three inputs get distinct cache keys (new
    generations through the cache) while their messages and document are exactly b's; when
    decoding samples, each is a new draw with its own seed (that of replicate ``r + k·j``,
    :func:`metamorph.replicates.seeded`), and when a local model decodes greedily they
    are the original call in b, computed once. Parameters as :func:`plan_generations`.

    Raises:
        ValueError: ``k < 1``; an instance without a document in its best format; a
            (workflow, dataset) without an entry in ``best_format``.
    """
    if k < 1:
        raise ValueError("k (repeats) must be >= 1")
    merged = _request_params(model, params)
    docs: dict[tuple[str, str], dict[str, RenderedDocument]] = {}
    for d in documents:
        docs.setdefault((d.dataset, d.instance_id), {})[d.format] = d
    out: list[PlannedGeneration] = []
    for x in instances:
        by_fmt = docs.get((x.dataset, x.instance_id), {})
        for ingestion in model.ingestion:
            wf = model.workflow_id(ingestion)
            if (wf, x.dataset) not in best_format:
                raise ValueError(f"plan_routing: no best format for workflow {wf!r}, dataset {x.dataset!r}")
            b = best_format[(wf, x.dataset)]
            if b not in by_fmt:
                raise ValueError(
                    f"plan_routing: instance {x.dataset}/{x.instance_id} has no {b!r} document "
                    f"(formats {sorted(by_fmt)})"
                )
            doc = by_fmt[b]
            order = [b] + [f for f in _format_order(by_fmt) if f != b]
            messages = build_messages(x, doc, ingestion)
            attached = None if ingestion == "inline" else Document(doc.content, doc.media_type, doc.filename)
            for j, src in enumerate(order):
                for r in range(1, k + 1):
                    req = seeded(
                        GenerationRequest(
                            provider=model.provider,
                            model=model.model,
                            messages=tuple(messages),
                            params=dict(merged),
                            base_url=model.base_url,
                            ingestion=ingestion,
                            document=attached,
                            renderer_version=request_renderer_version(doc, ingestion),
                            repeat_index=r + k * j,
                            workflow_version=model.version,
                            workflow_io=model.workflow.io_key() if model.workflow else None,
                        )
                    )
                    out.append(
                        PlannedGeneration(
                            wf,
                            model.id,
                            x.instance_id,
                            x.dataset,
                            src,
                            r,
                            doc.sha256,
                            req,
                            routed_format=b,
                            base_seed=merged.get("seed"),
                        )
                    )
    return out


def _request_params(model: ModelSpec, params: dict[str, Any] | None) -> dict[str, Any]:
    """The parameters a request of ``model`` carries: :data:`DEFAULT_PARAMS` < ``params`` < the
    registry's (a ``null`` unsets); for a workflow under test only the seed, when it is ``seeded``."""
    merged = {**DEFAULT_PARAMS, **(params or {}), **model.params_for(STUDY)}
    merged = {key: value for key, value in merged.items() if value is not None}
    if model.workflow is not None:
        return {"seed": merged["seed"]} if model.workflow.seeded and "seed" in merged else {}
    return merged


def routing_params(generations: pd.DataFrame, model: ModelSpec) -> tuple[int, dict[str, Any]]:
    """``(k, params)`` that :func:`plan_routing` needs to re-run ``model``'s inputs as its
    ``workflow_generations`` ran them: k = the largest repeat, params = the run's parameters
    (those of a repeat-1 request, less the registry's own, which :func:`plan_routing` merges
    again) with ``seed`` = the run's ``base_seed`` — a request carries its replicate's derived seed
    (:func:`metamorph.replicates.seeded`), and routing derives its replicates' seeds from the base.

    ``generations``: ``workflow_generations`` rows of one model (columns ``repeat``,
    ``request_json``, ``base_seed``). Raises ``ValueError`` when it has no repeat-1 row."""
    first = generations[generations["repeat"] == 1]
    if first.empty:
        raise ValueError("routing_params: workflow_generations has no repeat-1 row")
    row = first.iloc[0]
    own = model.params_for(STUDY)
    params = {key: v for key, v in json.loads(row["request_json"])["params"].items() if key not in own}
    if "seed" in params:
        params["seed"] = int(row["base_seed"])
    return int(generations["repeat"].max()), params


def _format_order(by_fmt: dict[str, RenderedDocument]) -> list[str]:
    return ordered(by_fmt, DEFAULT_FORMATS)


def generation_outcomes(decisions: pd.DataFrame, evidence: pd.DataFrame) -> pd.DataFrame:
    """One row per generation: the metric input of :mod:`metamorph.studies.format_robustness.metrics`.

    Args:
        decisions: ``extracted_decisions`` rows (schema ``ExtractedDecisions``).
        evidence: ``evidence_categories`` rows (one per evidence item, ``categories_json``).

    Returns:
        ``decisions``' lineage columns + ``decision, gold, is_correct, favorable, parse_status``
        (``is_correct`` and ``favorable`` nullable booleans), ``categories_json``: the sorted
        union of the generation's item categories (JSON list; ``[]`` when it has no mapped item
        or is unparseable), and ``call_error`` (parse reason ``call_error``: the call failed, so
        the row is not a reply and the metrics leave it out), ``not_sent`` (of those, the requests
        never sent: ``decisions``' column, False when absent). Row count equals ``len(decisions)``; raises ``ValueError`` if an
        evidence row names an unknown generation.
    """
    keys = ["workflow_id", "dataset", "instance_id", "format", "repeat"]
    cats: dict[str, set[str]] = {}
    for key, cj in zip(evidence["generation_key"], evidence["categories_json"]):
        cats.setdefault(key, set()).update(json.loads(cj))
    unknown = set(cats) - set(decisions["generation_key"])
    if unknown:
        raise ValueError(
            f"{len(unknown)} evidence rows name generations not in extracted_decisions, e.g. {sorted(unknown)[:3]}"
        )
    out = decisions[
        ["model_id", *keys, "generation_key", "decision", "gold", "is_correct", "favorable", "parse_status"]
    ].copy()
    out["categories_json"] = [json.dumps(sorted(cats.get(k, set()))) for k in out["generation_key"]]
    out["call_error"] = is_call_error(decisions["parse_reason"]).to_numpy()
    out["not_sent"] = (
        decisions["not_sent"].fillna(False).astype(bool).to_numpy() if "not_sent" in decisions.columns else False
    )
    out["is_correct"] = out["is_correct"].astype("boolean")
    out["favorable"] = out["favorable"].astype("boolean")
    return out.reset_index(drop=True)


def metric_input(outcomes: pd.DataFrame) -> pd.DataFrame:
    """``generation_outcomes`` with ``categories`` as Python lists and ``is_correct`` filled
    (False where gold exists but the row is null, except on a failed call, which has no
    correctness) — the generations frame the metrics take."""
    gen = outcomes.copy()
    gen["categories"] = [json.loads(c) for c in gen["categories_json"]]
    gen["decision"] = gen["decision"].astype(object).where(gen["decision"].notna(), None)
    gen["gold"] = gen["gold"].astype(object).where(gen["gold"].notna(), None)
    has_gold = gen["gold"].notna()
    failed = gen["call_error"].astype(bool) if "call_error" in gen.columns else False
    gen["is_correct"] = gen["is_correct"].astype("boolean")
    gen.loc[has_gold & gen["is_correct"].isna() & ~failed, "is_correct"] = False
    return gen


def sensitive_frame(source_instances: pd.DataFrame) -> pd.DataFrame:
    """Long frame ``dataset, instance_id, attribute, value`` from ``source_instances.sensitive_json``."""
    rows = [
        (r.dataset, r.instance_id, a, str(v))
        for r in source_instances.itertuples()
        for a, v in json.loads(r.sensitive_json).items()
    ]
    return pd.DataFrame(rows, columns=["dataset", "instance_id", "attribute", "value"])


def cost_steps(model: ModelSpec, options) -> list:
    """The run's generation steps for ``model`` (``metamorph plan``, :mod:`metamorph.costplan`):
    the requests ``workflow_generations`` sends, then those of ``routed_generations`` for every
    possible best format per dataset (the best format is known only after the generations).

    Streamed (:meth:`metamorph.costplan.PlanStep.streamed`): an instance's documents are rendered
    and its requests built when the planner reaches it, and dropped once counted, so the plan
    holds the source instances and the keys, not every rendered request. Each instance's four
    documents are checked (:func:`~metamorph.studies.format_robustness.renderers.render` with
    ``check=True``) as ``workflow_generations`` plans it; routing renders the best format again.

    ``options``: the study's :class:`metamorph.study.Options`; the defaults are the assets' (sources
    ``construct``, every row, sample seed 0, the formats of ``--formats`` (the paper's four), k 3,
    :data:`DEFAULT_PARAMS`). A document its format cannot write
    (:class:`~metamorph.studies.format_robustness.renderers.UnwritableCharacter`) is not planned, as
    ``rendered_documents`` leaves it out of the generations. Raises the loaders' and the renderers'
    :class:`~metamorph.errors.InputError` (the renderers' when the steps are made: every document is
    rendered and checked once up front, keeping only which formats each instance can be written in).
    A request its ingestion path cannot send (:func:`not_sent_notes`) is not counted, and routing's
    best format is one the path can send.
    """
    from metamorph.costplan import PlanStep
    from metamorph.studies.format_robustness.renderers import RENDERERS, UnwritableCharacter, render

    xs = [x for _, x in DECLARED.sources_of(options)]
    formats = list(options.formats)
    k = options.k
    params = {**DEFAULT_PARAMS, **({"max_tokens": options.max_tokens} if options.max_tokens else {})}

    def writable(x: SourceInstance) -> tuple[str, ...]:
        out = []
        for f in formats:
            try:
                render(x, f, check=True)
            except UnwritableCharacter:
                continue
            out.append(f)
        return tuple(out)

    # the formats each instance has a document in (names only: the documents are rendered again when planned)
    written = {(x.dataset, x.instance_id): writable(x) for x in xs}

    def generations():
        for x in xs:
            docs = [render(x, f, check=False) for f in written[(x.dataset, x.instance_id)]]
            yield from (p.request for p in plan_generations([x], docs, model, k=k, params=params) if not p.not_sent)

    def routed(one: ModelSpec, ingestion: str, ds: str, sub: list[SourceInstance], b: str):
        best = {(one.workflow_id(ingestion), ds): b}
        for x in sub:
            # routing sends the best format's document for every format the instance was written in:
            # the others are only named (their position in the format order), so only b is rendered here
            doc = render(x, b, check=False)
            named = [doc if f == b else dataclasses.replace(doc, format=f) for f in written[(x.dataset, x.instance_id)]]
            yield from (p.request for p in plan_routing([x], named, one, best, k=k, params=params))

    groups = []  # the best format is chosen per workflow (model × ingestion) and dataset
    for ingestion in model.ingestion:
        one = dataclasses.replace(model, ingestion=(ingestion,))
        for ds in dict.fromkeys(x.dataset for x in xs):
            sub = [x for x in xs if x.dataset == ds]
            # a best format is one every instance of the dataset has a document in, and one the path can send
            candidates = [
                b
                for b in formats
                if accepts(ingestion, RENDERERS[b].media_type)
                and all(b in written[(x.dataset, x.instance_id)] for x in sub)
            ]
            groups.append((one, ingestion, ds, sub, candidates))

    def routing_groups():
        for one, ingestion, ds, sub, candidates in groups:
            yield tuple(routed(one, ingestion, ds, sub, b) for b in candidates)

    return [
        PlanStep.streamed("workflow_generations", lambda: iter([(generations(),)]), outcomes=False),
        PlanStep.streamed("routed_generations", routing_groups, outcomes=any(len(g[4]) > 1 for g in groups)),
    ]


def not_sent_notes(model: ModelSpec, options) -> list[str]:
    """The lines ``metamorph plan`` prints for ``model`` before its counts: per ingestion path that
    cannot take some of the run's formats (:func:`metamorph.providers.file_inputs.accepts`), e.g.
    ``claude-x anthropic_document: cannot take docx, xlsx (6 requests not sent; those cells are not
    measurable)``. The count is k × the documents of those formats ``rendered_documents`` writes
    (a document its format cannot write is not counted: it has no request). ``[]`` when every path
    takes every format. ``options`` as :func:`cost_steps`; raises the loaders' and renderers'
    :class:`~metamorph.errors.InputError`."""
    from metamorph.studies.format_robustness.renderers import RENDERERS, UnwritableCharacter, render

    formats = list(options.formats)
    refused = {ing: [f for f in formats if not accepts(ing, RENDERERS[f].media_type)] for ing in model.ingestion}
    refused = {ing: fs for ing, fs in refused.items() if fs}
    if not refused:
        return []
    xs = [x for _, x in DECLARED.sources_of(options)]
    k = options.k

    def writable(x: SourceInstance, f: str) -> bool:
        try:
            render(x, f, check=True)
        except UnwritableCharacter:
            return False
        return True

    lines = []
    for ing, fs in refused.items():
        n = k * sum(writable(x, f) for x in xs for f in fs)
        lines.append(
            f"{model.id} {ing}: cannot take {', '.join(fs)} ({n} request{'' if n == 1 else 's'} not sent; "
            "those cells are not measurable)"
        )
    return lines


def with_not_sent(planned: list[PlannedGeneration], sent_outcomes: list) -> list:
    """The outcome of every planned generation, in ``planned``'s order: those of the requests that were
    sent (``sent_outcomes``, :func:`metamorph.runner.run_requests` of the planned generations without
    ``not_sent``, same order), and for each one that was not, an outcome with no text and ``error`` =
    its ``not_sent`` reason (0 attempts, not from the cache, keyed by its request's cache key; nothing
    is stored in the cache). Raises ``ValueError`` when the counts differ."""
    from metamorph.runner import Outcome

    sent = iter(sent_outcomes)
    n_sent = sum(1 for p in planned if not p.not_sent)
    if n_sent != len(sent_outcomes):
        raise ValueError(f"with_not_sent: {n_sent} planned requests are sent, {len(sent_outcomes)} outcomes")
    return [
        next(sent)
        if not p.not_sent
        else Outcome(p.request, p.request.cache_key(), GenerationResult(None, error=p.not_sent, attempts=0), False)
        for p in planned
    ]
