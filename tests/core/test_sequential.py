"""Anytime-valid sequential tests (metamorph.sequential): exact values by hand for small cases, and
seeded simulations of repeated looks — the error rate held under no change, the early stop and the
full run's verdict under a regression."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sst

from metamorph import sequential as seq
from metamorph.stats import holm, mcnemar_exact

# ------------------------------------------------------------------ by hand


def test_binary_mixture_by_hand():
    # candidate - baseline: -1, -1, 0, -1 -> D = 1, 2, 2, 3 discordant, k = 0 favour the candidate:
    # 2^D * k! (D-k)! / (D+1)! = 2/2, 4*2/6, (unchanged), 8*6/24
    e = seq.binary_e_values([1, 1, 0, 1], [0, 0, 0, 0])
    assert e.tolist() == pytest.approx([1.0, 4 / 3, 4 / 3, 2.0], abs=1e-12)
    # one each way: 4 * 1! 1! / 3! = 2/3 (evidence against a change)
    assert seq.binary_e_values([1, 0], [0, 1])[-1] == pytest.approx(2 / 3, abs=1e-12)
    # 8 discordant all one way: 2^8 / 9 >= 1/0.05 = 20; 7 give 2^7 / 8 = 16 < 20
    run = seq.binary_e_values(np.ones(8), np.zeros(8))
    assert run[-1] == pytest.approx(256 / 9, abs=1e-9) and run[-2] == pytest.approx(16.0, abs=1e-9)
    # concordant items only: no evidence, K stays 1
    assert seq.binary_e_values([1, 0, 1], [1, 0, 1]).tolist() == [1.0, 1.0, 1.0]
    # vectorised over replays: two rows, each its own process
    both = seq.binary_e_values([[1, 1], [0, 1]], [[0, 0], [1, 0]])
    assert both[0].tolist() == pytest.approx([1.0, 4 / 3], abs=1e-12)
    assert both[1].tolist() == pytest.approx([1.0, 2 / 3], abs=1e-12)


def test_betting_mixture_by_hand():
    # differences [1, 1] in [0, 1], bets +-0.5: ((1.5 + 0.5) / 2, (1.5^2 + 0.5^2) / 2)
    assert seq.betting_e_values([0, 0], [1, 1], bets=(0.5,)).tolist() == pytest.approx([1.0, 1.25], abs=1e-12)
    # one up, one down: (1.5 * 0.5 + 0.5 * 1.5) / 2 = 0.75
    assert seq.betting_e_values([0, 1], [1, 0], bets=(0.5,))[-1] == pytest.approx(0.75, abs=1e-12)
    # rates over repeats: differences 0.5, 0.5 -> x = 0.5: (1.25^2 + 0.75^2) / 2 = 1.0625
    assert seq.betting_e_values([0.5, 0.5], [1.0, 1.0], bets=(0.5,))[-1] == pytest.approx(1.0625, abs=1e-12)
    # a score range [0, 10]: difference 10 is x = 1, as 1 is in [0, 1]
    assert seq.betting_e_values([0, 0], [10, 10], low=0, high=10, bets=(0.5,))[-1] == pytest.approx(1.25)
    # two bets average four capitals: g = 0.5 and 0.25 on x = [1]: (1.5 + 0.5 + 1.25 + 0.75) / 4 = 1
    assert seq.betting_e_values([0], [1], bets=(0.5, 0.25))[-1] == pytest.approx(1.0, abs=1e-12)
    # and on x = [1, 1]: (2.25 + 0.25 + 1.5625 + 0.5625) / 4 = 1.15625
    assert seq.betting_e_values([0, 0], [1, 1], bets=(0.5, 0.25))[-1] == pytest.approx(1.15625, abs=1e-12)


def test_e_values_picks_the_design_like_the_comparison():
    e, test = seq.e_values([1, 1], [0, 0])
    assert test == "mixture_mcnemar" and e.tolist() == pytest.approx([1.0, 4 / 3])
    e, test = seq.e_values([1, 2 / 3], [0, 0])
    assert test == "betting"


def test_anytime_p_and_holm_by_hand():
    assert seq.anytime_p_values(np.array([1.0, 4.0, 2.0, 25.0])).tolist() == pytest.approx([1.0, 0.25, 0.25, 0.04])
    assert seq.anytime_p_values(np.array([0.5, 0.0])).tolist() == [1.0, 1.0]
    # Holm at 0.05: 0.01 < 0.05/3; then 0.03 >= 0.05/2 stops the steps
    assert seq.holm_rejections(np.array([0.01, 0.04, 0.03]), 0.05).tolist() == [True, False, False]
    # 0.01 < 0.05/3, 0.02 < 0.05/2, 0.04 < 0.05
    assert seq.holm_rejections(np.array([0.04, 0.01, 0.02]), 0.05).tolist() == [True, True, True]
    # NaN is not in the family: m = 2
    assert seq.holm_rejections(np.array([[0.02, np.nan, 0.04]]), 0.05).tolist() == [[True, False, True]]
    # the same decisions as statsmodels' Holm (metamorph.stats.holm) on a seeded batch of families
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 0.08, size=(20, 4))
    ours = seq.holm_rejections(p, 0.05)
    theirs = np.array([[v < 0.05 for v in holm(row)] for row in p])
    assert (ours == theirs).all()


def test_stopping_look_by_hand():
    # two cells, three looks; e_max per look: all rejected only at look 2 (e 50 and 25: p .02 < .05/2, .04 < .05);
    # at look 1 p .02 and .1; e 40 would give p .025, not below .05/2
    e = np.array([[1.0, 1.0], [50.0, 10.0], [50.0, 25.0]])
    assert seq.stopping_look(np.array([[40.0, 25.0]]), 0.05) == -1
    assert seq.stopping_look(e, 0.05) == 2
    assert seq.stopping_look(e[:2], 0.05) == -1
    assert seq.stopping_look(np.stack([e, e[::-1]]), 0.05).tolist() == [2, 0]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="must be 0/1"):
        seq.binary_e_values([0, 2], [0, 1])
    with pytest.raises(ValueError, match="same shape"):
        seq.binary_e_values([0, 1], [0])
    with pytest.raises(ValueError, match="finite"):
        seq.betting_e_values([0, math.nan], [0, 1])
    with pytest.raises(ValueError, match=r"lie in \[0, 1\]"):
        seq.betting_e_values([0, 1.5], [0, 1])
    with pytest.raises(ValueError, match="bets must be fractions"):
        seq.betting_e_values([0], [1], bets=(1.0,))
    with pytest.raises(ValueError, match="low < high"):
        seq.betting_e_values([0], [1], low=1, high=1)
    with pytest.raises(ValueError, match="alpha"):
        seq.holm_rejections(np.array([0.1]), 1.0)


def test_extend_order_keeps_the_prefix_and_is_seeded():
    first = seq.extend_order([], {"c", "a", "b"}, seed=0, look=0)
    assert sorted(first) == ["a", "b", "c"]
    assert seq.extend_order([], ["b", "c", "a"], seed=0, look=0) == first  # the set, not its order
    nxt = seq.extend_order(first, {"a", "b", "c", "e", "d"}, seed=0, look=1)
    assert nxt[:3] == first and sorted(nxt[3:]) == ["d", "e"]
    shuffles = {tuple(seq.extend_order([], [f"i{k:02d}" for k in range(10)], seed=s, look=0)) for s in range(5)}
    assert len(shuffles) == 5  # the seed changes the order


def _scores(model, metric, values, slice_="all"):
    return pd.DataFrame(
        {
            "model_id": model,
            "metric": metric,
            "slice": slice_,
            "item_id": [f"i{k:02d}" for k in range(len(values))],
            "value": np.asarray(values, dtype=float),
            "n_obs": 1,
        }
    )


def test_sequential_family_by_hand():
    order = [f"i{k:02d}" for k in range(10)][::-1]  # the test reads the items in this order
    scores = pd.concat(
        [
            _scores("base", "accuracy", [1] * 10),
            _scores("cand", "accuracy", [0] * 10),  # 10 discordant, all worse: e = 2^10 / 11
            _scores("base", "accuracy", [1] * 8 + [0, 0], "format=md"),
            _scores("cand", "accuracy", [0] * 8 + [0, 0], "format=md"),  # 8 discordant: 2^8 / 9
            _scores("base", "M1", [0] * 10),
            _scores("cand", "M1", [1] * 10),
        ]
    )
    fam = seq.sequential_family(scores, "base", "cand", {"accuracy": True, "M1": False}, order, blocking={"accuracy"})
    t = fam.table.set_index(["metric", "slice"])
    assert t.loc[("accuracy", "all"), "e_value"] == pytest.approx(1024 / 11)
    assert t.loc[("accuracy", "all"), "p_anytime"] == pytest.approx(11 / 1024)
    assert t.loc[("accuracy", "format=md"), "e_max"] == pytest.approx(256 / 9)
    # Holm over the two blocking rows: 11/1024 = 0.0107 < 0.025, then 9/256 = 0.0352 < 0.05
    assert t["decided"].to_dict() == {("M1", "all"): False, ("accuracy", "all"): True, ("accuracy", "format=md"): True}
    assert t.loc[("accuracy", "all"), "verdict"] == "regressed" and t.loc[("M1", "all"), "verdict"] == "undecided"
    assert t.loc[("accuracy", "all"), "difference"] == -1.0 and t.loc[("accuracy", "all"), "n_items"] == 10
    assert fam.complete
    # with M1 blocking too (p 11/1024 for M1 as well): 0.0107 < 0.0167, 0.0107 < 0.025, 0.0352 < 0.05
    fam3 = seq.sequential_family(scores, "base", "cand", {"accuracy": True, "M1": False}, order)
    assert fam3.table["decided"].all() and fam3.complete
    assert fam3.table.set_index("metric").loc["M1", "verdict"] == "regressed"  # more violations: worse
    # only 7 items seen in the md slice: 2^7 / 8 = 16, p 1/16 >= 0.05: not decided, the candidate goes on
    early = scores[~((scores["slice"] == "format=md") & (scores["item_id"] == "i00"))]
    part = seq.sequential_family(early, "base", "cand", {"accuracy": True, "M1": False}, order, blocking={"accuracy"})
    assert part.table.set_index("slice").loc["format=md", "e_max"] == pytest.approx(16.0)
    assert not part.complete
    with pytest.raises(ValueError, match="not in the order"):
        seq.sequential_family(scores, "base", "cand", {"accuracy": True, "M1": False}, order[:5])


# ------------------------------------------------------------------ simulation: repeated looks

ALPHA = 0.05
REPLAYS = 2000
#: Monte Carlo tolerance of a rejection rate over 2,000 replays: 3 standard errors at alpha,
#: 3 * sqrt(0.05 * 0.95 / 2000) = 0.0146.
MC_TOL = 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPLAYS)
N_ITEMS, BATCH = 300, 20
LOOKS = np.arange(BATCH, N_ITEMS + 1, BATCH) - 1  # after items 20, 40, ..., 300


def _e_at_looks(e):
    """(R, m, n) running e-values -> (R, L, m) running maxima at the looks."""
    return np.maximum.accumulate(e, axis=-1)[..., LOOKS].transpose(0, 2, 1)


def _any_rejection(e_looks):
    p = seq.anytime_p_values(e_looks[..., None]).squeeze(-1)
    return seq.holm_rejections(p, ALPHA).any(axis=(-1, -2))


def _exact_mcnemar_p(b, c):
    """Exact two-sided McNemar p of every prefix at the looks, vectorised: (R, m, n) -> (R, L, m)."""
    d = c - b
    k = np.cumsum(d > 0, axis=-1)[..., LOOKS]
    j = np.cumsum(d < 0, axis=-1)[..., LOOKS]
    p = np.minimum(1.0, 2 * sst.binom.cdf(np.minimum(k, j), k + j, 0.5))
    return np.where(k + j == 0, 1.0, p).transpose(0, 2, 1)


def test_exact_mcnemar_of_the_simulation_is_the_projects():
    rng = np.random.default_rng(11)
    b, c = rng.integers(0, 2, (3, 1, N_ITEMS)), rng.integers(0, 2, (3, 1, N_ITEMS))
    p = _exact_mcnemar_p(b, c)
    for r in range(3):
        assert p[r, -1, 0] == pytest.approx(mcnemar_exact(b[r, 0].astype(bool), c[r, 0].astype(bool))[1], rel=1e-9)


def test_error_rate_held_under_no_change_with_repeated_looks():
    """2,000 seeded replays of two blocking 0/1 cells with no change (each model right with
    probability 0.7 independently), 300 items, looking after every batch of 20 (15 looks): the
    share of replays where Holm rejects anything at any look is 0.039 <= 0.05 + 0.0146. The same
    looks with the fixed-sample exact McNemar test reject in 0.162 of replays: the harness can fail."""
    rng = np.random.default_rng(20261205)
    b = (rng.random((REPLAYS, 2, N_ITEMS)) < 0.7).astype(float)
    c = (rng.random((REPLAYS, 2, N_ITEMS)) < 0.7).astype(float)
    rate = float(_any_rejection(_e_at_looks(seq.binary_e_values(b, c))).mean())
    assert rate <= ALPHA + MC_TOL
    assert rate == 0.039
    naive = float(seq.holm_rejections(_exact_mcnemar_p(b, c), ALPHA).any(axis=(-1, -2)).mean())
    assert naive == 0.162 and naive > ALPHA + MC_TOL


def test_error_rate_held_for_bounded_values_under_no_change():
    """The betting e-process on rates over 3 repeats (values 0, 1/3, 2/3, 1), both models with the
    same per-item accuracy, two blocking cells, 2,000 replays, 15 looks: rejection rate 0.018."""
    rng = np.random.default_rng(7)
    skill = rng.uniform(0.2, 0.9, (REPLAYS, 2, N_ITEMS))  # item difficulty, shared by both models
    b = rng.binomial(3, skill) / 3
    c = rng.binomial(3, skill) / 3
    rate = float(_any_rejection(_e_at_looks(seq.betting_e_values(b, c))).mean())
    assert rate <= ALPHA + MC_TOL
    assert rate == 0.018


def test_a_regression_stops_early_with_the_full_runs_verdict():
    """A synthetic regression: baseline right with probability 0.8, candidate with 0.6, two blocking
    cells, 2,000 replays. The sequential run stops (both cells decided under Holm) at a median of
    120 items of the 300 planned (60 % of the calls saved; 10th-90th percentile 60-220); 1977 of
    2000 replays stop, and every one of them says "regressed" on both cells, as does the full
    300-item run with exact McNemar and Holm in the same replays (it finds both regressions in all
    2000). The 23 that spend the plan have decided one of the two cells (regressed) and leave the
    other undecided: the price of looking as often as one likes is some power at the last look."""
    rng = np.random.default_rng(99)
    b = (rng.random((REPLAYS, 2, N_ITEMS)) < 0.8).astype(float)
    c = (rng.random((REPLAYS, 2, N_ITEMS)) < 0.6).astype(float)
    e_looks = _e_at_looks(seq.binary_e_values(b, c))
    stop = seq.stopping_look(e_looks, ALPHA)
    stopped = stop >= 0
    n_stop = (stop[stopped] + 1) * BATCH
    assert int(stopped.sum()) == 1977
    assert float(np.median(n_stop)) == 120.0
    # the direction at the stop: candidate worse on both cells in every stopped replay
    idx = np.where(stopped)[0]
    items = (stop[idx] + 1) * BATCH
    diff_at_stop = np.array([(c[r, :, :n] - b[r, :, :n]).mean(axis=-1) for r, n in zip(idx, items)])
    assert (diff_at_stop < 0).all()
    # the full run: exact McNemar on all 300 items, Holm over the two cells
    full = seq.holm_rejections(_exact_mcnemar_p(b, c)[:, -1, :], ALPHA)
    full_regressed = full.all(axis=-1) & ((c - b).mean(axis=-1) < 0).all(axis=-1)
    assert int(full_regressed.sum()) == 2000
    assert full_regressed[stopped].all()
    last = seq.holm_rejections(seq.anytime_p_values(e_looks[:, -1, :, None]).squeeze(-1), ALPHA)
    assert last[~stopped].sum(axis=-1).tolist() == [1] * 23


def test_no_change_runs_spend_the_plan():
    """Under no change a run rarely stops: the plan is spent (stop = -1) in 1998 of 2000 replays
    (both cells must be decided to stop, which under no change needs two false rejections)."""
    rng = np.random.default_rng(5)
    b = (rng.random((REPLAYS, 2, N_ITEMS)) < 0.7).astype(float)
    c = (rng.random((REPLAYS, 2, N_ITEMS)) < 0.7).astype(float)
    stop = seq.stopping_look(_e_at_looks(seq.binary_e_values(b, c)), ALPHA)
    assert int((stop == -1).sum()) == 1998
