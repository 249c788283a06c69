"""Prompt wrappers and token control for the wrapper-sensitivity study (FSI paper, arXiv 2607.09665, §3.2–3.3).

A *wrapper* turns a :class:`~metamorph.studies.wrapper_sensitivity.tasks.QAItem` into chat messages
``[{"role": "system", ...}, {"role": "user", ...}]``. The item content (passage, question, options)
is the same in every wrapper; only the layout around it and the requested output form change.
Templates are versioned data (``metamorph/studies/wrapper_sensitivity/data/wrappers/<version>.json``, see
:func:`load_templates`); :func:`render_prompt` records the version and the padding with every
prompt, and the exact rendered messages are what gets stored with each generation.

Families and their output contracts (§3.2)
------------------------------------------
These contracts are fixed; the answer extractor is written against exactly them. ``<value>`` is
spelled, for every family but ``json``:

* choice items — the option label exactly as shown in the prompt (``B``; ``2`` for WinoGrande,
  PIQA and ARC items numbered 1–4);
* boolean items — ``true`` or ``false``;
* numeric items — one number in digits (optional ``-`` and decimal point; no units, no thousands
  separators), compared after :func:`~metamorph.studies.wrapper_sensitivity.tasks.normalize_number`.

==================== ===========================================================================
family               what the prompt asks the reply to be
==================== ===========================================================================
``plain``            the bare ``<value>`` and nothing else (the whole reply, stripped, is the
                     answer). Content as plain paragraphs; options as ``A. text`` lines.
``json``             only a JSON object ``{"answer": <v>}`` where ``<v>`` is a JSON string for
                     choice items (``{"answer": "B"}``), the JSON literal ``true``/``false`` for
                     boolean items and a JSON number for numeric items (``{"answer": 18}``,
                     ``{"answer": 0.5}``) — see :func:`answer_json_schema`. Content as ``plain``.
``structured``       exactly one line ``Answer: <value>``. Content as key-value fields
                     (``Task: ...``, ``Passage: ...``, ``Question: ...``, ``Options:`` then
                     ``A) text`` lines, ``Output: ...``).
``structured_delim`` the value between ``<answer>`` and ``</answer>`` (``<answer>B</answer>``).
                     Content in delimited sections ``### Passage``, ``### Question``,
                     ``### Options``, ``### Answer``.
``deliberate``       free step-by-step reasoning (a scratchpad), then a final line
                     ``Final answer: <value>``; the answer is the last line starting with
                     ``Final answer:``. Content as ``plain``. Needs a larger ``max_tokens``.
==================== ===========================================================================

In every family the output instruction is the *last* block of the user message; the system
message is the same sentence for all families in ``v1``.

Token control (§3.3)
--------------------
Wrappers differ in length, and prompt length alone moves accuracy, so every prompt of a task is
padded with whitespace to one per-task *character* budget (:func:`task_char_budget` = the longest
unpadded prompt over the task's items × families, so nothing is truncated; :func:`pad_to_budget`).
Padding choice (``v1``): runs of ``"\\n"`` inserted *between the item content and the output
instruction* (immediately before the block named ``pad_before``). Why there and why newlines:

* interior, not at either end of the user message: chat templates that ``trim`` message content
  (Llama 3's does) and APIs that strip whitespace would silently drop leading/trailing padding;
  and the output instruction stays the last thing the model reads, in every family;
* between blocks, never inside the question, passage or an option: item content is untouched;
* newlines, not spaces: a run of spaces costs almost nothing under a byte-level BPE (SmolLM2
  encodes 32 spaces as one token) and a space before a word merges into the word's token, while
  runs of newlines tokenize at about 4 characters per token (``"\\n\\n\\n\\n"`` is one SmolLM2
  token), close to English text, so equal characters come out as nearly equal tokens.

Characters are not tokens: the realised prompt tokens are counted with the target model's own
tokenizer and chat template (``count_tokens(messages) -> int``; for the local model pass
``LlamaCppProvider.prompt_tokens``), and :func:`delta_tok` = (max − min) / mean over the wrappers
of one item measures what is left; :func:`matched_subset` keeps the items with Δtok ≤ 0.05.
:func:`check_context_budget` rejects a prompt that cannot fit the context window before any call.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from metamorph.datasets import read_json_file
from metamorph.errors import ConfigError, ContextBudgetError, InputError
from metamorph.studies.wrapper_sensitivity.tasks import QAItem
from metamorph.studies.wrapper_sensitivity.vocab import ANSWER_TYPES, FAMILIES

__all__ = [
    "FAMILIES",
    "MATCH_THRESHOLD",
    "WRAPPER_PACKAGE_DIR",
    "WrappedPrompt",
    "answer_json_schema",
    "available_template_versions",
    "check_context_budget",
    "delta_tok",
    "load_templates",
    "matched_subset",
    "measure_prompt_tokens",
    "pad_to_budget",
    "render_prompt",
    "render_token_controlled",
    "task_char_budget",
    "validate_templates",
]

#: Δtok at or below which an item counts as token-matched (§3.3).
MATCH_THRESHOLD = 0.05

#: Where the template files live inside the ``metamorph`` package.
WRAPPER_PACKAGE_DIR = ("data", "wrappers")

Messages = list[dict[str, str]]
TokenCounter = Callable[[Messages], int]

_SLOTS = ("passage", "question", "options", "labels")


# ------------------------------------------------------------------------------------------
# Templates as data


def _template_dir() -> Any:
    return resources.files(__package__).joinpath(*WRAPPER_PACKAGE_DIR)


def available_template_versions(directory: str | Path | None = None) -> list[str]:
    """Template versions that have a file (sorted), e.g. ``["v1"]``."""
    d = Path(directory) if directory is not None else _template_dir()
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


def _identifiers(text: str, where: str, path: str, allowed: Iterable[str]) -> set[str]:
    t = string.Template(text)
    if not t.is_valid():
        raise InputError(path, f"{where}: invalid '$' placeholder syntax (write '$$' for a literal '$')")
    ids = set(t.get_identifiers())
    bad = ids - set(allowed)
    if bad:
        raise InputError(path, f"{where}: unknown placeholder(s) {sorted(bad)}; allowed: {sorted(allowed)}")
    return ids


def validate_templates(data: Any, path: str, expected_version: str | None = None) -> dict:
    """Check a template set (the structure of ``v1.json``) and return it.

    Raises :class:`InputError` naming ``path`` for: a version other than ``expected_version``, a
    missing or extra family, a missing key, an ``answer`` block without one text per answer type, a
    placeholder other than ``$passage $question $options $labels`` (``$label $text`` in
    ``option_line``), ``$passage`` outside a ``when: passage`` block, ``$options`` outside a
    ``when: options`` block, ``$labels`` outside an options block or the choice answer text, a
    ``pad_before`` block that can be absent, or a ``pad_char`` that is not one whitespace character.
    """
    if not isinstance(data, dict):
        raise InputError(path, "a template file is a JSON object")
    version = data.get("version")
    if not isinstance(version, str) or not version:
        raise InputError(path, "missing 'version'")
    if expected_version is not None and version != expected_version:
        raise InputError(path, f"file declares version {version!r}, expected {expected_version!r}")
    pad_char = data.get("pad_char")
    if not isinstance(pad_char, str) or len(pad_char) != 1 or not pad_char.isspace():
        raise InputError(path, f"pad_char must be one whitespace character, got {pad_char!r}")
    families = data.get("families")
    if not isinstance(families, dict) or set(families) != set(FAMILIES):
        got = sorted(families) if isinstance(families, dict) else families
        raise InputError(path, f"families must be exactly {list(FAMILIES)}, got {got}")
    for name in FAMILIES:
        fam = families[name]
        where = f"family {name!r}"
        if not isinstance(fam, dict):
            raise InputError(path, f"{where} must be an object")
        for key in ("system", "separator", "option_line", "pad_before", "blocks"):
            if key not in fam:
                raise InputError(path, f"{where}: missing {key!r}")
        for key in ("system", "separator", "option_line", "pad_before"):
            if not isinstance(fam[key], str):
                raise InputError(path, f"{where}: {key!r} must be a string")
        _identifiers(fam["system"], f"{where} system", path, ())
        if _identifiers(fam["option_line"], f"{where} option_line", path, ("label", "text")) != {"label", "text"}:
            raise InputError(path, f"{where} option_line must use both $label and $text")
        blocks = fam["blocks"]
        if not isinstance(blocks, list) or not blocks:
            raise InputError(path, f"{where}: blocks must be a non-empty list")
        names = []
        for b in blocks:
            if not isinstance(b, dict) or not isinstance(b.get("name"), str) or "text" not in b:
                raise InputError(path, f"{where}: each block is an object with 'name' and 'text'")
            bw = f"{where} block {b['name']!r}"
            when = b.get("when")
            if when not in (None, "passage", "options"):
                raise InputError(path, f"{bw}: 'when' must be 'passage' or 'options', got {when!r}")
            texts = b["text"]
            if b["name"] == "answer":
                if not isinstance(texts, dict) or set(texts) != set(ANSWER_TYPES) or when is not None:
                    raise InputError(
                        path,
                        f"{bw}: text must give one string per answer type {list(ANSWER_TYPES)} "
                        "and the block cannot have 'when'",
                    )
                items = [(f"{bw} ({t})", texts[t], t) for t in ANSWER_TYPES]
            elif isinstance(texts, str):
                items = [(bw, texts, None)]
            else:
                raise InputError(path, f"{bw}: text must be a string")
            for w, text, atype in items:
                if not isinstance(text, str) or not text.strip():
                    raise InputError(path, f"{w}: text must be a non-empty string")
                ids = _identifiers(text, w, path, _SLOTS)
                if "passage" in ids and when != "passage":
                    raise InputError(path, f'{w}: $passage needs "when": "passage"')
                if "options" in ids and when != "options":
                    raise InputError(path, f'{w}: $options needs "when": "options"')
                if "labels" in ids and when != "options" and atype != "choice":
                    raise InputError(path, f"{w}: $labels only in an options block or the choice answer text")
            names.append(b["name"])
        if len(set(names)) != len(names) or names.count("answer") != 1:
            raise InputError(path, f"{where}: block names must be unique with exactly one 'answer' block")
        target = next((b for b in blocks if b["name"] == fam["pad_before"]), None)
        if target is None or target.get("when") is not None:
            raise InputError(
                path, f"{where}: pad_before {fam['pad_before']!r} must name a block that is always present"
            )
    return data


@lru_cache(maxsize=None)
def _load_packaged(version: str) -> dict:
    return _load_file(_template_dir() / f"{version}.json", version)


def _load_file(path: Any, version: str) -> dict:
    data = read_json_file(path, f"wrapper templates for version {version!r}")
    return validate_templates(data, str(path), expected_version=version)


def load_templates(version: str = "v1", directory: str | Path | None = None) -> dict:
    """The validated template set ``<version>.json`` from the package (or ``directory``).

    Shape: ``{"version", "description", "pad_char", "families": {family: {"system", "separator",
    "option_line", "pad_before", "blocks": [{"name", "when"?, "text": str | {answer_type: str}}]}}}``.
    Raises :class:`InputError` naming the file when it is missing or invalid (:func:`validate_templates`).
    The packaged files are read once and cached: treat the result as read-only.
    """
    if not isinstance(version, str) or not version or "/" in version or "\\" in version:
        raise InputError(str(version), "a template version is a file name such as 'v1'")
    if directory is None:
        return _load_packaged(version)
    return _load_file(Path(directory) / f"{version}.json", version)


# ------------------------------------------------------------------------------------------
# Rendering


@dataclass(frozen=True)
class WrappedPrompt:
    """One item rendered in one wrapper family: the exact messages sent to the model.

    Attributes:
        item_id, task: the :class:`QAItem` this prompt wraps.
        family: one of :data:`FAMILIES`.
        template_version: the template file's ``version`` (``"v1"``).
        messages: ``[{"role": "system", "content": ...}, {"role": "user", "content": ...}]``.
        pad_chars: number of padding characters (``pad_char`` of the template set) in the user
            message; 0 for an unpadded prompt.
        pad_offset: character offset in the user message (the last message) where the padding
            starts — just after the separator that precedes the ``pad_before`` block.
    """

    item_id: str
    task: str
    family: str
    template_version: str
    messages: list[dict[str, str]]
    pad_chars: int = 0
    pad_offset: int = 0

    @property
    def chars(self) -> int:
        """Prompt length in characters (Unicode code points): the sum over all message contents.
        This is the unit of the per-task budget (role markers and chat-template tokens excluded)."""
        return sum(len(m["content"]) for m in self.messages)

    @property
    def user(self) -> str:
        """The user message content (padding included)."""
        return self.messages[-1]["content"]

    def unpadded(self) -> "WrappedPrompt":
        """The same prompt with its padding removed (``pad_chars`` 0)."""
        return self.with_pad(0)

    def with_pad(self, n: int) -> "WrappedPrompt":
        """The same prompt with exactly ``n`` padding characters (replacing any existing padding)."""
        if n < 0:
            raise ValueError(f"padding must be >= 0 characters, got {n}")
        pad_char = load_templates(self.template_version)["pad_char"]
        u, off = self.user, self.pad_offset
        content = u[:off] + pad_char * n + u[off + self.pad_chars :]
        msgs = [dict(m) for m in self.messages[:-1]] + [{**self.messages[-1], "content": content}]
        return replace(self, messages=msgs, pad_chars=n)

    def to_record(self) -> dict[str, Any]:
        """Flat row for storage: ids, family, version, padding and the messages as JSON."""
        return {
            "item_id": self.item_id,
            "task": self.task,
            "family": self.family,
            "template_version": self.template_version,
            "pad_chars": self.pad_chars,
            "pad_offset": self.pad_offset,
            "prompt_chars": self.chars,
            "messages_json": json.dumps(self.messages, ensure_ascii=False),
        }


def _family(templates: dict, family: str) -> dict:
    if family not in FAMILIES:
        raise ConfigError(f"unknown wrapper family {family!r}; known: {list(FAMILIES)}")
    return templates["families"][family]


def render_prompt(item: QAItem, family: str, version: str = "v1") -> WrappedPrompt:
    """Render ``item`` in wrapper ``family`` with template ``version``; no padding (§3.2).

    The user message is the family's present blocks joined by its separator: the passage block only
    when ``item.passage`` is set, the options block only for choice items (one ``option_line`` per
    choice, joined by newlines), the answer block's text for ``item.answer_type``. ``pad_offset``
    marks where :func:`pad_to_budget` inserts padding. Raises :class:`ConfigError` for an unknown
    family and :class:`InputError` for an unknown / invalid template version.
    """
    templates = load_templates(version)
    fam = _family(templates, family)
    opt = string.Template(fam["option_line"])
    values = {
        "passage": item.passage or "",
        "question": item.question,
        "options": "\n".join(opt.substitute(label=lab, text=txt) for lab, txt in item.choices),
        "labels": ", ".join(item.labels),
    }
    present = {"passage": item.passage is not None, "options": bool(item.choices)}
    parts: list[tuple[str, str]] = []
    for b in fam["blocks"]:
        if b.get("when") and not present[b["when"]]:
            continue
        text = b["text"][item.answer_type] if b["name"] == "answer" else b["text"]
        parts.append((b["name"], string.Template(text).substitute(values)))
    k = [name for name, _ in parts].index(fam["pad_before"])
    sep = fam["separator"]
    head, tail = sep.join(t for _, t in parts[:k]), sep.join(t for _, t in parts[k:])
    if k:
        user, offset = head + sep + tail, len(head) + len(sep)
    else:
        user, offset = tail, 0
    messages = [{"role": "system", "content": fam["system"]}, {"role": "user", "content": user}]
    return WrappedPrompt(item.item_id, item.task, family, templates["version"], messages, 0, offset)


def answer_json_schema(item: QAItem) -> dict[str, Any]:
    """JSON Schema of the ``json`` family's reply for ``item`` (schema compliance, §3.2):
    ``{"answer": <enum of labels>}`` / ``{"answer": <boolean>}`` / ``{"answer": <number>}``,
    required, no other keys."""
    value: dict[str, Any]
    if item.answer_type == "choice":
        value = {"type": "string", "enum": list(item.labels)}
    elif item.answer_type == "boolean":
        value = {"type": "boolean"}
    else:
        value = {"type": "number"}
    return {"type": "object", "properties": {"answer": value}, "required": ["answer"], "additionalProperties": False}


# ------------------------------------------------------------------------------------------
# Token control (§3.3)


def task_char_budget(items: Sequence[QAItem], families: Sequence[str] = FAMILIES, version: str = "v1") -> int:
    """The per-task character budget: the longest unpadded prompt (:attr:`WrappedPrompt.chars`)
    over ``items`` × ``families``, so padding every prompt to it truncates nothing (§3.3).

    Raises ``ValueError`` when ``items`` or ``families`` is empty or the items span several tasks
    (the budget is per task), :class:`ConfigError` for an unknown family.
    """
    if not items or not families:
        raise ValueError("task_char_budget needs at least one item and one family")
    tasks = sorted({x.task for x in items})
    if len(tasks) > 1:
        raise ValueError(f"a character budget is per task; got items of {tasks}")
    return max(render_prompt(x, f, version).chars for x in items for f in families)


def pad_to_budget(prompts: Sequence[WrappedPrompt], budget_chars: int) -> list[WrappedPrompt]:
    """Pad every prompt to exactly ``budget_chars`` characters (same order; inputs unchanged).

    Padding is the template set's ``pad_char`` (``"\\n"`` in v1) at ``pad_offset`` — between the
    item content and the output instruction; existing padding is replaced, so re-padding to another
    budget is exact. Raises :class:`ConfigError` naming the prompt when its unpadded length exceeds
    the budget (use :func:`task_char_budget`), ``ValueError`` for a negative budget.
    """
    if budget_chars < 0:
        raise ValueError(f"budget_chars must be >= 0, got {budget_chars}")
    out = []
    for p in prompts:
        base = p.chars - p.pad_chars
        if base > budget_chars:
            raise ConfigError(
                f"prompt {p.task}/{p.item_id}/{p.family} is {base} characters unpadded, over the "
                f"budget of {budget_chars}"
            )
        out.append(p.with_pad(budget_chars - base))
    return out


def render_token_controlled(
    items: Sequence[QAItem], families: Sequence[str] = FAMILIES, version: str = "v1"
) -> list[WrappedPrompt]:
    """Every item × family, padded to its task's :func:`task_char_budget` (items may mix tasks).

    Order: items as given, families as given within an item.
    """
    by_task: dict[str, list[QAItem]] = {}
    for x in items:
        by_task.setdefault(x.task, []).append(x)
    budgets = {t: task_char_budget(xs, families, version) for t, xs in by_task.items()}
    out: list[WrappedPrompt] = []
    for x in items:
        out += pad_to_budget([render_prompt(x, f, version) for f in families], budgets[x.task])
    return out


def measure_prompt_tokens(prompts: Iterable[WrappedPrompt], count_tokens: TokenCounter) -> dict[str, dict[str, int]]:
    """Realised prompt tokens per item and family: ``{item_id: {family: tokens}}``.

    ``count_tokens(messages) -> int`` must count with the target model's own tokenizer *and* chat
    template (for the local model: ``LlamaCppProvider(...).prompt_tokens``). Raises ``ValueError``
    for a repeated (item_id, family) or a count that is not a non-negative int.
    """
    out: dict[str, dict[str, int]] = {}
    for p in prompts:
        row = out.setdefault(p.item_id, {})
        if p.family in row:
            raise ValueError(f"prompt {p.item_id}/{p.family} appears twice")
        n = count_tokens([dict(m) for m in p.messages])
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"count_tokens returned {n!r} for {p.item_id}/{p.family}; expected an int >= 0")
        row[p.family] = n
    return out


def _counts(token_counts_by_wrapper: Mapping[str, int] | Sequence[int]) -> list[int]:
    vals = (
        list(token_counts_by_wrapper.values())
        if isinstance(token_counts_by_wrapper, Mapping)
        else list(token_counts_by_wrapper)
    )
    if not vals:
        raise ValueError("delta_tok needs at least one token count")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in vals) or sum(vals) <= 0:
        raise ValueError(f"token counts must be non-negative numbers with a positive sum, got {vals}")
    return vals


def delta_tok(token_counts_by_wrapper: Mapping[str, int] | Sequence[int]) -> float:
    """Δtok of one item (§3.3): ``(max − min) / mean`` of its realised prompt-token counts over the
    wrappers (a dimensionless ratio; 0 when all wrappers have the same count).

    Accepts ``{family: tokens}`` or a sequence of counts. Raises ``ValueError`` for no counts, a
    negative count or an all-zero set.
    """
    vals = _counts(token_counts_by_wrapper)
    return (max(vals) - min(vals)) / (sum(vals) / len(vals))


def matched_subset(token_counts: Mapping[str, Mapping[str, int]], threshold: float = MATCH_THRESHOLD) -> list[str]:
    """Item ids whose Δtok ≤ ``threshold`` (the token-matched subset, §3.3), in input order.

    ``token_counts`` is ``{item_id: {family: tokens}}`` (:func:`measure_prompt_tokens`). The
    comparison is exact in rational arithmetic with ``threshold`` read as the decimal it prints as
    (0.05 = 1/20): an item with Δtok exactly 0.05 is in, 0.0501 is out.
    """
    t = Fraction(str(threshold))
    out = []
    for item_id, counts in token_counts.items():
        vals = _counts(counts)
        spread = Fraction(max(vals)) - Fraction(min(vals))
        if spread * len(vals) <= t * sum(Fraction(v) for v in vals):
            out.append(item_id)
    return out


def check_context_budget(prompt_tokens: int, max_tokens: int, n_ctx: int) -> int:
    """Check that a prompt plus its completion allowance fits the context window, before any call.

    All three are token counts (``prompt_tokens`` as counted by the model's tokenizer with its chat
    template). Fits when ``prompt_tokens + max_tokens <= n_ctx`` (exactly equal fits); returns the
    tokens left over. Raises :class:`ContextBudgetError` with the numbers otherwise, ``ValueError``
    for negative counts or ``n_ctx < 1``.
    """
    for name, v in (("prompt_tokens", prompt_tokens), ("max_tokens", max_tokens), ("n_ctx", n_ctx)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
    total = prompt_tokens + max_tokens
    if total > n_ctx:
        raise ContextBudgetError(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} exceeds "
            f"n_ctx={n_ctx} by {total - n_ctx}"
        )
    return n_ctx - total
