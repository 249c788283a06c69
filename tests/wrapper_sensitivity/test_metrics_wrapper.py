"""Tests of metamorph.studies.wrapper_sensitivity.metrics with tiny frames and hand-computed answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sst

from metamorph import stats
from metamorph.studies.wrapper_sensitivity import metrics as ws
from metamorph.studies.wrapper_sensitivity import diagnostics as diag
from metamorph.studies.wrapper_sensitivity import regression as reg

T, F = True, False


def gens(model, task, answer_type, wrapper, parse, correct, *, n_choices=None, finish=None, seeds=(0,), mode="paper"):
    """One row per (item, seed); ``parse``/``correct`` are lists over items × seeds (item-major)."""
    rows = []
    n_items = len(parse) // len(seeds)
    k = 0
    for i in range(n_items):
        for sd in seeds:
            rows.append(
                dict(
                    model_id=model,
                    task=task,
                    answer_type=answer_type,
                    wrapper=wrapper,
                    item_id=f"i{i + 1}",
                    seed=sd,
                    mode=mode,
                    parseable=parse[k],
                    correct=correct[k],
                    finish_reason=None if finish is None else finish[k],
                    prompt_tokens=100,
                    n_choices=n_choices if answer_type == "choice" else None,
                    reason="ok" if parse[k] else "no_answer",
                )
            )
            k += 1
    return rows


def tiny() -> pd.DataFrame:
    rows = []
    # m1 / t_bool (boolean, chance 50), 4 items, 1 seed:
    #   plain      P = 4/4 = 100, A = 3/4 = 75, C = 3/4 = 75
    #   json       P = 2/4 = 50,  A = 1/4 = 25, C = 1/2 = 50
    #   deliberate P = 3/4 = 75,  A = 2/4 = 50, C = 2/3; item 4 truncated (finish 'length') -> 25%
    rows += gens("m1", "t_bool", "boolean", "plain", [T, T, T, T], [T, T, T, F], finish=["stop"] * 4)
    rows += gens("m1", "t_bool", "boolean", "json", [T, T, F, F], [T, F, F, F], finish=["stop"] * 4)
    rows += gens(
        "m1", "t_bool", "boolean", "deliberate", [T, T, T, F], [T, T, F, F], finish=["stop", "stop", None, "length"]
    )
    # m1 / t_mc (choice, 4 options, chance 25), 2 items x 2 seeds:
    #   plain P = 100, A = 100;  json P = 0, A = 0, Acc|parse undefined
    rows += gens("m1", "t_mc", "choice", "plain", [T] * 4, [T] * 4, n_choices=4, seeds=(0, 1))
    rows += gens("m1", "t_mc", "choice", "json", [F] * 4, [F] * 4, n_choices=4, seeds=(0, 1))
    # m2 / t_bool: plain P = 100, A = 100; json P = 100, A = 75 (C = 75)
    rows += gens("m2", "t_bool", "boolean", "plain", [T] * 4, [T] * 4)
    rows += gens("m2", "t_bool", "boolean", "json", [T] * 4, [T, T, T, F])
    # m2 / t_mc: plain and json both A = 2/4 = 50 -> a tie
    rows += gens("m2", "t_mc", "choice", "plain", [T] * 4, [T, F, T, F], n_choices=4, seeds=(0, 1))
    rows += gens("m2", "t_mc", "choice", "json", [T] * 4, [T, T, F, F], n_choices=4, seeds=(0, 1))
    df = pd.DataFrame(rows)
    # The same generations scored in strict mode: nothing parses (must not leak into "paper", the default).
    strict = df.assign(mode="strict", parseable=False, correct=False)
    return pd.concat([df, strict], ignore_index=True)


@pytest.fixture
def scored() -> pd.DataFrame:
    return tiny()


@pytest.fixture
def cells(scored) -> pd.DataFrame:
    return ws.cell_metrics(scored)


def _row(df, **keys):
    sel = np.ones(len(df), dtype=bool)
    for k, v in keys.items():
        sel &= (df[k] == v).to_numpy()
    assert sel.sum() == 1, keys
    return df[sel].iloc[0]


# --------------------------------------------------------------------------- validation


def test_missing_columns_named(scored):
    with pytest.raises(ValueError, match=r"n_choices.*finish_reason|finish_reason.*n_choices"):
        ws.cell_metrics(scored.drop(columns=["finish_reason", "n_choices"]))


def test_invalid_inputs_raise(scored):
    bad = scored.copy()
    bad.loc[0, "correct"] = True
    bad.loc[0, "parseable"] = False
    with pytest.raises(ValueError, match="correct but not parseable"):
        ws.cell_metrics(bad)
    with pytest.raises(ValueError, match="share a generation key"):
        ws.cell_metrics(pd.concat([scored, scored.iloc[[0]]]))
    with pytest.raises(ValueError, match="mode must be one of"):
        ws.cell_metrics(scored, mode="fuzzy")
    with pytest.raises(ValueError, match="no row with mode 'lenient'"):
        ws.cell_metrics(scored, mode="lenient")
    bad = scored.copy()
    bad.loc[bad["task"] == "t_mc", "n_choices"] = 1
    with pytest.raises(ValueError, match="n_choices"):
        ws.cell_metrics(bad)


# --------------------------------------------------------------------------- cells


def test_cell_metrics_hand_values(cells):
    d = _row(cells, model_id="m1", task="t_bool", wrapper="deliberate")
    assert d["accuracy_pct"] == pytest.approx(50.0)
    assert d["parseability_pct"] == pytest.approx(75.0)
    assert d["acc_given_parse_pct"] == pytest.approx(200 / 3)  # 2 correct of 3 parseable
    assert d["truncation_rate_pct"] == pytest.approx(25.0)  # 1 'length' of 4; None is not truncated
    assert (d["n"], d["n_correct"], d["n_parseable"], d["n_truncated"], d["n_items"], d["n_seeds"]) == (
        4,
        2,
        3,
        1,
        4,
        1,
    )
    assert d["chance_pct"] == 50.0 and d["mode"] == "paper"
    j = _row(cells, model_id="m1", task="t_mc", wrapper="json")
    assert j["accuracy_pct"] == 0.0 and j["parseability_pct"] == 0.0
    assert math.isnan(j["acc_given_parse_pct"])  # nothing parseable -> null, not 0
    assert j["chance_pct"] == 25.0 and j["n"] == 4 and j["n_seeds"] == 2
    assert _row(cells, model_id="m1", task="t_bool", wrapper="plain")["truncation_rate_pct"] == 0.0
    # canonical wrapper order within a (model, task)
    assert cells[(cells.model_id == "m1") & (cells.task == "t_bool")]["wrapper"].tolist() == [
        "plain",
        "json",
        "deliberate",
    ]


def test_mode_slice(scored):
    strict = ws.cell_metrics(scored, mode="strict")
    assert (strict["parseability_pct"] == 0.0).all() and (strict["mode"] == "strict").all()
    assert len(strict) == len(ws.cell_metrics(scored))


def test_chance_mixed_n_choices_and_missing():
    rows = gens("m", "t", "choice", "plain", [T, T], [T, F], n_choices=4)
    rows += gens("m", "t", "choice", "json", [T, T], [T, T], n_choices=4)
    df = pd.DataFrame(rows)
    df.loc[1, "n_choices"] = 5  # item 2 of plain has 5 options
    cells = ws.cell_metrics(df)
    # chance of plain = mean(100/4, 100/5) = (25 + 20)/2 = 22.5
    assert _row(cells, wrapper="plain")["chance_pct"] == pytest.approx(22.5)
    df.loc[1, "n_choices"] = None
    cells = ws.cell_metrics(df)
    assert math.isnan(_row(cells, wrapper="plain")["chance_pct"])
    f = ws.fsi_psi(cells)
    assert math.isnan(f["nfsi_chance"].iloc[0]) and "chance level unknown" in f["note"].iloc[0]
    assert f["fsi_pp"].iloc[0] == pytest.approx(50.0)  # FSI itself is still defined


# --------------------------------------------------------------------------- FSI / PSI / nFSI


def test_fsi_psi_hand_computed(cells):
    f = ws.fsi_psi(cells)
    a = _row(f, model_id="m1", task="t_bool")
    # A = 75, 25, 50  -> FSI = 75 - 25 = 50;  P = 100, 50, 75 -> PSI = 100 - 50 = 50
    assert a["fsi_pp"] == pytest.approx(50.0) and a["psi_pp"] == pytest.approx(50.0)
    # as fractions, like the paper: FSI = 0.75 - 0.25 = 0.5, PSI = 1 - 0.5 = 0.5
    assert (a["fsi"], a["psi"]) == (0.5, 0.5)
    # mean A = (75 + 25 + 50)/3 = 50 -> nFSI = 50 / (50 + 1e-6)
    assert a["mean_accuracy_pct"] == pytest.approx(50.0)
    assert a["nfsi"] == pytest.approx(50 / (50 + 1e-6), rel=1e-12)
    # c = 50: kappa+ = clip((75-50)/50) = 0.5, clip((25-50)/50) = 0, clip((50-50)/50) = 0 -> 0.5 - 0 = 0.5
    assert a["chance_pct"] == 50.0 and a["nfsi_chance"] == pytest.approx(0.5)
    assert a["n_below_chance"] == 1  # json (25 < 50); deliberate (= 50) is not below
    assert (a["best_wrapper"], a["worst_wrapper"]) == ("plain", "json")
    assert (a["n_best"], a["n_worst"], a["all_tied"]) == (1, 1, False)
    assert (a["best_accuracy_pct"], a["worst_accuracy_pct"]) == (75.0, 25.0)
    assert a["n_wrappers"] == 3 and a["note"] is None

    b = _row(f, model_id="m1", task="t_mc")
    # A = 100, 0 -> FSI = 100; mean 50 -> nFSI = 100/50 = 2 (> 1: unbounded)
    assert b["fsi_pp"] == 100.0 and b["psi_pp"] == 100.0 and (b["fsi"], b["psi"]) == (1.0, 1.0)
    assert b["nfsi"] == pytest.approx(2.0, rel=1e-6)
    # c = 25: kappa+ = (100-25)/75 = 1, clip((0-25)/75) = 0 -> 1 (FSI/(100-c) = 1.33 would exceed 1)
    assert b["nfsi_chance"] == pytest.approx(1.0)

    c = _row(f, model_id="m2", task="t_bool")
    # A = 100, 75 (both >= chance): FSI = 25, mean 87.5, nFSI = 25/87.5 = 0.285714...
    assert c["fsi_pp"] == 25.0 and c["psi_pp"] == 0.0 and (c["fsi"], c["psi"]) == (0.25, 0.0)
    assert c["nfsi"] == pytest.approx(25 / 87.5, rel=1e-6)
    # kappa+ = 1, 0.5 -> 0.5 = FSI / (100 - c) = 25 / 50 (no flooring needed)
    assert c["nfsi_chance"] == pytest.approx(0.5) == 25 / 50

    d = _row(f, model_id="m2", task="t_mc")
    # tie at 50: FSI = 0, nFSI = 0; the tie is reported as a tie: both wrappers are best and worst
    assert d["fsi_pp"] == 0.0 and d["fsi"] == 0.0 and d["nfsi"] == 0.0 and d["nfsi_chance"] == 0.0
    assert d["best_wrapper"] == "plain, json" and d["worst_wrapper"] == "plain, json"
    assert (d["n_best"], d["n_worst"], d["all_tied"]) == (2, 2, True)
    assert (d["best_accuracy_pct"], d["worst_accuracy_pct"]) == (50.0, 50.0)


def test_fsi_single_wrapper_is_null_with_note():
    cells = ws.cell_metrics(pd.DataFrame(gens("m", "num", "numeric", "plain", [T, T], [T, F])))
    f = ws.fsi_psi(cells)
    assert f["n_wrappers"].iloc[0] == 1
    assert math.isnan(f["fsi_pp"].iloc[0]) and math.isnan(f["nfsi"].iloc[0]) and math.isnan(f["nfsi_chance"].iloc[0])
    assert f["best_wrapper"].iloc[0] is None and "1 wrapper" in f["note"].iloc[0]
    assert math.isnan(f["fsi"].iloc[0]) and pd.isna(f["all_tied"].iloc[0]) and pd.isna(f["n_best"].iloc[0])


def test_numeric_chance_zero_nfsi_chance_is_fsi_over_100():
    rows = gens("m", "num", "numeric", "plain", [T] * 4, [T, T, T, F])
    rows += gens("m", "num", "numeric", "json", [T] * 4, [T, F, F, F])
    f = ws.fsi_psi(ws.cell_metrics(pd.DataFrame(rows)))
    # c = 0: kappa = A/100 -> 0.75 - 0.25 = 0.5 = FSI/100
    assert f["chance_pct"].iloc[0] == 0.0 and f["nfsi_chance"].iloc[0] == pytest.approx(0.5)


# --------------------------------------------------------------------------- bootstrap of the means


def test_mean_indices_values_seeded_and_matching_stats(cells):
    f = ws.fsi_psi(cells)
    a = ws.mean_indices(f, n_resamples=2000, seed=3)
    b = ws.mean_indices(f, n_resamples=2000, seed=3)
    pd.testing.assert_frame_equal(a, b)
    r = _row(a, model_id="m1", index="FSI")
    # m1 FSI over tasks = [50, 100] -> mean 75
    assert r["mean"] == pytest.approx(75.0) and r["unit"] == "pp" and r["n_tasks"] == 2
    ref = stats.bootstrap_mean_ci([50.0, 100.0], n_resamples=2000, seed=3)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(ref.low), pytest.approx(ref.high))
    assert 50.0 <= r["ci_low"] <= r["ci_high"] <= 100.0
    assert _row(a, model_id="m2", index="PSI")["mean"] == 0.0  # PSI 0 and 0
    assert _row(a, model_id="m2", index="nFSI_chance")["mean"] == pytest.approx(0.25)  # (0.5 + 0)/2
    fr = _row(a, model_id="m1", index="FSI_fraction")
    # the same FSI as fractions: [0.5, 1.0] -> mean 0.75, and the same task draws (seed 3) -> CI / 100
    assert fr["mean"] == pytest.approx(0.75) and fr["unit"] == "fraction"
    assert (fr["ci_low"], fr["ci_high"]) == (pytest.approx(ref.low / 100), pytest.approx(ref.high / 100))
    assert _row(a, model_id="m2", index="PSI_fraction")["mean"] == 0.0
    assert a[a.model_id == "m1"]["index"].tolist() == [
        "FSI",
        "PSI",
        "nFSI",
        "nFSI_chance",
        "FSI_fraction",
        "PSI_fraction",
    ]
    assert len(a) == 12


def test_mean_indices_single_task_note_and_all_equal_boundary():
    one = pd.DataFrame(
        dict(
            model_id=["m"],
            task=["t"],
            fsi_pp=[10.0],
            psi_pp=[4.0],
            nfsi=[0.2],
            nfsi_chance=[0.1],
            fsi=[0.1],
            psi=[0.04],
            n_call_errors=[0],
            n_generations=[10],
        )
    )
    r = _row(ws.mean_indices(one, n_resamples=100), index="FSI")
    assert r["mean"] == 10.0 and math.isnan(r["ci_low"])
    assert math.isnan(r["ci_high"]) and r["ci_note"].startswith("n=1") and r["n_tasks"] == 1
    eq = pd.DataFrame(
        dict(
            model_id=["m"] * 3,
            task=["a", "b", "c"],
            fsi_pp=[7.0] * 3,
            psi_pp=[0.0] * 3,
            nfsi=[0.5] * 3,
            nfsi_chance=[None, 0.2, 0.2],
            fsi=[0.07] * 3,
            psi=[0.0] * 3,
            n_call_errors=[0] * 3,
            n_generations=[10] * 3,
        )
    )
    out = ws.mean_indices(eq, n_resamples=100)
    r = _row(out, index="FSI")
    assert (r["mean"], r["ci_low"], r["ci_high"]) == (7.0, 7.0, 7.0)
    assert r["ci_note"] == stats.NOTE_ALL_EQUAL
    p = _row(out, index="PSI")
    assert (p["ci_low"], p["ci_high"]) == (0.0, 0.0)  # zero boundary, not NaN
    # 3 tasks of different FSI: an interval over 3 clusters, printed with the note that it is unreliable
    three = eq.assign(fsi_pp=[2.0, 7.0, 12.0])
    f3 = _row(ws.mean_indices(three, n_resamples=100), index="FSI")
    assert f3["mean"] == 7.0 and f3["ci_low"] < 7.0 < f3["ci_high"] and f3["n_tasks"] == 3
    assert f3["ci_note"] == "n=3 clusters (< 20): interval unreliable"
    c = _row(out, index="nFSI_chance")
    assert c["n_tasks"] == 2 and c["n_undefined"] == 1 and c["ci_low"] == 0.2


# --------------------------------------------------------------------------- correlation


def test_pearson_matches_scipy(cells):
    out = reg.pearson_acc_parse(cells)
    pooled = _row(out, scope="pooled")
    ref = sst.pearsonr(cells["accuracy_pct"], cells["parseability_pct"])
    assert pooled["r"] == pytest.approx(ref.statistic) and pooled["p_value"] == pytest.approx(ref.pvalue)
    assert pooled["n"] == len(cells) == 9
    m2 = _row(out, model_id="m2")
    # m2 cells: P all 100 -> constant, r undefined with a note
    assert math.isnan(m2["r"]) and "constant" in m2["note"]


# --------------------------------------------------------------------------- fixed-effects WLS


def synthetic_cells(seed=0, beta=0.8, noise=0.5):
    rng = np.random.default_rng(seed)
    models, tasks, wrappers = ["ma", "mb", "mc"], ["t1", "t2", "t3", "t4"], list(ws.WRAPPER_ORDER)
    alpha = dict(zip(models, rng.normal(0, 5, 3)))
    gamma = dict(zip(tasks, rng.normal(0, 5, 4)))
    delta = dict(zip(wrappers, rng.normal(0, 3, 5)))
    rows = []
    for m in models:
        for t in tasks:
            for w in wrappers:
                p = rng.uniform(30, 95)
                a = beta * p + alpha[m] + gamma[t] + delta[w] + rng.normal(0, noise)
                rows.append(
                    dict(
                        model_id=m,
                        task=t,
                        wrapper=w,
                        accuracy_pct=a,
                        parseability_pct=p,
                        n=int(rng.integers(20, 200)),
                        n_call_errors=0,
                    )
                )
    return pd.DataFrame(rows)


def test_fe_regression_recovers_beta_and_matches_statsmodels():
    c = synthetic_cells()
    out = reg.fixed_effects_regression(c).iloc[0]
    assert abs(out["beta"] - 0.8) < 0.02 and out["se"] > 0
    ref = smf.wls("accuracy_pct ~ parseability_pct + C(model_id) + C(task) + C(wrapper)", data=c, weights=c["n"]).fit()
    assert out["beta"] == pytest.approx(ref.params["parseability_pct"], rel=1e-9)
    assert out["se"] == pytest.approx(ref.bse["parseability_pct"], rel=1e-9)
    assert out["p_value"] == pytest.approx(ref.pvalues["parseability_pct"], rel=1e-6, abs=1e-300)
    # 60 cells - (1 const + 1 P + 2 model + 3 task + 4 wrapper) = 49
    assert out["df_resid"] == 49 == int(ref.df_resid) and out["n_params"] == 11 and out["n_cells"] == 60
    red = smf.wls("accuracy_pct ~ C(model_id) + C(task) + C(wrapper)", data=c, weights=c["n"]).fit()
    assert out["partial_r2"] == pytest.approx((red.ssr - ref.ssr) / red.ssr, rel=1e-9)
    t = out["t_value"]
    assert out["partial_r2"] == pytest.approx(t**2 / (t**2 + 49), rel=1e-9)
    assert out["weight_sum"] == c["n"].sum() and out["weights"].startswith("n:")
    assert out["effects"] == "model_id, task, wrapper" and out["note"] is None


def test_fe_regression_single_model_dropped_with_note_and_rank_deficient_raises():
    c = synthetic_cells()
    one = c[c["model_id"] == "ma"]
    out = reg.fixed_effects_regression(one).iloc[0]
    assert "model_id has a single level" in out["note"] and out["effects"] == "task, wrapper"
    # 20 cells - (1 + 1 + 3 task + 4 wrapper) = 11
    assert out["df_resid"] == 11
    # P determined by the wrapper -> collinear with the wrapper effects
    bad = c.assign(parseability_pct=c["wrapper"].map({w: 10.0 * i + 20 for i, w in enumerate(ws.WRAPPER_ORDER)}))
    with pytest.raises(ValueError, match="rank-deficient.*linear combination"):
        reg.fixed_effects_regression(bad)
    # one model, one task, 5 wrappers: const + P + 4 wrapper dummies = 6 > 5 cells
    with pytest.raises(ValueError, match="rank-deficient|no residual"):
        reg.fixed_effects_regression(one[one["task"] == "t1"])
    with pytest.raises(ValueError, match="constant"):
        reg.fixed_effects_regression(c.assign(parseability_pct=50.0))


# --------------------------------------------------------------------------- item-level model


def clustered_scored(seed=1):
    rng = np.random.default_rng(seed)
    rows = []
    wrappers = ["plain", "json", "deliberate"]
    comp = {"plain": 0.95, "json": 0.7, "deliberate": 0.8}
    for task in ("ta", "tb"):
        for i in range(30):
            diff = rng.normal(0, 2.5)  # item difficulty shared by every generation of the item
            pz = rng.normal(0, 2.0)  # item-level compliance shock
            for m in ("m1", "m2"):
                for w in wrappers:
                    for sd in (0, 1):
                        parse = rng.random() < 1 / (1 + math.exp(-(3 * comp[w] - 1 + pz)))
                        corr = parse and rng.random() < 1 / (1 + math.exp(-(0.5 + diff)))
                        rows.append(
                            dict(
                                model_id=m,
                                task=task,
                                answer_type="numeric",
                                wrapper=w,
                                item_id=f"q{i}",
                                seed=sd,
                                mode="paper",
                                parseable=parse,
                                correct=corr,
                                finish_reason="stop",
                                prompt_tokens=50,
                                n_choices=None,
                                reason="ok" if parse else "no_answer",
                            )
                        )
    return pd.DataFrame(rows)


def test_item_level_cluster_se_matches_statsmodels_and_differs_from_classical():
    s = clustered_scored()
    out = reg.item_level_model(s)
    p = _row(out, term="parseable")
    # item ids repeat across tasks: clusters are (task, item_id) -> 2 x 30 = 60
    assert p["n_clusters"] == 60 and p["n_obs"] == len(s) == 720 and p["df_inference"] == 59
    groups = pd.factorize(s["task"] + "/" + s["item_id"])[0]
    d = s.assign(correct=s["correct"].astype(float), parseable=s["parseable"].astype(float))
    formula = "correct ~ parseable + C(model_id) + C(task) + C(wrapper, Treatment('plain'))"
    ref = smf.ols(formula, data=d).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    assert p["coef"] == pytest.approx(ref.params["parseable"], rel=1e-9)
    assert p["se"] == pytest.approx(ref.bse["parseable"], rel=1e-9)
    assert p["p_value"] == pytest.approx(ref.pvalues["parseable"], rel=1e-6)
    classical = smf.ols(formula, data=d).fit()
    assert p["se_nonrobust"] == pytest.approx(classical.bse["parseable"], rel=1e-9)
    # strongly clustered data: the classical SE understates the uncertainty (ratio about 1.47 here)
    assert p["se"] > 1.3 * p["se_nonrobust"]
    j = _row(out, term="wrapper[json]")
    assert j["coef"] == pytest.approx(ref.params["C(wrapper, Treatment('plain'))[T.json]"], rel=1e-9)
    assert j["se"] == pytest.approx(ref.bse["C(wrapper, Treatment('plain'))[T.json]"], rel=1e-9)
    assert set(out["term"]) == {"parseable", "wrapper[json]", "wrapper[deliberate]"}
    assert (out["reference_wrapper"] == "plain").all()


def test_item_level_needs_two_clusters():
    rows = gens("m", "t", "numeric", "plain", [T], [T]) + gens("m", "t", "numeric", "json", [F], [F])
    with pytest.raises(ValueError, match="at least 2 items"):
        reg.item_level_model(pd.DataFrame(rows))


# --------------------------------------------------------------------------- decomposition


def test_decomposition_hand_values_sum_to_fsi(cells):
    d = diag.decomposition(cells)
    a = _row(d, model_id="m1", task="t_bool")
    # best plain: P = 1, C = .75; worst json: P = .5, C = .5
    # compliance = dP * Cbar = .5 * .625 = .3125 -> 31.25 pp; conditional = dC * Pbar = .25 * .75 -> 18.75 pp
    assert a["compliance_pp"] == pytest.approx(31.25) and a["conditional_pp"] == pytest.approx(18.75)
    assert a["compliance_pp"] + a["conditional_pp"] == pytest.approx(a["fsi_pp"], abs=1e-12) and a["fsi_pp"] == 50.0
    assert a["delta_parse_pp"] == pytest.approx(50.0) and a["delta_acc_given_parse_pp"] == pytest.approx(25.0)
    assert a["mean_parse_pct"] == pytest.approx(75.0) and a["mean_acc_given_parse_pct"] == pytest.approx(62.5)
    assert a["compliance_share"] == pytest.approx(0.625) and a["note"] is None
    c = _row(d, model_id="m2", task="t_bool")
    # same parseability (100 vs 100): all of FSI = 25 is conditional accuracy (1 - .75) * 1
    assert (c["compliance_pp"], c["conditional_pp"]) == (pytest.approx(0.0), pytest.approx(25.0))
    assert c["compliance_share"] == pytest.approx(0.0)
    t = _row(d, model_id="m2", task="t_mc")  # tie: FSI 0, parts 0, no share, the tie said
    assert t["fsi_pp"] == 0.0 and t["compliance_pp"] == 0.0 and math.isnan(t["compliance_share"])
    assert t["note"] == "all 2 wrappers tie (FSI = 0): split of 'plain' vs 'plain'"
    # m1/t_mc: json has no parseable generation -> Acc|parse undefined -> parts null (not 0), with the reason
    u = _row(d, model_id="m1", task="t_mc")
    assert u["fsi_pp"] == 100.0 and u["delta_parse_pp"] == 100.0 and u["mean_parse_pct"] == 50.0
    for col in (
        "delta_acc_given_parse_pp",
        "mean_acc_given_parse_pct",
        "compliance_pp",
        "conditional_pp",
        "compliance_share",
    ):
        assert math.isnan(u[col]), col
    assert u["note"] == (
        "worst wrapper 'json' has no parseable generation: Acc|parse undefined, "
        "so ΔC, C̄ and the compliance / conditional split are undefined (null)"
    )
    full = d.dropna(subset=["compliance_pp"])
    assert len(full) == 3
    np.testing.assert_allclose(full["compliance_pp"] + full["conditional_pp"], full["fsi_pp"], atol=1e-12)


def test_decomposition_ties_at_one_end_use_the_first_canonical_wrapper_and_say_so():
    # plain A = 1/2 (P 1), json A = 1/2 (P 1/2, C 1), structured A = 0 (P 1/2, C 0): best tied plain, json
    rows = gens("m", "t", "boolean", "plain", [T, T], [T, F])
    rows += gens("m", "t", "boolean", "json", [T, F], [T, F])
    rows += gens("m", "t", "boolean", "structured", [T, F], [F, F])
    cells = ws.cell_metrics(pd.DataFrame(rows))
    f = _row(ws.fsi_psi(cells), task="t")
    assert (f["best_wrapper"], f["worst_wrapper"], f["n_best"], f["all_tied"]) == (
        "plain, json",
        "structured",
        2,
        False,
    )
    assert (f["fsi"], f["psi"]) == (0.5, 0.5)
    d = _row(diag.decomposition(cells), task="t")
    # plain (P 1, C .5) vs structured (P .5, C 0): compliance = .5 * .25 = .125, conditional = .5 * .75 = .375
    assert (d["best_wrapper"], d["worst_wrapper"]) == ("plain", "structured")
    assert (d["compliance_pp"], d["conditional_pp"]) == (pytest.approx(12.5), pytest.approx(37.5))
    assert d["note"] == "best accuracy tied by plain, json: split uses 'plain'"


def test_decomposition_zero_parseable_conventions(cells):
    z = _row(diag.decomposition(cells, undefined_conditional="zero"), model_id="m1", task="t_mc")
    # best plain P = 1, C = 1; worst json P = 0, C undefined -> 0:
    # compliance = 1 * (1 + 0)/2 = .5 -> 50 pp; conditional = (1 - 0) * (1 + 0)/2 -> 50 pp
    assert (z["compliance_pp"], z["conditional_pp"], z["fsi_pp"]) == (50.0, 50.0, 100.0)
    assert "no parseable generation" in z["note"] and "set to 0" in z["note"]
    m = _row(diag.decomposition(cells, undefined_conditional="match"), model_id="m1", task="t_mc")
    # C_json := C_plain = 1 -> compliance = 1 * 1 = 100 pp, conditional = 0
    assert (m["compliance_pp"], m["conditional_pp"]) == (100.0, 0.0) and "other wrapper" in m["note"]
    with pytest.raises(ValueError, match="undefined_conditional"):
        diag.decomposition(cells, undefined_conditional="half")


def test_decomposition_nothing_parseable_anywhere_is_null_not_zero():
    rows = gens("m", "t", "numeric", "plain", [F, F], [F, F]) + gens("m", "t", "numeric", "json", [F, F], [F, F])
    cells = ws.cell_metrics(pd.DataFrame(rows))
    f = _row(ws.fsi_psi(cells), task="t")
    assert (f["fsi"], f["best_wrapper"], f["worst_wrapper"], f["all_tied"]) == (0.0, "plain, json", "plain, json", True)
    d = _row(diag.decomposition(cells), task="t")
    assert d["fsi_pp"] == 0.0 and math.isnan(d["compliance_pp"]) and math.isnan(d["mean_acc_given_parse_pct"])
    assert "best wrapper 'plain' has no parseable generation" in d["note"]
    assert "worst wrapper 'plain' has no parseable generation" in d["note"]
    # the earlier conventions, kept as named options, set C = 0 for both: parts 0
    for conv in ("match", "zero"):
        o = _row(diag.decomposition(cells, undefined_conditional=conv), task="t")
        assert (o["compliance_pp"], o["conditional_pp"]) == (0.0, 0.0)


def test_decomposition_rejects_inconsistent_counts(cells):
    bad = cells.copy()
    bad.loc[0, "accuracy_pct"] = 12.0
    with pytest.raises(ValueError, match="n_correct"):
        diag.decomposition(bad)


# --------------------------------------------------------------------------- wins, matched subset


def test_win_counts_with_tie(cells):
    w = diag.win_counts(cells).set_index("wrapper")
    # plain wins m1/t_bool, m1/t_mc, m2/t_bool and ties m2/t_mc with json (each tied wrapper gets a win)
    assert (w.loc["plain", "wins"], w.loc["plain", "tied_wins"], w.loc["plain", "n_combinations"]) == (4, 1, 4)
    assert (w.loc["json", "wins"], w.loc["json", "tied_wins"], w.loc["json", "n_combinations"]) == (1, 1, 4)
    assert (w.loc["deliberate", "wins"], w.loc["deliberate", "n_combinations"]) == (0, 1)
    assert w.loc["json", "win_pct"] == 25.0 and list(w.index) == ["plain", "json", "deliberate"]


def test_matched_fsi(scored):
    out = diag.matched_fsi(scored, {("t_bool", "i1"), ("t_bool", "i2"), ("t_mc", "i1")})
    a = _row(out, model_id="m1", task="t_bool")
    # items i1, i2 only: plain [T, T] -> 100, json [T, F] -> 50, deliberate [T, T] -> 100: FSI 50; P 100,100,100
    assert (a["fsi_full_pp"], a["fsi_matched_pp"], a["delta_fsi_pp"]) == (50.0, 50.0, 0.0)
    assert a["psi_matched_pp"] == 0.0 and (a["n_items_full"], a["n_items_matched"]) == (4, 2)
    c = _row(out, model_id="m2", task="t_mc")
    # item i1 (2 seeds): plain [T, F] -> 50, json [T, T] -> 100: FSI 50 (full: 0)
    assert (c["fsi_full_pp"], c["fsi_matched_pp"], c["delta_fsi_pp"]) == (0.0, 50.0, 50.0)
    assert c["n_items_matched"] == 1
    # per-model matched sets (Δtok is per tokenizer): m1/t_mc has no matched item -> null + note
    per_model = pd.DataFrame(dict(model_id=["m2"], task=["t_mc"], item_id=["i1"]))
    out2 = diag.matched_fsi(scored, per_model)
    n = _row(out2, model_id="m1", task="t_mc")
    assert n["n_items_matched"] == 0 and math.isnan(n["fsi_matched_pp"]) and n["note"] == "no matched item"
    assert _row(out2, model_id="m2", task="t_mc")["fsi_matched_pp"] == 50.0


# --------------------------------------------------------------------------- partial R² = t² / (t² + df)


def test_partial_r2_from_t_paper_values():
    # the paper: beta = 0.819 +- 0.034, df = 140 cells - 15 coefficients = 125 -> partial R² 0.82
    t = 0.819 / 0.034  # 24.088...
    # t² = 0.819² / 0.034² = 0.670761 / 0.001156 = 580.24308; 580.24308 / 705.24308 = 0.8227561
    assert reg.partial_r2_from_t(t, 125) == pytest.approx(0.670761 / 0.001156 / (0.670761 / 0.001156 + 125), rel=1e-12)
    assert reg.partial_r2_from_t(t, 125) == pytest.approx(0.8227561, abs=1e-7)
    assert round(reg.partial_r2_from_t(t, 125), 2) == 0.82
    # and the t that gives exactly 0.82 with df 125: t² = 0.82 * 125 / 0.18 = 569.444...
    assert reg.partial_r2_from_t(math.sqrt(0.82 * 125 / 0.18), 125) == pytest.approx(0.82, abs=1e-12)
    assert reg.partial_r2_from_t(0.0, 10) == 0.0 and reg.partial_r2_from_t(-3.0, 9) == 0.5  # 9 / (9 + 9)
    with pytest.raises(ValueError, match="df_resid"):
        reg.partial_r2_from_t(2.0, 0)


def test_fe_regression_partial_r2_is_t2_over_t2_plus_df_on_the_paper_design():
    # The paper's design: 4 models x 7 tasks x 5 wrappers = 140 cells; intercept + P + 3 + 6 + 4 dummies
    # = 15 coefficients -> df_resid = 125. A = 0.819 P + effects + e with e orthogonal to the design
    # (so beta-hat = 0.819 exactly) and scaled so that SE(beta) = 0.034 (so t = 0.819 / 0.034).
    rng = np.random.default_rng(8)
    models, tasks = [f"m{i}" for i in range(4)], [f"t{j}" for j in range(7)]
    cells = pd.DataFrame([dict(model_id=m, task=t, wrapper=w) for m in models for t in tasks for w in ws.WRAPPER_ORDER])
    cells["parseability_pct"] = rng.uniform(20, 80, len(cells))
    cells["n"] = 100  # equal weights: WLS = OLS
    cells["n_call_errors"] = 0
    X = np.column_stack(
        [np.ones(len(cells)), cells["parseability_pct"]]
        + [(cells["model_id"] == m).astype(float) for m in models[1:]]
        + [(cells["task"] == t).astype(float) for t in tasks[1:]]
        + [(cells["wrapper"] == w).astype(float) for w in ws.WRAPPER_ORDER[1:]]
    )
    assert X.shape == (140, 15)
    e = rng.normal(size=140)
    e -= X @ np.linalg.lstsq(X, e, rcond=None)[0]  # residual of e on the design: orthogonal to every column
    xtx_pp = np.linalg.inv(X.T @ X)[1, 1]
    e *= 0.034 / math.sqrt(float(e @ e) / 125 * xtx_pp)  # SE(beta) = sqrt(sigma² [(X'X)^-1]_PP) = 0.034
    effects = X[:, 2:] @ rng.uniform(-5, 5, 13)
    cells["accuracy_pct"] = 10.0 + 0.819 * cells["parseability_pct"] + effects + e
    r = reg.fixed_effects_regression(cells).iloc[0]
    assert (r["n_cells"], r["n_params"], r["df_resid"]) == (140, 15, 125)
    assert r["beta"] == pytest.approx(0.819, abs=1e-10) and r["se"] == pytest.approx(0.034, abs=1e-10)
    assert r["t_value"] == pytest.approx(0.819 / 0.034, rel=1e-9)
    assert r["partial_r2"] == pytest.approx(reg.partial_r2_from_t(r["t_value"], r["df_resid"]), abs=1e-10)
    assert r["partial_r2"] == pytest.approx(0.8227561, abs=1e-7) and round(r["partial_r2"], 2) == 0.82


# --------------------------------------------------------------------------- call errors


def with_errors(rows, failed):
    """``rows`` (from :func:`gens`) with the generations of ``failed`` {(wrapper, item_id, seed)} turned into call
    errors: no reply (unparseable, not correct, no finish_reason), reason call_error."""
    out = []
    for r in rows:
        if (r["wrapper"], r["item_id"], r["seed"]) in failed:
            r = dict(r, parseable=False, correct=False, finish_reason=None, reason="call_error")
        out.append(r)
    return out


def call_error_frame() -> pd.DataFrame:
    # m / t (boolean), 4 items, 1 seed, every reply parseable:
    #   plain      replies i1 T, i2 T, i3 T, i4 F; the call of i4 failed      -> A = 3/3 = 100 on 3 replies
    #   json       replies i1 T, i2 F, i3 F, i4 F; the call of i2 failed      -> A = 1/3 on 3 replies
    #   deliberate every call failed                                          -> not measurable
    # m / u (boolean): plain i1 T, i2 F; json i1 F, i2 F; the json call of i2 failed
    #   unpaired cells: plain 1/2 = 50, json 0/1 = 0; paired (i2 left out of both): plain 1/1, json 0/1 -> FSI 100
    rows = gens("m", "t", "boolean", "plain", [T] * 4, [T, T, T, F])
    rows += gens("m", "t", "boolean", "json", [T] * 4, [T, F, F, F])
    rows += gens("m", "t", "boolean", "deliberate", [T] * 4, [T] * 4)
    rows += gens("m", "u", "boolean", "plain", [T, T], [T, F])
    rows += gens("m", "u", "boolean", "json", [T, T], [F, F])
    failed = {("plain", "i4", 0), ("json", "i2", 0), ("json", "i2", 0)} | {
        ("deliberate", f"i{i}", 0) for i in range(1, 5)
    }
    out = pd.DataFrame(with_errors(rows, failed))
    # task u's failed json call of i2 (gens names items i1, i2 per task)
    return out


def test_cells_leave_call_errors_out_of_every_count():
    c = ws.cell_metrics(call_error_frame()).set_index(["task", "wrapper"])
    plain = c.loc[("t", "plain")]
    assert (plain["n"], plain["n_correct"], plain["n_parseable"], plain["n_items"], plain["n_call_errors"]) == (
        3,
        3,
        3,
        3,
        1,
    )
    assert (plain["accuracy_pct"], plain["parseability_pct"], plain["truncation_rate_pct"]) == (100.0, 100.0, 0.0)
    assert plain["not_measurable"] is None
    js = c.loc[("t", "json")]
    assert (js["n"], js["n_correct"], js["n_call_errors"]) == (3, 1, 1)
    assert js["accuracy_pct"] == pytest.approx(100 / 3)
    dl = c.loc[("t", "deliberate")]
    assert (dl["n"], dl["n_correct"], dl["n_items"], dl["n_call_errors"]) == (0, 0, 0, 4)
    assert all(math.isnan(dl[k]) for k in ("accuracy_pct", "parseability_pct", "acc_given_parse_pct", "chance_pct"))
    assert dl["not_measurable"] == "not measurable: every call failed (4 of 4)"
    # a cell whose replies all failed to parse: A = 0 is measured, Acc|parse is not
    none = ws.cell_metrics(pd.DataFrame(gens("m", "t", "boolean", "plain", [F, F], [F, F]))).iloc[0]
    assert none["accuracy_pct"] == 0.0 and math.isnan(none["acc_given_parse_pct"])
    assert none["not_measurable"] == "not measurable: no reply parsed (2 of 2 unparseable)"


def test_fsi_compares_wrappers_on_the_items_answered_under_every_wrapper():
    # task u: i2's json call failed, so i2 leaves plain's paired cell too: plain 1/1 = 100, json 0/1 = 0
    rows = gens("m", "u", "boolean", "plain", [T, T], [T, F]) + gens("m", "u", "boolean", "json", [T, T], [F, F])
    scored = pd.DataFrame(with_errors(rows, {("json", "i2", 0)}))
    paired = ws.cell_metrics(scored, paired=True).set_index("wrapper")
    assert paired.loc["plain", ["n", "n_correct", "n_unpaired", "n_call_errors"]].tolist() == [1, 1, 1, 0]
    assert paired.loc["json", ["n", "n_correct", "n_unpaired", "n_call_errors"]].tolist() == [1, 0, 0, 1]
    f = ws.fsi_psi(ws.cell_metrics(scored, paired=True)).iloc[0]
    assert (f["fsi_pp"], f["psi_pp"], f["n_call_errors"], f["n_generations"]) == (100.0, 0.0, 1, 4)
    assert f["not_measurable"] is None and (f["best_wrapper"], f["worst_wrapper"]) == ("plain", "json")


def test_fsi_of_a_task_whose_every_call_failed_is_not_measurable_and_left_out_of_the_mean():
    scored = call_error_frame()
    f = ws.fsi_psi(ws.cell_metrics(scored, paired=True)).set_index("task")
    # t: deliberate failed on every item, so no item is answered under every wrapper
    t = f.loc["t"]
    assert math.isnan(t["fsi"]) and math.isnan(t["psi"]) and math.isnan(t["mean_accuracy_pct"])
    assert (t["n_call_errors"], t["n_generations"]) == (6, 12)
    assert t["not_measurable"] == "not measurable: every call of wrapper 'deliberate' failed (4 of 4)"
    assert pd.isna(t["best_wrapper"])
    allfail = pd.DataFrame(
        with_errors(
            gens("m", "t", "boolean", "plain", [T, T], [T, T]) + gens("m", "t", "boolean", "json", [T, T], [T, F]),
            {(w, i, 0) for w in ("plain", "json") for i in ("i1", "i2")},
        )
    )
    a = ws.fsi_psi(ws.cell_metrics(allfail, paired=True)).iloc[0]
    assert math.isnan(a["fsi"]) and a["not_measurable"] == "not measurable: every call failed (4 of 4)"
    mean = ws.mean_indices(ws.fsi_psi(ws.cell_metrics(allfail, paired=True)), n_resamples=100)
    assert mean["mean"].isna().all() and set(mean["n_call_errors"]) == {4}
    assert set(mean["not_measurable"]) == {"not measurable: every call failed (4 of 4)"}
    # one measurable task of two: the mean is that task's, the failed calls of both counted
    both = ws.mean_indices(ws.fsi_psi(ws.cell_metrics(scored, paired=True)), n_resamples=100)
    fsi = _row(both, index="FSI")
    assert (fsi["mean"], fsi["n_tasks"], fsi["n_undefined"], fsi["n_call_errors"]) == (100.0, 1, 1, 7)
    assert fsi["not_measurable"] is None


def test_decomposition_and_wins_skip_a_combination_with_no_reply():
    scored = call_error_frame()
    cells = ws.cell_metrics(scored, paired=True)
    d = diag.decomposition(cells).set_index("task")
    assert math.isnan(d.loc["t", "fsi_pp"]) and d.loc["t", "n_call_errors"] == 6
    assert d.loc["t", "not_measurable"] == "not measurable: every call of wrapper 'deliberate' failed (4 of 4)"
    assert d.loc["u", "fsi_pp"] == 100.0 and d.loc["u", "n_call_errors"] == 1 and d.loc["u", "not_measurable"] is None
    w = diag.win_counts(cells).set_index("wrapper")
    # only task u is compared: plain wins it
    assert w.loc["plain", ["wins", "n_combinations", "n_call_errors"]].tolist() == [1, 1, 1]
    assert w.loc["json", ["wins", "n_combinations", "n_call_errors"]].tolist() == [0, 1, 2]
    assert w.loc["deliberate", ["wins", "n_combinations", "n_call_errors"]].tolist() == [0, 0, 4]


def test_item_level_model_leaves_call_errors_out():
    s = clustered_scored()
    first = s.index[:7]
    s.loc[first, ["parseable", "correct", "reason"]] = [False, False, "call_error"]
    out = reg.item_level_model(s)
    assert set(out["n_obs"]) == {len(s) - 7} and set(out["n_call_errors"]) == {7}
    ref = reg.item_level_model(clustered_scored().drop(index=first))
    assert out["coef"].tolist() == pytest.approx(ref["coef"].tolist(), rel=1e-12)
    with pytest.raises(
        ValueError, match=r"no reply in mode 'paper' \(not measurable: every call failed \(720 of 720\)\)"
    ):
        reg.item_level_model(s.assign(parseable=False, correct=False, reason="call_error"))
