"""Prompt wrappers (five families, templates as data), token control, Δtok, context budget (§3.2–3.3)."""

from __future__ import annotations

import dataclasses
import json
import string

import pytest

from metamorph.errors import ConfigError, ContextBudgetError, InputError
from metamorph.studies.wrapper_sensitivity.tasks import LOADERS, QAItem, load_task, synthetic_tasks
from metamorph.studies.wrapper_sensitivity.wrappers import (
    FAMILIES,
    MATCH_THRESHOLD,
    answer_json_schema,
    available_template_versions,
    check_context_budget,
    delta_tok,
    load_templates,
    matched_subset,
    measure_prompt_tokens,
    pad_to_budget,
    render_prompt,
    render_token_controlled,
    task_char_budget,
)
from tests.conftest import shared_sample

SYSTEM = "You are a careful assistant that answers benchmark questions accurately."
CHOICE = QAItem("t-1", "t", "choice", "Which is red?", (("A", "sky"), ("B", "blood")), "B")
BOOLEAN = QAItem("b-1", "b", "boolean", "Is it?", (), "true", "P.")
NUMERIC = QAItem("n-1", "n", "numeric", "How many?", (), "18")

# The exact user messages of v1 for CHOICE: this pins the output contract of every family.
CHOICE_USER = {
    "plain": "Which is red?\n\nA. sky\nB. blood\n\nReply with only the label of the correct option (A, B).",
    "json": (
        'Which is red?\n\nA. sky\nB. blood\n\nReply with only a JSON object of the form {"answer": "<label>"}, '
        "where <label> is the label of the correct option (A, B) as a JSON string."
    ),
    "structured": (
        "Task: answer the question\nQuestion: Which is red?\nOptions:\nA) sky\nB) blood\n"
        'Output: exactly one line "Answer: <label>", where <label> is the label of the correct option (A, B)'
    ),
    "structured_delim": (
        "### Question\nWhich is red?\n\n### Options\nA. sky\nB. blood\n\n### Answer\n"
        "Write only the label of the correct option (A, B) between <answer> and </answer>."
    ),
    "deliberate": (
        "Which is red?\n\nA. sky\nB. blood\n\nThink step by step in a scratchpad first. Then end with a "
        "final line of the form\nFinal answer: <label>\nwhere <label> is the label of the correct option "
        "(A, B)."
    ),
}
# Where the padding goes: right after the item content and its separator, before the instruction.
CHOICE_PREFIX = {
    "plain": "Which is red?\n\nA. sky\nB. blood\n\n",
    "json": "Which is red?\n\nA. sky\nB. blood\n\n",
    "structured": "Task: answer the question\nQuestion: Which is red?\nOptions:\nA) sky\nB) blood\n",
    "structured_delim": "### Question\nWhich is red?\n\n### Options\nA. sky\nB. blood\n\n",
    "deliberate": "Which is red?\n\nA. sky\nB. blood\n\n",
}


# --- rendering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_render_of_a_choice_item(family):
    p = render_prompt(CHOICE, family)
    assert p.messages == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": CHOICE_USER[family]}]
    assert (p.item_id, p.task, p.family, p.template_version, p.pad_chars) == ("t-1", "t", family, "v1", 0)
    assert p.pad_offset == len(CHOICE_PREFIX[family]) and p.user.startswith(CHOICE_PREFIX[family])
    assert p.chars == len(SYSTEM) + len(CHOICE_USER[family])


def test_exact_render_of_boolean_and_numeric_items():
    assert render_prompt(BOOLEAN, "structured_delim").user == (
        "### Passage\nP.\n\n### Question\nIs it?\n\n### Answer\nWrite only true or false between <answer> and </answer>."
    )
    assert render_prompt(BOOLEAN, "plain").user == "P.\n\nIs it?\n\nReply with only true or false."
    assert render_prompt(NUMERIC, "json").user == (
        'How many?\n\nReply with only a JSON object of the form {"answer": <number>}, where <number> is the final '
        "answer as a JSON number."
    )
    assert render_prompt(NUMERIC, "structured").user == (
        'Task: answer the question\nQuestion: How many?\nOutput: exactly one line "Answer: <number>", where <number> '
        "is the final number, written in digits"
    )
    assert render_prompt(NUMERIC, "deliberate").user.endswith(
        "Final answer: <number>\nwhere <number> is the final number, written in digits."
    )


