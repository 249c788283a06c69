"""The report card's trend plot (assets.plots.report_card_trends_figure) on the figure itself: one
x tick per registry version, at whole version ordinals (1 = the oldest), whatever the number of
versions — one version gave matplotlib's automatic ticks at -0.04 … 0.04."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from assets.plots import report_card_trends_figure


def points(model, versions, values):
    return [
        {
            "model_id": model,
            "study": "format_robustness",
            "metric": "accuracy",
            "slice": "all",
            "unit": "%",
            "version": v,
            "recorded_at": pd.Timestamp("2026-12-01") + pd.Timedelta(days=i),
            "value": x,
            "ci_low": x - 5.0,
            "ci_high": x + 5.0,
            "is_current": i == len(versions) - 1,
        }
        for i, (v, x) in enumerate(zip(versions, values))
    ]


def drawn(series):
    fig = report_card_trends_figure(pd.DataFrame(series))
    try:
        [ax] = [a for a in fig.axes if a.axison]
        fig.canvas.draw()
        ticks = (list(ax.get_xticks()), [t.get_text() for t in ax.get_xticklabels()])
        lines = {c.get_label(): [int(x) for x in c.lines[0].get_xdata()] for c in ax.containers}
        return ticks, lines, ax.get_xlim()
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("series", "ticks", "lines", "xlim"),
    [
        # one version of one model: one tick, at 1
        (points("base", ["a1b2c3d4e5f6"], [75.0]), ([1.0], ["1"]), {"base": [1]}, (0.5, 1.5)),
        # the candidate's two versions and the baseline's one: ticks 1 and 2, each model from 1
        (
            points("cand", ["a1b2c3d4e5f6", "0f9e8d7c6b5a"], [68.75, 50.0]) + points("base", ["99aa88bb77cc"], [75.0]),
            ([1.0, 2.0], ["1", "2"]),
            {"base": [1], "cand": [1, 2]},
            (0.5, 2.5),
        ),
    ],
)
def test_one_tick_per_version_at_whole_ordinals(series, ticks, lines, xlim):
    assert drawn(series) == (ticks, lines, xlim)


def test_nothing_to_plot_is_no_figure():
    assert report_card_trends_figure(pd.DataFrame(points("base", ["a1"], [float("nan")]))) is None
