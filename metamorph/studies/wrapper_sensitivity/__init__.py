"""Prompt-wrapper sensitivity ("Format Sensitivity Index", arXiv 2607.09665): five wrapper
families with token-controlled padding, parseability, FSI and PSI.

Data path: ``tasks`` (QA items) → ``wrappers`` (the five families, padded to equal token
counts) → ``plan`` (requests, budget check, scored rows) → ``extract`` (paper / strict /
normalized / lenient answer extraction over ``answers``, ``slots``, ``lenient`` and ``paper``) →
``metrics`` (cells, FSI/PSI/nFSI, regressions, decomposition); ``schemas`` for every table,
``vocab`` for the study's names (families, modes, answer types, indices).
"""

__all__: list[str] = []