@pytest.mark.parametrize("item", [CHOICE, BOOLEAN, NUMERIC] + synthetic_tasks(1), ids=lambda x: x.item_id)
def test_every_family_renders_its_output_contract(item):
    markers = {
        "json": '{"answer": ',
        "structured": '"Answer: <',
        "structured_delim": "between <answer> and </answer>",
        "deliberate": "\nFinal answer: <",
    }
    for family in FAMILIES:
        p = render_prompt(item, family)
        assert p.messages[0] == {"role": "system", "content": SYSTEM} and p.messages[1]["role"] == "user"
        assert item.question in p.user
        assert (item.passage or "") in p.user
        for label, text in item.choices:
            assert text in p.user and label in p.user
        if family in markers:
            assert markers[family] in p.user
        # the output instruction is the last block of the user message
        answer = load_templates("v1")["families"][family]["blocks"][-1]
        assert answer["name"] == "answer"
        assert p.user.endswith(
            string.Template(answer["text"][item.answer_type]).substitute(labels=", ".join(item.labels))
        )


def _skeleton(item: QAItem, family: str) -> str:
    user = render_prompt(item, family).user
    if item.passage:
        user = user.replace(item.passage, "<PASSAGE>")
    user = user.replace(item.question, "<QUESTION>")
    for k, (_, text) in enumerate(item.choices):
        user = user.replace(text, f"<OPTION{k}>")
    return user


def _marker_item(item: QAItem) -> QAItem:
    return dataclasses.replace(
        item,
        question="<QUESTION>",
        passage="<PASSAGE>" if item.passage else None,
        choices=tuple((lab, f"<OPTION{k}>") for k, (lab, _) in enumerate(item.choices)),
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_template_is_identical_across_items_except_item_content(family):
    groups = [synthetic_tasks(3)[0:3], synthetic_tasks(3)[3:6], synthetic_tasks(3)[6:9]]
    for task in ("boolq", "arc_challenge", "gsm8k"):
        path = shared_sample(task)
        groups.append([x for x in load_task(f"{task}:{path}", limit=10) if x.labels in ((), ("A", "B", "C", "D"))])
    for group in groups:
        skeletons = {_skeleton(x, family) for x in group}
        assert len(skeletons) == 1, group[0].task
        assert skeletons == {render_prompt(_marker_item(group[0]), family).user}
    # and the system message does not depend on item or family
    assert {render_prompt(x, f).messages[0]["content"] for g in groups for x in g for f in FAMILIES} == {SYSTEM}


def test_unknown_family_and_version():
    with pytest.raises(ConfigError, match="unknown wrapper family 'yaml'"):
        render_prompt(CHOICE, "yaml")
    with pytest.raises(InputError, match="wrapper templates for version 'v9' not found"):
        render_prompt(CHOICE, "plain", version="v9")


def test_record_stores_the_exact_prompt():
    p = pad_to_budget([render_prompt(BOOLEAN, "json")], 300)[0]
    r = p.to_record()
    assert json.loads(r["messages_json"]) == p.messages
    assert (r["family"], r["template_version"], r["pad_chars"], r["prompt_chars"]) == ("json", "v1", p.pad_chars, 300)


def test_answer_json_schema():
    assert answer_json_schema(CHOICE)["properties"]["answer"] == {"type": "string", "enum": ["A", "B"]}
    assert answer_json_schema(BOOLEAN)["properties"]["answer"] == {"type": "boolean"}
    assert answer_json_schema(NUMERIC) == {
        "type": "object",
        "properties": {"answer": {"type": "number"}},
        "required": ["answer"],
        "additionalProperties": False,
    }


# --- templates as versioned data ------------------------------------------------------------------


def test_packaged_templates():
    assert available_template_versions() == ["v1"]
    t = load_templates("v1")
    assert t["version"] == "v1" and t["pad_char"] == "\n" and list(t["families"]) == list(FAMILIES)


def _write_variant(tmp_path, mutate, version="v1"):
    data = json.loads(json.dumps(load_templates("v1")))
    mutate(data)
    path = tmp_path / f"{version}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "mutate,problem",
    [
        (
            lambda d: d["families"]["plain"]["blocks"][1].update(text="$question $answer"),
            "family 'plain' block 'question': unknown placeholder(s) ['answer']; allowed: "
            "['labels', 'options', 'passage', 'question']",
        ),
        (
            lambda d: d["families"].pop("deliberate"),
            "families must be exactly ['plain', 'json', 'structured', 'structured_delim', 'deliberate'], got "
            "['json', 'plain', 'structured', 'structured_delim']",
        ),
        (
            lambda d: d["families"]["json"]["blocks"][3]["text"].pop("numeric"),
            "family 'json' block 'answer': text must give one string per answer type ['choice', 'boolean', 'numeric'] "
            "and the block cannot have 'when'",
        ),
        (
            lambda d: d["families"]["structured"]["blocks"][1].pop("when"),
            "family 'structured' block 'passage': $passage needs \"when\": \"passage\"",
        ),
        (
            lambda d: d["families"]["plain"].update(pad_before="passage"),
            "family 'plain': pad_before 'passage' must name a block that is always present",
        ),
        (lambda d: d.update(pad_char="x"), "pad_char must be one whitespace character, got 'x'"),
        (lambda d: d.update(version="v2"), "file declares version 'v2', expected 'v1'"),
    ],
)
def test_invalid_template_files_name_the_file(tmp_path, mutate, problem):
    path = _write_variant(tmp_path, mutate)
    with pytest.raises(InputError) as e:
        load_templates("v1", directory=tmp_path)
    assert str(e.value) == f"{path}: {problem}"


