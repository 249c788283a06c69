"""WorkflowPerturb perturbations: N rule, deterministic operators, static validation, LLM generator."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from metamorph.studies.workflow_perturb.generate import (
    DEFAULT_PARAMS,
    EXAMPLE_GOLDEN,
    EXAMPLE_N,
    EXAMPLE_OUTPUTS,
    PROMPT_VERSION,
    GeneratorModel,
    build_messages,
    build_node_messages,
    build_request,
    check_node_reply,
    feedback_message,
    generate_perturbation,
)
from metamorph.studies.workflow_perturb.paraphrase import paraphrase_text
from metamorph.studies.workflow_perturb.validate import check_output, check_variant
from metamorph.studies.workflow_perturb.perturb import (
    PERTURBATION_TYPES,
    SEVERITIES,
    compress_steps,
    compression_groups,
    merge_text,
    n_to_alter,
    paraphrase_steps,
    perturb_deterministic,
    remove_nodes,
    remove_steps,
    target_score,
)
from metamorph.providers.base import GenerationResult
from metamorph.studies.workflow_perturb.workflows import END, START, Workflow, format_workflow, load_goldens
from metamorph.studies.workflow_perturb.goldens import embedded_goldens
from tests.conftest import shared_sample

S = [f"step {i}" for i in range(1, 21)]


def chain(n):
    return Workflow(
        "chain", "a chain", S[:n], [(START, "1"), *((str(i), str(i + 1)) for i in range(1, n)), (str(n), END)]
    )


# 1 -> {2, 3} -> 4 -> 5
DIAMOND = Workflow(
    "diamond",
    "a diamond",
    S[:5],
    [(START, "1"), ("1", "2"), ("1", "3"), ("2", "4"), ("3", "4"), ("4", "5"), ("5", END)],
)
PARALLEL = Workflow(
    "parallel",
    "independent steps",
    S[:5],
    [*((START, str(i)) for i in range(1, 6)), *((str(i), END) for i in range(1, 6))],
)


class ScriptedRng(random.Random):
    """random.Random whose randrange returns scripted indexes (to pin compress_steps' choices)."""

    def __init__(self, picks):
        super().__init__(0)
        self.picks = list(picks)

    def randrange(self, n):
        k = self.picks.pop(0)
        assert 0 <= k < n
        return k


# ------------------------------------------------------------------------------------------
# N and target score


@pytest.mark.parametrize(
    "n, expected", [(5, [1, 2, 3]), (6, [1, 2, 3]), (7, [1, 3, 4]), (8, [1, 3, 4]), (16, [2, 5, 8])]
)
def test_n_to_alter_table(n, expected):
    assert [n_to_alter(p, n) for p in SEVERITIES] == expected


def test_n_to_alter_ceil_and_the_half_up_option():
    assert n_to_alter(0.3, 10) == 3  # 0.3 * 10 == 3.0000000000000004: rounded to 9 decimals first
    assert n_to_alter(0.3, 7) == 3 and n_to_alter(0.3, 7, "half_up") == 2  # 2.1
    assert n_to_alter(0.3, 15, "half_up") == 5  # 4.5 -> 5 (0.3 * 15 == 4.499999... in floating point)
    assert n_to_alter(0.1, 5, "half_up") == 1  # 0.5 -> 1 (banker's round would give 0)
    assert n_to_alter(0.5, 9) == 5 and n_to_alter(0.01, 5) == 1
    assert n_to_alter(0.9, 5) == 4  # capped at n - 1
    for bad in [(0.0, 5), (1.0, 5), (0.3, 1)]:
        with pytest.raises(ValueError):
            n_to_alter(*bad)
    with pytest.raises(ValueError, match="rounding must be one of"):
        n_to_alter(0.3, 5, "floor")


def test_ceil_reproduces_the_papers_bertscore_windows_on_the_shared_sample():
    # §5.1: mean min(|gold|, |pred|) under Missing Steps is 5.5 -> 4.1 -> 3.0 at 10/30/50 %
    goldens, _ = load_goldens(str(shared_sample("worfbench")), on_invalid="collect")
    sizes = [w.n_nodes for w in goldens]
    assert len(sizes) == 300 and sum(sizes) == 1952

    def window(p, rounding):
        return round(sum(n - n_to_alter(p, n, rounding) for n in sizes) / len(sizes), 2)

    assert [window(p, "ceil") for p in SEVERITIES] == [5.47, 4.03, 2.92]  # ~ 5.5 / 4.1 / 3.0
    assert [window(p, "half_up") for p in SEVERITIES] == [5.51, 4.39, 2.92]  # 4.4 at 30 %: off


def test_target_score():
    assert [target_score(t, 0.3) for t in PERTURBATION_TYPES] == [0.7, 0.7, 1.0]
    assert target_score("missing", 0.1) == 0.9 and target_score("compressed", 0.5) == 0.5
    with pytest.raises(ValueError, match="unknown perturbation type 'swap'"):
        target_score("swap", 0.1)


# ------------------------------------------------------------------------------------------
# Missing Steps


def test_remove_nodes_on_a_chain_reconnects_predecessors_to_successors():
    nodes, edges = remove_nodes(chain(6), ["2", "5"])
    assert nodes == ("step 1", "step 3", "step 4", "step 6")
    assert edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", END))
    nodes, edges = remove_nodes(chain(6), ["1", "6"])
    assert nodes == ("step 2", "step 3", "step 4", "step 5")
    assert edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", END))


def test_remove_nodes_on_a_diamond():
    nodes, edges = remove_nodes(DIAMOND, ["2"])
    assert nodes == ("step 1", "step 3", "step 4", "step 5")
    assert edges == ((START, "1"), ("1", "2"), ("1", "3"), ("2", "3"), ("3", "4"), ("4", END))
    nodes, edges = remove_nodes(DIAMOND, ["1", "4"])
    assert nodes == ("step 2", "step 3", "step 5")
    assert edges == ((START, "1"), (START, "2"), ("1", "3"), ("2", "3"), ("3", END))
    nodes, edges = remove_nodes(DIAMOND, ["2", "3"])  # both branches gone: 1 -> 4 directly, once
    assert edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", END))


def test_remove_nodes_drops_a_redundant_start_end_edge():
    nodes, edges = remove_nodes(PARALLEL, ["3"])
    assert nodes == ("step 1", "step 2", "step 4", "step 5") and (START, END) not in edges
    assert edges == (
        (START, "1"),
        (START, "2"),
        (START, "3"),
        (START, "4"),
        ("1", END),
        ("2", END),
        ("3", END),
        ("4", END),
    )


def test_remove_steps_removes_a_contiguous_run():
    got = remove_steps(chain(6), 3, ScriptedRng([2]), p=0.5)  # start position 2: steps 3, 4, 5
    assert got.altered_node_ids == ("3", "4", "5")
    assert got.workflow.nodes == ("step 1", "step 2", "step 6")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", END))
    for s in range(30):  # every seed: consecutive ids
        ids = [int(x) for x in remove_steps(chain(8), 3, random.Random(s)).altered_node_ids]
        assert ids == list(range(ids[0], ids[0] + 3))
    old = remove_steps(chain(6), 2, random.Random(1), selection="scattered")
    assert old.altered_node_ids == tuple(sorted(random.Random(1).sample(list(chain(6).node_ids), 2), key=int))
    with pytest.raises(ValueError, match="selection must be one of"):
        remove_steps(chain(6), 2, random.Random(1), selection="random")


def test_step_order_is_topological_with_list_order_ties():
    from metamorph.studies.workflow_perturb.perturb import contiguous_run, step_order

    assert step_order(DIAMOND) == ["1", "2", "3", "4", "5"]
    # listed 1, 2, 3 but 3 -> 1 -> 2: contiguity follows the precedence, not the list
    odd = Workflow("odd", "t", S[:3], [(START, "3"), ("3", "1"), ("1", "2"), ("2", END)])
    assert step_order(odd) == ["3", "1", "2"]
    assert contiguous_run(odd, 2, ScriptedRng([0])) == ["3", "1"]
    with pytest.raises(ValueError, match="cycle"):
        step_order(Workflow("cyc", "t", S[:2], [(START, "1"), ("1", "2"), ("2", "1"), ("2", END)]))


def test_remove_steps_is_seeded_and_matches_remove_nodes():
    a = remove_steps(DIAMOND, 2, random.Random(3), p=0.3)
    b = remove_steps(DIAMOND, 2, random.Random(3), p=0.3)
    assert a == b
    assert len(a.altered_node_ids) == 2 and a.n_altered == 2
    assert (a.workflow.nodes, a.workflow.edges) == remove_nodes(DIAMOND, a.altered_node_ids)
    assert (a.type, a.operator, a.method, a.status, a.golden_id) == (
        "missing",
        "deterministic",
        "remove_steps",
        "valid",
        "diamond",
    )
    assert a.workflow.workflow_id == "diamond::missing@30" and a.target_score == 0.7
    picks = {remove_steps(DIAMOND, 2, random.Random(s)).altered_node_ids for s in range(20)}
    assert len(picks) > 1
    with pytest.raises(ValueError, match="N must be in 1..4, got 5"):
        remove_steps(DIAMOND, 5, random.Random(0))


# ------------------------------------------------------------------------------------------
# Compressed Steps


def test_compress_steps_merges_pairs_of_a_contiguous_run():
    got = compress_steps(chain(7), 2, ScriptedRng([1]), p=0.3)  # run of 4 from position 1: (2 3) (4 5)
    assert got.workflow.nodes == ("step 1", "step 2; then step 3", "step 4; then step 5", "step 6", "step 7")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", END))
    assert got.altered_node_ids == ("2", "3", "4", "5") and got.status == "valid"
    got = compress_steps(chain(5), 3, ScriptedRng([0]), p=0.5)  # 2n > 5: all 5 steps in 2 groups, 3 + 2
    assert got.workflow.nodes == ("step 1; then step 2; then step 3", "step 4; then step 5")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("2", END)) and got.status == "valid"
    # diamond 1 -> {2, 3} -> 4 -> 5: the run (2, 3) has no edge inside: a parallel merge
    got = compress_steps(DIAMOND, 1, ScriptedRng([1]))
    assert got.workflow.nodes == ("step 1", "step 2; also step 3", "step 4", "step 5")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", END))
    got = compress_steps(DIAMOND, 1, ScriptedRng([2]))  # run (3, 4): edge 3 -> 4, and 2 -> 4 becomes 2 -> 3
    assert got.workflow.nodes == ("step 1", "step 2", "step 3; then step 4", "step 5")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("1", "3"), ("2", "3"), ("3", "4"), ("4", END))


