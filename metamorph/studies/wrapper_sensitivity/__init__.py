"""Prompt-wrapper sensitivity ("Format Sensitivity Index", arXiv 2607.09665): five wrapper
families with token-controlled padding, parseability, FSI and PSI.

Data path: ``tasks`` (QA items) → ``wrappers`` (the five families, padded to equal token
counts) → ``plan`` (requests, budget check, scored rows) → ``extract`` (strict / normalized /
lenient answer extraction) → ``metrics`` (cells, FSI/PSI/nFSI, regressions, decomposition);
``schemas`` for every table.
"""

__all__: list[str] = []