# --- token control: character budget and padding (§3.3) ---------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_goes_between_content_and_instruction(family):
    p = render_prompt(CHOICE, family)
    (padded,) = pad_to_budget([p], p.chars + 5)
    assert padded.user == CHOICE_PREFIX[family] + "\n" * 5 + CHOICE_USER[family][len(CHOICE_PREFIX[family]) :]
    assert (padded.pad_chars, padded.chars, padded.messages[0]) == (5, p.chars + 5, p.messages[0])
    assert p.pad_chars == 0 and p.user == CHOICE_USER[family]  # input untouched
    (again,) = pad_to_budget([padded], p.chars + 2)  # re-padding replaces the padding
    assert again.pad_chars == 2 and again.unpadded() == p


def test_budget_is_the_longest_unpadded_prompt_and_nothing_is_truncated():
    items = [CHOICE, dataclasses.replace(CHOICE, item_id="t-2", question="Which one of these is red?")]
    lengths = {(x.item_id, f): len(SYSTEM) + len(render_prompt(x, f).user) for x in items for f in FAMILIES}
    budget = task_char_budget(items)
    assert budget == max(lengths.values()) == len(SYSTEM) + len(CHOICE_USER["deliberate"]) + 13
    assert task_char_budget(items, ["plain"]) == len(SYSTEM) + len(CHOICE_USER["plain"]) + 13
    with pytest.raises(ConfigError) as e:
        pad_to_budget([render_prompt(items[1], "deliberate")], budget - 1)
    assert str(e.value) == f"prompt t/t-2/deliberate is {budget} characters unpadded, over the budget of {budget - 1}"
    with pytest.raises(ValueError, match="per task"):
        task_char_budget([CHOICE, BOOLEAN])
    with pytest.raises(ValueError, match="at least one item"):
        task_char_budget([])


@pytest.mark.parametrize("task", ["synthetic", *sorted(LOADERS)])
def test_every_prompt_of_a_task_is_exactly_the_budget(task):
    items = synthetic_tasks(8) if task == "synthetic" else load_task(f"{task}:{shared_sample(task)}")
    prompts = render_token_controlled(items)
    assert len(prompts) == 5 * len(items)
    by_task: dict[str, set[int]] = {}
    for p in prompts:
        by_task.setdefault(p.task, set()).add(p.chars)
        base = render_prompt(next(x for x in items if x.item_id == p.item_id), p.family)
        assert p.unpadded() == base  # padding is the only change
        assert p.user[p.pad_offset : p.pad_offset + p.pad_chars] == "\n" * p.pad_chars
        assert p.chars == base.chars + p.pad_chars
    for t, sizes in by_task.items():
        xs = [x for x in items if x.task == t]
        assert sizes == {task_char_budget(xs)}, t
        assert min(p.pad_chars for p in prompts if p.task == t) == 0  # the longest prompt is not padded


# --- Δtok and the matched subset -------------------------------------------------------------------


def test_delta_tok_hand_numbers():
    assert delta_tok({"plain": 100, "json": 110, "deliberate": 90}) == pytest.approx(0.2, abs=1e-15)  # 20 / 100
    assert delta_tok([106, 108, 105, 106, 108]) == 3 / 106.6
    assert delta_tok([195, 205]) == 0.05  # 10 / 200
    assert delta_tok([7]) == 0.0 and delta_tok({"a": 40, "b": 40}) == 0.0
    for bad in ([], [0, 0], [3, -1]):
        with pytest.raises(ValueError):
            delta_tok(bad)


