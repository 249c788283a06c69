"""WorkflowPerturb ("Calibrated Stress Tests for Evaluating Multi-Agent Workflow Metrics",
arXiv 2602.17990): missing / compressed / paraphrased steps at 10/30/50%.

Data path: ``workflows`` (goldens and their loaders) → ``perturb`` (deterministic and LLM
perturbation operators) → ``plan`` (variant and score rows) → ``metrics`` (Chain F1, Graph F1,
BLEU, GLEU, BERTScore, Kendall τ) and ``judge`` (LLM judge) → ``analysis`` (severity,
sensitivity, strata, recalibration, firing tables) → ``gate`` (calibrated CI gates);
``schemas`` for every table, ``vocab`` for the study's names.
"""

__all__: list[str] = []
