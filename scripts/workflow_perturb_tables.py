"""Severity table (Tables 2–4) and sensitivity matrix Δ_avg (Table 5) of the WorkflowPerturb
study with the deterministic operators, no LLM.

    python scripts/workflow_perturb_tables.py GOLDENS.jsonl [OUT_DIR]

Every golden × {missing, compressed, description} × {0.1, 0.3, 0.5} with
``plan.deterministic_perturbations`` (seed 0), scored with ``plan.score_perturbations`` (MiniLM;
every default of ``metrics.score_workflows``: App. B.2 Graph F1, gold-order Kendall τ, B.3 BLEU/GLEU,
rescaled BERTScore), then ``analysis.severity_table`` / ``analysis.sensitivity_matrix``. The judge
is not run (its row is null). Prints both as markdown (means rounded to 3 decimals) and, with
OUT_DIR, writes ``scores.csv``, ``severity.csv`` and ``sensitivity.csv`` there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from metamorph.embeddings import load_encoder
from metamorph.export import write_csv
from metamorph.studies.workflow_perturb import analysis as wp
from metamorph.studies.workflow_perturb.plan import deterministic_perturbations, score_perturbations
from metamorph.studies.workflow_perturb.workflows import load_goldens, size_stratum


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    goldens, rejected = load_goldens(argv[0], on_invalid="collect")
    print(f"{len(goldens)} goldens ({len(rejected)} rejected)")
    perts = deterministic_perturbations(goldens)
    variants = pd.DataFrame([p.to_row() for p in perts])
    by_id = {w.workflow_id: w for w in goldens}
    scores = score_perturbations(by_id, variants, load_encoder(prefer="minilm"))
    frame = scores.merge(variants[["variant_id", "type", "p", "status", "operator", "target_score"]], on="variant_id")
    frame = frame.rename(columns={"p": "severity"})
    frame["n_nodes"] = [by_id[g].n_nodes for g in frame["golden_id"]]
    frame["stratum"] = [size_stratum(n) for n in frame["n_nodes"]]
    frame["judge"] = float("nan")
    sev = wp.severity_table(frame)
    sens = wp.sensitivity_matrix(frame)
    wide = sev.pivot_table(index="metric", columns=["type", "severity"], values="mean", sort=False).round(3)
    print(wide.to_markdown())
    print(sens.pivot_table(index="metric", columns="type", values="delta_avg", sort=False).round(3).to_markdown())
    if len(argv) > 1:
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for name, table in (("scores", frame), ("severity", sev), ("sensitivity", sens)):
            write_csv(table, out / f"{name}.csv")  # text cells formula-safe (metamorph.export)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