def test_matched_subset_boundary():
    counts = {
        "exactly_0.05": {"plain": 195, "json": 205},  # 10 / 200 = 0.05 -> in
        "0.0501": {"plain": 9749, "json": 10001, "deliberate": 10250},  # 501 / 10000 -> out
        "equal": {"plain": 80, "json": 80},
        "far": {"plain": 80, "json": 108},
    }
    assert MATCH_THRESHOLD == 0.05
    assert matched_subset(counts) == ["exactly_0.05", "equal"]
    assert matched_subset(counts, threshold=0.0501) == ["exactly_0.05", "0.0501", "equal"]
    assert matched_subset(counts, threshold=0.0) == ["equal"]


def test_measure_prompt_tokens_with_a_counter():
    prompts = [render_prompt(CHOICE, f) for f in ("plain", "json")]
    counts = measure_prompt_tokens(prompts, lambda msgs: sum(len(m["content"]) for m in msgs) // 4)
    assert counts == {
        "t-1": {
            "plain": (len(SYSTEM) + len(CHOICE_USER["plain"])) // 4,
            "json": (len(SYSTEM) + len(CHOICE_USER["json"])) // 4,
        }
    }
    with pytest.raises(ValueError, match="appears twice"):
        measure_prompt_tokens(prompts + prompts[:1], lambda msgs: 1)
    with pytest.raises(ValueError, match="expected an int >= 0"):
        measure_prompt_tokens(prompts, lambda msgs: 1.5)


# --- context budget ---------------------------------------------------------------------------------


def test_context_budget_boundary():
    assert check_context_budget(100, 412, 512) == 0  # exactly full fits
    assert check_context_budget(100, 400, 512) == 12
    with pytest.raises(ContextBudgetError) as e:
        check_context_budget(100, 413, 512)
    assert str(e.value) == "prompt (100 tokens) + max_tokens (413) = 513 exceeds n_ctx=512 by 1"
    for args in ((-1, 1, 512), (1, -1, 512), (1, 1, 0), (1.5, 1, 512)):
        with pytest.raises(ValueError):
            check_context_budget(*args)


# --- the real local model's tokenizer ------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider():
    from metamorph.providers.llama_cpp import LlamaCppProvider

    return LlamaCppProvider(n_ctx=512)


@pytest.mark.llm
def test_context_budget_boundary_with_the_real_tokenizer(provider):
    from metamorph.providers.base import GenerationRequest

    p = render_token_controlled(synthetic_tasks(2))[0]
    n = provider.prompt_tokens(p.messages)
    assert n == 106  # SmolLM2-135M-Instruct tokenizer + its GGUF chat template
    assert check_context_budget(n, 512 - n, 512) == 0
    with pytest.raises(ContextBudgetError) as e:
        check_context_budget(n, 513 - n, 512)
    assert str(e.value) == "prompt (106 tokens) + max_tokens (407) = 513 exceeds n_ctx=512 by 1"
    # the provider agrees (it refuses before decoding anything)
    with pytest.raises(ContextBudgetError):
        provider.generate(
            GenerationRequest("llama_cpp", provider.model_name, tuple(p.messages), {"max_tokens": 513 - n})
        )


@pytest.mark.llm
def test_delta_tok_on_synthetic_items_with_the_real_tokenizer(provider):
    items = synthetic_tasks(2)
    padded = measure_prompt_tokens(render_token_controlled(items), provider.prompt_tokens)
    unpadded = measure_prompt_tokens([render_prompt(x, f) for x in items for f in FAMILIES], provider.prompt_tokens)
    assert padded["synth_arith-0-0000"] == {
        "plain": 106,
        "json": 108,
        "structured": 105,
        "structured_delim": 106,
        "deliberate": 108,
    }
    assert unpadded["synth_arith-0-0000"] == {
        "plain": 80,
        "json": 98,
        "structured": 98,
        "structured_delim": 91,
        "deliberate": 108,
    }
    assert padded["synth_compare-0-0000"] == {
        "plain": 87,
        "json": 86,
        "structured": 86,
        "structured_delim": 85,
        "deliberate": 89,
    }
    assert padded["synth_choice-0-0000"] == {
        "plain": 105,
        "json": 107,
        "structured": 105,
        "structured_delim": 104,
        "deliberate": 107,
    }
    assert delta_tok(padded["synth_arith-0-0000"]) == 3 / 106.6  # 0.0281
    assert delta_tok(padded["synth_compare-0-0000"]) == 4 / 86.6  # 0.0462
    assert delta_tok(unpadded["synth_arith-0-0000"]) == 28 / 95.0  # 0.2947 before padding
    for item_id in padded:
        assert delta_tok(padded[item_id]) < delta_tok(unpadded[item_id])
    assert matched_subset(padded) == [x.item_id for x in items]
    assert matched_subset(unpadded) == []