def test_compression_groups():
    assert compression_groups(list("123456"), 3) == [["1", "2"], ["3", "4"], ["5", "6"]]
    assert compression_groups(list("12345"), 3) == [["1", "2", "3"], ["4", "5"]]
    assert compression_groups(list("1234567"), 4) == [["1", "2", "3"], ["4", "5"], ["6", "7"]]
    assert compression_groups(list("123"), 2) == [["1", "2", "3"]]
    with pytest.raises(ValueError):
        compression_groups(list("123"), 3)  # no group left


def test_compress_steps_on_a_chain():
    got = compress_steps(chain(6), 2, ScriptedRng([0, 0]), p=0.3, selection="scattered")  # merge 1+2, then (1+2)+3
    assert got.workflow.nodes == ("step 1; then step 2; then step 3", "step 4", "step 5", "step 6")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", END))
    assert got.altered_node_ids == ("1", "2", "3") and got.status == "valid"
    got = compress_steps(chain(6), 2, ScriptedRng([4, 1]), selection="scattered")  # merge 5+6, then 2+3
    assert got.workflow.nodes == ("step 1", "step 2; then step 3", "step 4", "step 5; then step 6")
    assert got.altered_node_ids == ("2", "3", "5", "6")


def test_compress_steps_on_a_diamond_prefers_chain_edges_then_safe_edges():
    got = compress_steps(DIAMOND, 1, random.Random(0), selection="scattered")  # 4 -> 5 is the only chain-adjacent pair
    assert got.workflow.nodes == ("step 1", "step 2", "step 3", "step 4; then step 5")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("1", "3"), ("2", "4"), ("3", "4"), ("4", END))
    got = compress_steps(DIAMOND, 2, ScriptedRng([0, 0]), selection="scattered")  # then no chain pair: contract 1 -> 2
    assert got.workflow.nodes == ("step 1; then step 2", "step 3", "step 4; then step 5")
    assert got.workflow.edges == ((START, "1"), ("1", "2"), ("1", "3"), ("2", "3"), ("3", END))
    got = compress_steps(
        PARALLEL, 1, ScriptedRng([0]), selection="scattered"
    )  # no step-to-step edge: merge parallel siblings
    assert got.workflow.nodes == ("step 1; also step 2", "step 3", "step 4", "step 5")
    assert got.workflow.edges == (
        (START, "1"),
        (START, "2"),
        (START, "3"),
        (START, "4"),
        ("1", END),
        ("2", END),
        ("3", END),
        ("4", END),
    )


