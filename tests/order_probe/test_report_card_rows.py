"""OrderProbe's report-card rows: recovery pooled over languages, one row per model × setting."""

import math

import pandas as pd

from metamorph.report_card import CARD_ROW_COLUMNS
from metamorph.studies.order_probe.report import card_rows


def test_card_rows_take_the_pooled_language_rows_only():
    rates = pd.DataFrame(
        {
            "model_id": ["m", "m", "m"],
            "language": ["all", "zh_cn", "all"],
            "setting": ["zero_shot", "zero_shot", "cot"],
            "n_items": [10, 10, 1],
            "n_inputs": [230, 230, 23],
            "n_correct": [46, 46, 23],
            "recovery_pct": [20.0, 20.0, 100.0],
            "ci_low_pct": [12.5, 12.5, math.nan],
            "ci_high_pct": [28.0, 28.0, math.nan],
            "ci_note": [None, None, "one canonical expression: no bootstrap interval"],
        }
    )
    rows = card_rows(rates)
    assert list(rows.columns) == CARD_ROW_COLUMNS
    assert rows[
        ["model_id", "study", "metric", "slice", "unit", "value", "ci_low", "n", "higher_is_better"]
    ].values.tolist()[0] == ["m", "order_probe", "recovery", "setting=zero_shot", "%", 20.0, 12.5, 10, True]
    assert rows["slice"].tolist() == ["setting=zero_shot", "setting=cot"] and math.isnan(rows.loc[1, "ci_low"])
