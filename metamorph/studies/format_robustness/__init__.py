"""Document-format robustness ("Not as Sweet by Another Name", ASE '26): one record rendered as
TXT/MD/JSON/CSV; metamorphic relations MR1 (decision), MR2 (evidence), MR3 (stability).

Data path: ``sources`` (dataset adapters → :class:`records.SourceInstance`) → ``renderers``
(the four formats) → ``plan`` (requests through the generation cache) → ``extract`` (decision
and evidence) → ``evidence`` (evidence categories from per-dataset lexicons) → ``metrics``
(M1/M2/M3, Acc_f, Stb_f, drift, FDS, tests, mitigations); ``schemas`` for every table,
``vocab`` for the study's names.
"""

__all__: list[str] = []