def test_merge_text():
    assert merge_text("Click File.", "Click Open.") == "Click File; then Click Open."
    assert merge_text("a;", "b", parallel=True) == "a; also b"


# ------------------------------------------------------------------------------------------
# Description Changes


@pytest.mark.parametrize(
    "text, expected",
    [
        ("take pillow 1 from sofa 1", "grab pillow 1 from sofa 1"),
        ("Click File.", "Press File."),
        ("Remove the lug nuts", "Take out the lug nuts"),
        (
            "In Jewish Law, precedence is always given to the dominant hand.",
            "Precedence is always given to the dominant hand in Jewish Law.",
        ),
        ("If the water boils, add the pasta", "Add the pasta if the water boils"),
        ("Boil fresh water", "Next, boil fresh water"),
        ("VLC records the audio", "Next, VLC records the audio"),
        ("search[red shoes]", "Next, search[red shoes]"),
    ],
)
def test_paraphrase_text_rules(text, expected):
    assert paraphrase_text(text) == expected


def test_paraphrase_changes_exactly_n_texts():
    w = embedded_goldens()[-1]  # 20 steps
    for p in SEVERITIES:
        got = paraphrase_steps(w, n_to_alter(p, w.n_nodes), random.Random(1), p=p)
        changed = [k for k, a, b in zip(w.node_ids, w.nodes, got.workflow.nodes) if a != b]
        assert changed == list(got.altered_node_ids) and len(changed) == n_to_alter(p, 20)
        assert got.workflow.edges == w.edges and got.status == "valid" and got.target_score == 1.0


