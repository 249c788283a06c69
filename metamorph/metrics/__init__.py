"""Metrics of metamorph studies.

Each submodule turns a study's generations frame into tabular metrics (pandas DataFrames
validated by the pandera schemas in :mod:`metamorph.schemas`). Generic statistics
(bootstrap intervals, Cochran's Q, McNemar/Holm, Jaccard, Jensen–Shannon) live in
:mod:`metamorph.stats` so every study shares one implementation.

* :mod:`metamorph.metrics.format_robustness` — the document-format study ("Not as Sweet by
  Another Name", ASE '26): MR1/MR2/MR3 flags and violation rates M1/M2/M3, Acc_f, Stb_f,
  evidence drift (JS, ΔAcc, flip rate), Sen_f(g)/FDS_f(g), silent violations, significance
  tests, and the §5.5 mitigations (vote aggregation, format routing).
"""
