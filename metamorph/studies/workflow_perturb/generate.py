"""The LLM perturbation generator of WorkflowPerturb (App. A), beside the deterministic
operators of :mod:`metamorph.studies.workflow_perturb.perturb`.

The plan of App. A (:func:`generate_perturbation`): one fixed worked example per type
(:data:`EXAMPLE_OUTPUTS`, written for this project) before a row-specific instruction naming the
golden workflow and the exact N; the reply is parsed from the ``Node:``/``Edge:`` format and
checked statically (:func:`~metamorph.studies.workflow_perturb.validate.check_variant`: node count,
change count); an invalid reply is answered with the validation error as a new user turn (the
refinement loop of A.6) up to ``max_attempts`` times per model; then the next, stronger model of
the configured list is tried (escalation); for description changes the per-node hybrid fallback
of A.10 finally asks for one step at a time and splices the results into the golden graph. A row
that still fails is returned with ``status="invalid"`` and the residual failure — never dropped; a
row for which no call of any model returned a reply (each failed at the provider) is
``status="call_error"``: the generator was never heard, so the row is not a failed perturbation.

Model calls are plain callables ``messages -> GenerationResult`` (:class:`GeneratorModel`), so the
study can route them through :func:`metamorph.runner.run_requests` and the generation cache; use
:func:`build_request` / :func:`provider_generate` so every call is a cacheable
:class:`~metamorph.providers.base.GenerationRequest`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metamorph.providers.base import GenerationRequest, GenerationResult, Provider, ProviderError
from metamorph.studies.workflow_perturb.perturb import (
    Perturbation,
    check_n_altered,
    variant_workflow,
    n_to_alter,
    row_seed,
)
from metamorph.studies.workflow_perturb.validate import (
    altered_from_output,
    check_type,
    check_output,
    check_variant,
    expected_nodes,
)
from metamorph.studies.workflow_perturb.workflows import Edge, Workflow, format_workflow, normalize_text

__all__ = [
    "DEFAULT_PARAMS",
    "EXAMPLE_GOLDEN",
    "EXAMPLE_N",
    "EXAMPLE_OUTPUTS",
    "NODE_EXAMPLE",
    "NODE_SYSTEM_PROMPT",
    "PROMPT_VERSION",
    "SYSTEM_PROMPT",
    "GenerateFn",
    "GeneratorModel",
    "build_messages",
    "build_node_messages",
    "build_request",
    "check_node_reply",
    "feedback_message",
    "generate_perturbation",
    "node_instruction",
    "provider_generate",
    "row_instruction",
]

#: Version of the prompts below; part of every request (``renderer_version``), so the generation
#: cache never serves a reply to an older prompt.
PROMPT_VERSION = "workflowperturb-prompts-v1"

#: Decoding parameters of the generator's requests (greedy; the seed is sent explicitly).
DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 1024, "seed": 0}

SYSTEM_PROMPT = (
    "You edit workflows for a benchmark that tests workflow-evaluation metrics. A workflow is written as\n"
    "Node:\n1: <step>\n2: <step>\n...\nEdge: (START,1) (1,2) ... (n,END)\n"
    "An edge (u,v) means step u must be done before step v; START and END are the start and the end. "
    "Always answer with one complete workflow in exactly this format and nothing else."
)

#: The fixed worked example (A.2): one golden workflow and one perturbed version per type, N = 2.
EXAMPLE_GOLDEN = Workflow(
    "example/make_tea",
    "Make a cup of tea.",
    (
        "Fill the kettle with water",
        "Boil the water",
        "Put a tea bag in a mug",
        "Pour the boiling water into the mug",
        "Let the tea steep for three minutes",
        "Remove the tea bag and serve the tea",
    ),
    (("START", "1"), ("START", "3"), ("1", "2"), ("2", "4"), ("3", "4"), ("4", "5"), ("5", "6"), ("6", "END")),
    "embedded",
)

EXAMPLE_N = 2

EXAMPLE_OUTPUTS: dict[str, str] = {
    "missing": (  # steps 2 and 5 removed; 1 -> 4 and 4 -> 6 reconnect the graph
        "Node:\n1: Fill the kettle with water\n2: Put a tea bag in a mug\n3: Pour the boiling water into the mug\n"
        "4: Remove the tea bag and serve the tea\nEdge: (START,1) (START,2) (1,3) (2,3) (3,4) (4,END)"
    ),
    "compressed": (  # step 2 merged into 1, step 6 merged into 5
        "Node:\n1: Fill the kettle with water and boil it\n2: Put a tea bag in a mug\n"
        "3: Pour the boiling water into the mug\n"
        "4: Let the tea steep for three minutes, then remove the tea bag and serve the tea\n"
        "Edge: (START,1) (START,2) (1,3) (2,3) (3,4) (4,END)"
    ),
    "description": (  # steps 3 and 5 reworded
        "Node:\n1: Fill the kettle with water\n2: Boil the water\n3: Drop a tea bag into a mug\n"
        "4: Pour the boiling water into the mug\n5: Leave the tea to brew for three minutes\n"
        "6: Remove the tea bag and serve the tea\n"
        "Edge: (START,1) (START,3) (1,2) (2,4) (3,4) (4,5) (5,6) (6,END)"
    ),
}


def _plural(k: int, word: str) -> str:
    return f"{k} {word}{'s' if k != 1 else ''}"


def row_instruction(golden: Workflow, ptype: str, n: int) -> str:
    """The row-specific instruction: the task, the golden workflow in Node:/Edge: form, the exact N
    and the node count the answer must have."""
    check_type(ptype)
    total = golden.n_nodes
    want = expected_nodes(ptype, total, n)
    head = f"Task: {golden.task}\nGolden workflow ({_plural(total, 'step')}):\n{format_workflow(golden)}\n\n"
    if ptype == "missing":
        body = (
            f"Remove exactly {_plural(n, 'step')} from this workflow. Copy every other step's text unchanged, "
            f"renumber the remaining steps 1 to {want}, and reconnect the edges so that each removed step's "
            f"predecessors lead to its successors. The answer must have exactly {_plural(want, 'step')}."
        )
    elif ptype == "compressed":
        body = (
            f"Compress this workflow by merging exactly {_plural(n, 'step')} into a neighbouring step: each "
            f"merged node describes both steps in one sentence. Copy the other steps unchanged, renumber the "
            f"steps 1 to {want}, and keep the order of the edges. The answer must have exactly "
            f"{_plural(want, 'step')}."
        )
    else:
        body = (
            f"Reword exactly {_plural(n, 'step')} of this workflow: say the same thing with different words. "
            f"Copy all other steps unchanged, keep all {total} steps with their numbers and keep every edge "
            f"exactly as it is."
        )
    return head + body + "\nAnswer with the workflow only, in the Node:/Edge: format."


def build_messages(golden: Workflow, ptype: str, n: int) -> list[dict[str, str]]:
    """System prompt, the fixed worked example of ``ptype`` (user instruction + assistant answer,
    A.2), then the row instruction (:func:`row_instruction`)."""
    check_type(ptype)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": row_instruction(EXAMPLE_GOLDEN, ptype, EXAMPLE_N)},
        {"role": "assistant", "content": EXAMPLE_OUTPUTS[ptype]},
        {"role": "user", "content": row_instruction(golden, ptype, n)},
    ]


def feedback_message(problem: str) -> str:
    """The refinement turn (A.6): the exact validation error, and the request to answer again."""
    return (
        f"Your workflow is not valid: {problem}\n"
        "Fix this and answer again with the complete workflow in the Node:/Edge: format, and nothing else."
    )


NODE_SYSTEM_PROMPT = (
    "You reword single steps of workflows. Keep the meaning, change the wording. "
    "Answer with the reworded step only, on one line."
)

NODE_EXAMPLE = ("Put a tea bag in a mug", "Drop a tea bag into a mug")


def node_instruction(golden: Workflow, node_id: str) -> str:
    """The per-node instruction of the hybrid fallback (A.10): task context and one step."""
    return f"Task: {golden.task}\nStep: {golden.text(node_id)}\nReword this step."


def build_node_messages(golden: Workflow, node_id: str) -> list[dict[str, str]]:
    """Messages asking for one reworded step (system, fixed example pair, the step)."""
    return [
        {"role": "system", "content": NODE_SYSTEM_PROMPT},
        {"role": "user", "content": f"Task: {EXAMPLE_GOLDEN.task}\nStep: {NODE_EXAMPLE[0]}\nReword this step."},
        {"role": "assistant", "content": NODE_EXAMPLE[1]},
        {"role": "user", "content": node_instruction(golden, node_id)},
    ]


_NODE_PREFIX = re.compile(
    r"^(?:[-*>\s]*)(?:(?:reworded|rewritten|new)?\s*step\s*\d*\s*[:.-]\s*|\d+\s*[:.)]\s*)", re.IGNORECASE
)


def check_node_reply(original: str, reply: str | None) -> tuple[str | None, str | None]:
    """Read one reworded step: first non-empty line, a leading ``Step:``/``1:`` label and quotes
    removed. Returns ``(text, None)`` or ``(None, problem)``: empty reply, a workflow instead of a
    step, longer than 3×original + 40 characters, or unchanged after :func:`normalize_text`."""
    lines = [x.strip() for x in (reply or "").replace("\r", "\n").split("\n") if x.strip()]
    if not lines:
        return None, "the reply is empty; answer with the reworded step"
    text = _NODE_PREFIX.sub("", lines[0]).strip().strip("\"'`").strip()
    if not text:
        return None, "the reply is empty; answer with the reworded step"
    if re.match(r"^(node|edge)s?\s*:", text, re.IGNORECASE):
        return None, "the reply is a workflow; answer with the reworded step only"
    if len(text) > 3 * len(original) + 40:
        return None, f"the reworded step is too long ({len(text)} characters for a {len(original)}-character step)"
    if normalize_text(text) == normalize_text(original):
        return None, "the reworded step is identical to the original; use different words"
    return text, None


GenerateFn = Callable[[list[dict[str, str]]], GenerationResult]


@dataclass(frozen=True)
class GeneratorModel:
    """One model of the escalation list: a name for the record and ``generate(messages) -> result``."""

    name: str
    generate: GenerateFn


def build_request(
    provider: str,
    model: str,
    messages: Sequence[dict[str, str]],
    *,
    params: dict[str, Any] | None = None,
    base_url: str | None = None,
) -> GenerationRequest:
    """The cacheable request of one generator call: :data:`DEFAULT_PARAMS` updated with ``params``
    (a ``None`` value removes a parameter), ``renderer_version`` = :data:`PROMPT_VERSION`."""
    merged = {k: v for k, v in {**DEFAULT_PARAMS, **(params or {})}.items() if v is not None}
    return GenerationRequest(
        provider=provider,
        model=model,
        messages=tuple(dict(m) for m in messages),
        params=merged,
        base_url=base_url,
        renderer_version=PROMPT_VERSION,
    )


def provider_generate(
    provider: Provider,
    model: str,
    *,
    cache: Any = None,
    params: dict[str, Any] | None = None,
    base_url: str | None = None,
    retry: Any = None,
    log: Callable[[str], None] | None = None,
    stale_before: Any = None,
) -> GenerateFn:
    """A ``generate`` callable for :class:`GeneratorModel` backed by a provider.

    Each call builds :func:`build_request`; with a :class:`~metamorph.cache.GenerationCache` it goes
    through :func:`~metamorph.runner.run_requests` (cache hit, or a call with retries stored at
    once; ``stale_before`` as there), otherwise straight to the provider with
    :func:`~metamorph.providers.retry.call_with_retries`. Failures come back as results with ``error`` set, never as exceptions. A provider in batch mode
    (:class:`~metamorph.batch.BatchExecution`) is called synchronously here: each turn needs the
    previous one's answer, so a batch job per turn would only add its latency.
    """
    from metamorph.providers.retry import RetryPolicy, call_with_retries
    from metamorph.runner import run_requests

    quiet = log or (lambda _msg: None)
    from metamorph.batch import BatchExecution

    if isinstance(provider, BatchExecution):  # batch mode: each turn needs the previous answer, so call at once
        provider = provider.inner

    def generate(messages: list[dict[str, str]]) -> GenerationResult:
        req = build_request(provider.kind, model, messages, params=params, base_url=base_url)
        if cache is not None:
            outcomes, _ = run_requests([req], provider, cache, retry=retry, log=quiet, stale_before=stale_before)
            return outcomes[0].result
        try:
            res, attempts = call_with_retries(lambda: provider.generate(req), retry or RetryPolicy())
            return res.replace(attempts=attempts)
        except ProviderError as exc:
            return GenerationResult(text=None, error=f"ProviderError[{exc.status}]: {exc}")
        except Exception as exc:  # recorded on the row, never raised out of the study
            return GenerationResult(text=None, error=f"{type(exc).__name__}: {exc}")

    return generate


def _as_models(models: Sequence[GeneratorModel | tuple[str, GenerateFn]]) -> list[GeneratorModel]:
    out = [m if isinstance(m, GeneratorModel) else GeneratorModel(*m) for m in models]
    if not out:
        raise ValueError("the LLM generator needs at least one model")
    return out


def _reply_problem(res: GenerationResult) -> str | None:
    if res.error is not None or res.text is None:
        return f"the model call failed: {res.error}"
    return None


def _cut_note(res: GenerationResult) -> str:
    return " (the reply was cut off at the token limit)" if res.finish_reason == "length" else ""


@dataclass
class _Tally:
    attempts: int = 0
    call_errors: int = 0
    tried: list[str] = field(default_factory=list)
    model: str | None = None

    def call(self, m: GeneratorModel, messages: list[dict[str, str]]) -> GenerationResult:
        self.attempts += 1
        self.model = m.name
        if m.name not in self.tried:
            self.tried.append(m.name)
        res = m.generate([dict(x) for x in messages])
        if _reply_problem(res) is not None:
            self.call_errors += 1
        return res


def generate_perturbation(
    golden: Workflow,
    ptype: str,
    p: float,
    models: Sequence[GeneratorModel | tuple[str, GenerateFn]],
    *,
    max_attempts: int = 3,
    hybrid: bool = True,
    seed: int = 0,
    n: int | None = None,
) -> Perturbation:
    """The LLM generator of App. A for one (golden, type, severity) row.

    1. Messages = :func:`build_messages` (worked example of the type + the row instruction with
       N = :func:`n_to_alter` unless ``n`` is given).
    2. For each model in ``models`` (escalation order, weakest first), up to ``max_attempts``
       calls: the reply is checked with :func:`check_output`; if it fails, the reply and
       :func:`feedback_message` of the exact problem are appended as new assistant/user turns
       (A.6) and the model is asked again. A failed call (``result.error``) uses an attempt and is
       retried with the same messages. Each model starts again from the base messages.
    3. Description changes only, when every model failed and ``hybrid``: the per-node fallback
       (A.10). N node ids are drawn with ``random.Random(row_seed(...))``; each is reworded alone
       (:func:`build_node_messages`, :func:`check_node_reply`, same refinement and escalation), and
       the reworded steps are spliced into the golden graph.

    Returns a :class:`Perturbation` with ``operator="llm"``, ``method`` ``llm`` or ``llm_hybrid``,
    ``attempts`` (all calls), ``call_errors`` (those that failed at the provider), ``model`` (the
    last one called), ``models_tried``, ``status`` ``valid``/``invalid``/``call_error`` (no call
    returned a reply) and ``failure`` (the last problem) — an invalid row keeps the last parsed
    variant (or ``workflow=None``) and the raw reply. Raises ``ValueError`` for an unknown
    type, an empty model list or ``max_attempts < 1``.
    """
    check_type(ptype)
    ms = _as_models(models)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    n = n_to_alter(p, golden.n_nodes) if n is None else n
    check_n_altered(golden, n)
    tally = _Tally()
    base = build_messages(golden, ptype, n)
    failure: str | None = None
    raw: str | None = None
    last: tuple[tuple[str, ...], tuple[Edge, ...]] | None = None

    def record(
        status: str, method: str, graph: tuple[tuple[str, ...], tuple[Edge, ...]] | None, problem: str | None
    ) -> Perturbation:
        if status == "invalid" and tally.call_errors == tally.attempts:
            status = "call_error"
        wf = None if graph is None else variant_workflow(golden, ptype, p, n, *graph)
        altered = () if graph is None else altered_from_output(golden, ptype, graph[0])
        return Perturbation(
            workflow=wf,
            type=ptype,
            p=p,
            n_altered=n,
            altered_node_ids=altered,
            operator="llm",
            golden_id=golden.workflow_id,
            method=method,
            model=tally.model,
            models_tried=tuple(tally.tried),
            attempts=tally.attempts,
            call_errors=tally.call_errors,
            status=status,
            failure=problem,
            raw_output=raw,
        )

    for m in ms:
        messages = list(base)
        for _ in range(max_attempts):
            res = tally.call(m, messages)
            failure = _reply_problem(res)
            if failure is not None:
                continue
            raw = res.text
            graph, problem = check_output(golden, ptype, n, res.text or "")
            if graph is not None:
                last = graph
            if problem is None:
                return record("valid", "llm", graph, None)
            failure = problem + _cut_note(res)
            messages = messages + [
                {"role": "assistant", "content": res.text or ""},
                {"role": "user", "content": feedback_message(failure)},
            ]
    if ptype == "description" and hybrid:
        return _hybrid(golden, p, n, ms, max_attempts, seed, tally, record, failure, last)
    return record("invalid", "llm", last, failure)


def _hybrid(
    golden: Workflow,
    p: float,
    n: int,
    ms: list[GeneratorModel],
    max_attempts: int,
    seed: int,
    tally: _Tally,
    record: Callable[..., Perturbation],
    whole_failure: str | None,
    last: tuple[tuple[str, ...], tuple[Edge, ...]] | None,
) -> Perturbation:
    """Per-node fallback (A.10) of description changes; see :func:`generate_perturbation`."""
    rng = random.Random(row_seed(golden.workflow_id, "description", p, seed))
    ids = sorted(rng.sample(list(golden.node_ids), n), key=int)
    texts = list(golden.nodes)
    for nid in ids:
        original = golden.text(nid)
        new, problem = None, None
        for m in ms:
            messages = build_node_messages(golden, nid)
            for _ in range(max_attempts):
                res = tally.call(m, messages)
                problem = _reply_problem(res)
                if problem is not None:
                    continue
                new, problem = check_node_reply(original, res.text)
                if new is not None:
                    break
                messages = messages + [
                    {"role": "assistant", "content": res.text or ""},
                    {"role": "user", "content": f"That is not usable: {problem}. Answer with the reworded step only."},
                ]
            if new is not None:
                break
        if new is None:
            return record(
                "invalid",
                "llm_hybrid",
                last,
                f"whole workflow: {whole_failure}; per-node fallback, step {nid}: {problem}",
            )
        texts[int(nid) - 1] = new
    graph = (tuple(texts), golden.edges)
    problem = check_variant(golden, "description", n, *graph)
    return record("valid" if problem is None else "invalid", "llm_hybrid", graph, problem)