def test_every_deterministic_variant_of_the_shared_sample_passes_static_validation():
    goldens, _ = load_goldens(str(shared_sample("worfbench")))
    status = Counter()
    for w in goldens:
        for t in PERTURBATION_TYPES:
            for p in SEVERITIES:
                v = perturb_deterministic(w, t, p)
                status[v.status] += 1
                assert v.workflow.n_nodes == (w.n_nodes if t == "description" else w.n_nodes - v.n_altered)
    assert status == {"valid": 2700}


def test_deterministic_perturbations_depend_only_on_the_seed():
    w = embedded_goldens()[9]
    for t in PERTURBATION_TYPES:
        rows = [perturb_deterministic(w, t, 0.3, seed=s).to_row() for s in (0, 0, 1, 2, 3)]
        assert rows[0] == rows[1]
        assert any(r["altered_node_ids"] != rows[0]["altered_node_ids"] for r in rows[2:])
        assert json.loads(rows[0]["nodes_json"]) == list(perturb_deterministic(w, t, 0.3).workflow.nodes)


# ------------------------------------------------------------------------------------------
# Static validation of LLM replies


G = embedded_goldens()[0]  # brew_pour_over_coffee, 5 nodes


def _text(nodes, edges):
    return format_workflow((nodes, edges))


def test_worked_examples_pass_their_own_validation():
    for t, out in EXAMPLE_OUTPUTS.items():
        assert check_output(EXAMPLE_GOLDEN, t, EXAMPLE_N, out)[1] is None


@pytest.mark.parametrize(
    "ptype, nodes, edges, problem",
    [
        (
            "missing",
            S[:5],
            [(START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", END)],
            "expected 3 nodes (5 golden steps minus 2 removed), got 5",
        ),
        (
            "compressed",
            ["a", "b"],
            [(START, "1"), ("1", "2"), ("2", END)],
            "expected 3 nodes (5 golden steps minus 2 merged), got 2",
        ),
        (
            "description",
            ["a"] * 5,
            [(START, "1"), ("1", "2"), ("2", "3"), ("3", "4"), ("4", "5"), ("5", END)],
            "the edges differ from the golden workflow's; description changes must keep every edge",
        ),
        (
            "missing",
            ["Boil fresh water in a kettle", "Serve the coffee", "Serve the coffee in a warm mug"],
            [(START, "1"), ("1", "2"), ("2", "3"), ("3", END)],
            "node 2 ('Serve the coffee') is not one of the golden steps; the remaining steps must keep their text unchanged",
        ),
        (
            "compressed",
            ["Boil fresh water in a kettle", "Grind the coffee beans to a medium-fine texture", "Dance"],
            [(START, "1"), ("1", "2"), ("2", "3"), ("3", END)],
            "node 3 ('Dance') is neither a golden step nor a merge of two golden steps",
        ),
        (
            "missing",
            ["a", "b", "c"],
            [(START, "1"), ("1", "2"), ("2", "1"), ("2", "3"), ("3", END)],
            "invalid graph: edges form a cycle: 1 -> 2 -> 1",
        ),
    ],
)
def test_check_variant_problems_are_exact(ptype, nodes, edges, problem):
    assert check_variant(G, ptype, 2, nodes, edges) == problem


def test_description_change_count_is_verified():
    nodes = list(G.nodes)
    nodes[0] = "Heat fresh water in a kettle"
    assert check_variant(G, "description", 2, nodes, G.edges) == (
        "expected exactly 2 changed step descriptions, found 1 (changed: 1)"
    )
    nodes[2] = nodes[2].upper() + "."  # case and final punctuation are not a change
    assert check_variant(G, "description", 2, nodes, G.edges) == (
        "expected exactly 2 changed step descriptions, found 1 (changed: 1)"
    )
    nodes[3] = "Slowly pour the water over the grounds in circles"
    assert check_variant(G, "description", 2, nodes, G.edges) is None


def test_unreadable_reply_is_a_problem_not_an_exception():
    assert check_output(G, "missing", 1, "Sure! Here you go.") == (
        None,
        "could not read the workflow: no 'Edge:' line in the workflow text",
    )


def test_node_reply_check():
    assert check_node_reply("Boil the water", "Step: Heat the water until it boils\nmore") == (
        "Heat the water until it boils",
        None,
    )
    assert check_node_reply("Boil the water", "  boil the water. ") == (
        None,
        "the reworded step is identical to the original; use different words",
    )
    assert check_node_reply("Boil the water", "") == (None, "the reply is empty; answer with the reworded step")
    assert check_node_reply("Boil", "Node:\n1: x") == (
        None,
        "the reply is a workflow; answer with the reworded step only",
    )


# ------------------------------------------------------------------------------------------
# LLM generator with scripted model replies (a boundary double: the model, not our code)


class Script:
    """A scripted model: returns the given replies in order and records the messages it was sent."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.calls: list[list[dict]] = []

    def __call__(self, messages):
        self.calls.append([dict(m) for m in messages])
        r = self.replies.pop(0)
        return r if isinstance(r, GenerationResult) else GenerationResult(text=r, finish_reason="stop")


VALID_MISSING = _text(
    G.nodes[:4], [(START, "1"), (START, "2"), (START, "3"), ("1", "4"), ("2", "4"), ("3", "4"), ("4", END)]
)  # step 5 removed


def test_messages_hold_the_worked_example_and_the_row_instruction():
    msgs = build_messages(G, "missing", 2)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[2]["content"] == EXAMPLE_OUTPUTS["missing"]
    assert format_workflow(EXAMPLE_GOLDEN) in msgs[1]["content"]
    assert format_workflow(G) in msgs[3]["content"]
    assert "Remove exactly 2 steps" in msgs[3]["content"] and "exactly 3 steps" in msgs[3]["content"]
    assert "Reword exactly 1 step of" in build_messages(G, "description", 1)[3]["content"]


def test_refinement_loop_reinjects_the_exact_validation_error():
    model = Script(format_workflow(G), VALID_MISSING)  # first reply: the golden unchanged (5 nodes, not 4)
    got = generate_perturbation(G, "missing", 0.1, [GeneratorModel("m1", model)], max_attempts=3)
    error = "expected 4 nodes (5 golden steps minus 1 removed), got 5"
    assert check_output(G, "missing", 1, format_workflow(G))[1] == error
    assert len(model.calls) == 2
    assert model.calls[0] == build_messages(G, "missing", 1)
    assert model.calls[1] == model.calls[0] + [
        {"role": "assistant", "content": format_workflow(G)},
        {"role": "user", "content": feedback_message(error)},
    ]
    assert error in model.calls[1][-1]["content"]
    assert (got.status, got.failure, got.attempts, got.model, got.method, got.operator) == (
        "valid",
        None,
        2,
        "m1",
        "llm",
        "llm",
    )
    assert got.altered_node_ids == ("5",) and got.workflow.nodes == G.nodes[:4]
    assert got.workflow.workflow_id == f"{G.workflow_id}::missing@10"


def test_escalation_to_the_next_model_after_the_attempts_are_used():
    weak = Script("no workflow here", format_workflow(G))
    strong = Script(VALID_MISSING)
    got = generate_perturbation(G, "missing", 0.1, [("weak", weak), ("strong", strong)], max_attempts=2)
    assert len(weak.calls) == 2 and len(strong.calls) == 1
    assert weak.calls[1][-1]["content"] == feedback_message(
        "could not read the workflow: no 'Edge:' line in the workflow text"
    )
    assert strong.calls[0] == build_messages(G, "missing", 1)  # the stronger model starts afresh
    assert (got.status, got.attempts, got.model, got.models_tried) == ("valid", 3, "strong", ("weak", "strong"))


def test_failing_rows_are_kept_and_flagged():
    cut = GenerationResult(text=format_workflow(G), finish_reason="length")
    model = Script(cut, GenerationResult(text=None, error="ProviderError[503]: overloaded"), "garbage")
    got = generate_perturbation(G, "compressed", 0.3, [GeneratorModel("m", model)], max_attempts=3)
    assert got.status == "invalid" and got.attempts == 3 and got.operator == "llm"
    assert got.failure == "could not read the workflow: no 'Edge:' line in the workflow text"
    assert got.raw_output == "garbage"
    assert got.workflow.nodes == G.nodes  # the last reply that parsed is kept for inspection
    assert model.calls[1][-1]["content"] == feedback_message(
        "expected 3 nodes (5 golden steps minus 2 merged), got 5 (the reply was cut off at the token limit)"
    )
    assert model.calls[2] == model.calls[1]  # a failed call is retried with the same messages
    row = got.to_row()
    assert (row["status"], row["target_score"], row["n_altered"], row["attempts"], row["n_call_errors"]) == (
        "invalid",
        0.7,
        2,
        3,
        1,
    )


def test_a_row_whose_every_generator_call_failed_is_a_call_error_not_an_invalid_perturbation():
    only_errors = Script(GenerationResult(text=None, error="TimeoutError: slow"))
    got = generate_perturbation(G, "missing", 0.1, [("m", only_errors)], max_attempts=1)
    assert (got.status, got.workflow, got.failure, got.attempts, got.call_errors) == (
        "call_error",
        None,
        "the model call failed: TimeoutError: slow",
        1,
        1,
    )
    # two models, two attempts each, every call failed: still no reply was ever received
    errors = [GenerationResult(text=None, error="ProviderError[503]: overloaded")] * 4
    got = generate_perturbation(
        G, "missing", 0.3, [("a", Script(*errors[:2])), ("b", Script(*errors[2:]))], max_attempts=2
    )
    assert (got.status, got.attempts, got.call_errors, got.models_tried) == ("call_error", 4, 4, ("a", "b"))
    # description rows: the per-node fallback's calls fail too
    got = generate_perturbation(G, "description", 0.1, [("m", Script(*[errors[0]] * 2))], max_attempts=1)
    assert (got.status, got.method, got.attempts, got.call_errors) == ("call_error", "llm_hybrid", 2, 2)
    # one reply that did not validate among failed calls: the model was heard, the row is invalid
    got = generate_perturbation(G, "missing", 0.1, [("m", Script(errors[0], "garbage"))], max_attempts=2)
    assert (got.status, got.attempts, got.call_errors) == ("invalid", 2, 1)


def test_hybrid_fallback_rewords_one_node_at_a_time_for_description_changes():
    model = Script(format_workflow(G), "Heat the water\nin a kettle")  # whole workflow unchanged, then per node
    got = generate_perturbation(G, "description", 0.1, [("m", model)], max_attempts=1)
    assert got.status == "valid" and got.method == "llm_hybrid" and got.attempts == 2
    assert model.calls[1][:3] == build_node_messages(G, got.altered_node_ids[0])[:3]
    (nid,) = got.altered_node_ids
    assert model.calls[1][-1]["content"].endswith(f"Step: {G.text(nid)}\nReword this step.")
    assert got.workflow.text(nid) == "Heat the water" and got.workflow.edges == G.edges
    assert sum(a != b for a, b in zip(G.nodes, got.workflow.nodes)) == 1
    stubborn = Script(format_workflow(G), format_workflow(G), G.text(nid), G.text(nid))
    got = generate_perturbation(G, "description", 0.1, [("m", stubborn)], max_attempts=2)
    assert (got.status, got.method, got.attempts) == ("invalid", "llm_hybrid", 4)
    assert got.workflow.nodes == G.nodes  # the last whole-workflow reply that parsed is kept
    assert stubborn.calls[3][-1]["content"] == (
        "That is not usable: the reworded step is identical to the original; "
        "use different words. Answer with the reworded step only."
    )
    assert got.failure.startswith("whole workflow: expected exactly 1 changed step description, found 0")
    assert got.failure.endswith(
        f"per-node fallback, step {nid}: the reworded step is identical to the original; use different words"
    )


def test_requests_are_cacheable_generation_requests():
    msgs = build_messages(G, "missing", 1)
    a = build_request("llama_cpp", "m.gguf", msgs)
    b = build_request("llama_cpp", "m.gguf", [dict(m) for m in msgs])
    assert a.cache_key() == b.cache_key()
    assert a.renderer_version == PROMPT_VERSION and a.params == DEFAULT_PARAMS
    assert build_request("llama_cpp", "m.gguf", msgs, params={"max_tokens": 64, "seed": None}).params == {
        "temperature": 0.0,
        "max_tokens": 64,
    }
    assert build_request("llama_cpp", "m.gguf", build_messages(G, "missing", 2)).cache_key() != a.cache_key()


# ------------------------------------------------------------------------------------------
# The real local model (SmolLM2-135M): end to end through the provider and the generation cache


@pytest.mark.llm
def test_llm_generator_with_the_local_model_records_attempts_and_status(tmp_path):
    from metamorph.cache import GenerationCache
    from metamorph.studies.workflow_perturb.generate import provider_generate
    from metamorph.providers.llama_cpp import LlamaCppProvider

    class Counting:
        def __init__(self, inner):
            self.inner, self.kind, self.max_concurrency, self.calls = inner, inner.kind, 1, 0

        def generate(self, request):
            self.calls += 1
            return self.inner.generate(request)

    provider = Counting(LlamaCppProvider(n_ctx=2048))
    cache = GenerationCache(tmp_path / "cache.duckdb")
    gen = provider_generate(provider, provider.inner.model_name, cache=cache, params={"max_tokens": 48})
    models = [GeneratorModel("smollm2-135m", gen)]
    got = generate_perturbation(G, "missing", 0.1, models, max_attempts=2)
    assert provider.calls == got.attempts and 1 <= got.attempts <= 2
    assert got.operator == "llm" and got.model == "smollm2-135m" and got.raw_output is not None
    assert got.status in ("valid", "invalid")
    if got.status == "invalid":  # the 135M model rarely gets it right; the row is flagged, not dropped
        assert got.failure and got.attempts == 2
        assert got.to_row()["status"] == "invalid"
    assert cache.count(errors=False) == got.attempts
    again = generate_perturbation(G, "missing", 0.1, models, max_attempts=2)  # served from the cache
    assert again.to_row() == got.to_row() and provider.calls == got.attempts
