"""WorkflowPerturb scoring throughput: one encoder pass per distinct text vs the two-pass path.

    nice -n 10 .venv/bin/python benchmarks/workflow_scoring.py [--n 1000]
    nice -n 10 .venv/bin/python benchmarks/workflow_scoring.py --paper-scale   # 44,757 variants, one_pass

The first ``n`` deterministic variants of the shared WorFBench sample (300 goldens × 3 types ×
3 severities) are scored with :func:`metamorph.studies.workflow_perturb.plan.score_perturbations`
(what the ``perturbation_scores`` asset calls, on the asset's encoder: all-mpnet-base-v2 when
installed, else MiniLM), in separate child processes so that each has its own peak RSS:

* ``two_pass`` — the encoder without ``encode_with_tokens``: sentence-transformers embeds every
  text for the alignment and ``bert_score.BERTScorer`` loads its own copy of the weights and
  embeds the BERTScore texts again (the earlier path);
* ``one_pass`` — :meth:`Encoder.encode_with_tokens`: one forward pass per distinct text gives
  the sentence vector and BERTScore's token vectors.

Each child first warms up (imports, model, baseline table) on two variants, then times the
encoder alone over the distinct texts (``encoder s``) and the scoring. Prints variants/s, the
ratio scoring ÷ encoder-only in wall and in CPU time (all threads; the comparable number on a busy
machine) (target: ≤ 2), peak RSS, the encoding counts and an extrapolation
to the paper's 44,757 variants (time linear in variants; RSS as measured plus the sentence
vectors kept for the extra distinct texts). A measurement: nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from _machine import load_line

PAPER_VARIANTS = 44_757
SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "worfbench" / "sample.jsonl"


class TwoPass:
    """The encoder without ``encode_with_tokens``: BERTScore then runs bert_score's own model."""

    def __init__(self, encoder):
        self._enc, self.info, self.name = encoder, encoder.info, encoder.name

    def encode(self, texts):
        return self._enc.encode(texts)


def replicated(goldens: list, n: int) -> list:
    """The goldens, plus as many distinct copies as ``n`` variants need (9 per golden): copy r of a
    golden has the id ``<id>#r<r>`` and every step text ends in `` (case r)``, so its texts are new
    to the encoder (a copy with the same texts would be served from the per-text cache and measure
    nothing). For the paper's 44,757 variants: the sample's 300 goldens and 16 copies (45,900 variants, the
    first 44,757 scored)."""
    import dataclasses

    out, r = list(goldens), 0
    while 9 * len(out) < n:
        r += 1
        out += [
            dataclasses.replace(w, workflow_id=f"{w.workflow_id}#r{r}", nodes=tuple(f"{t} (case {r})" for t in w.nodes))
            for w in goldens
        ]
    return out


def child(mode: str, n: int) -> dict:
    import pandas as pd

    from metamorph.embeddings import load_encoder
    from metamorph.studies.workflow_perturb import plan as wst
    from metamorph.studies.workflow_perturb.metrics import EncodingCounts
    from metamorph.studies.workflow_perturb.metrics.lexical import _cached_tokens
    from metamorph.studies.workflow_perturb.workflows import load_goldens

    valid, _ = load_goldens(f"worfbench:{SAMPLE}")
    valid = replicated(valid, n)
    gold = {w.workflow_id: w for w in valid}
    variants = pd.DataFrame(
        [{**p.to_row(), "model_id": "deterministic"} for p in wst.deterministic_perturbations(valid)]
    ).head(n)
    enc = load_encoder()  # what EncoderResource loads: mpnet, else MiniLM
    scorer = enc if mode == "one_pass" else TwoPass(enc)
    wst.score_perturbations(gold, variants.tail(2), scorer)  # warm-up: imports, weights, baseline
    _cached_tokens.cache_clear()
    texts = sorted({t for r in variants.itertuples() for t in (*gold[r.golden_id].nodes, *json.loads(r.nodes_json))})
    t0, c0 = time.perf_counter(), time.process_time()
    enc.encode(texts)
    encoder_s, encoder_cpu = time.perf_counter() - t0, time.process_time() - c0
    counts = EncodingCounts()
    t0, c0 = time.perf_counter(), time.process_time()
    out = wst.score_perturbations(gold, variants, scorer, counts=counts)
    score_s, score_cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "mode": mode,
        "encoder": enc.name,
        "variants": len(out),
        "distinct_texts": len(texts),
        "encoded_texts": counts.encoded_texts,
        "bertscore_extra_texts": counts.bertscore_extra_texts,
        "encoder_s": encoder_s,
        "score_s": score_s,
        "encoder_cpu_s": encoder_cpu,
        "score_cpu_s": score_cpu,
        "dim": int(enc.encode(["x"]).shape[1]),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--n",
        type=int,
        default=1000,
        help="variants to score (the sample has 2,700; beyond, its goldens are copied with new texts)",
    )
    ap.add_argument(
        "--paper-scale",
        action="store_true",
        help=f"--n {PAPER_VARIANTS} and the one_pass path only (two_pass would take ~35 min more)",
    )
    ap.add_argument("--child", choices=["two_pass", "one_pass"])
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n)))
        return
    env = {
        **os.environ,
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    if args.paper_scale:
        args.n = PAPER_VARIANTS
    res = {}
    for mode in ("one_pass",) if args.paper_scale else ("two_pass", "one_pass"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--n", str(args.n)], env=env, capture_output=True, text=True
        )
        if out.returncode:
            raise RuntimeError(out.stderr[-4000:])
        res[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(load_line(), flush=True)
    a = res["one_pass"]
    print(f"{a['variants']} WorFBench variants, {a['distinct_texts']} distinct step texts, encoder {a['encoder']}")
    print(
        f"{'path':<9} {'variants/s':>10} {'score s':>8} {'encoder s':>9} {'score/encoder':>13} "
        f"{'cpu ratio':>9} {'texts encoded':>13} {'+bert_score':>11} {'peak MB':>8}"
    )
    for mode, r in res.items():
        print(
            f"{mode:<9} {r['variants'] / r['score_s']:>10.1f} {r['score_s']:>8.1f} {r['encoder_s']:>9.1f} "
            f"{r['score_s'] / r['encoder_s']:>13.2f} {r['score_cpu_s'] / r['encoder_cpu_s']:>9.2f} "
            f"{r['encoded_texts']:>13} {r['bertscore_extra_texts']:>11} "
            f"{r['peak_rss_mb']:>8.0f}"
        )
    if "two_pass" not in res:
        print(
            f"measured at {a['variants']:,} variants: one_pass {a['score_s'] / 60:.1f} min, score/encoder "
            f"{a['score_s'] / a['encoder_s']:.2f} wall, {a['score_cpu_s'] / a['encoder_cpu_s']:.2f} cpu "
            f"(target <= 2), peak RSS {a['peak_rss_mb']:.0f} MB"
        )
        return
    b = res["two_pass"]
    wall, cpu = a["score_s"] / a["encoder_s"], a["score_cpu_s"] / a["encoder_cpu_s"]
    print(
        f"speed-up one_pass vs two_pass: {b['score_s'] / a['score_s']:.2f}x wall, "
        f"{b['score_cpu_s'] / a['score_cpu_s']:.2f}x cpu (target one_pass score/encoder <= 2: wall "
        f"{'met' if wall <= 2 else 'NOT met'}, cpu {'met' if cpu <= 2 else 'NOT met'})"
    )
    scale = PAPER_VARIANTS / a["variants"]
    extra_mb = (scale - 1) * a["distinct_texts"] * a["dim"] * 4 / 2**20
    print(
        f"extrapolated to {PAPER_VARIANTS:,} variants (x{scale:.1f}): ~{a['distinct_texts'] * scale:,.0f} distinct "
        f"texts, one_pass {a['score_s'] * scale / 60:.1f} min (two_pass {b['score_s'] * scale / 60:.1f} min), "
        f"peak RSS ~{a['peak_rss_mb'] + extra_mb:.0f} MB (measured {a['peak_rss_mb']:.0f} MB + {extra_mb:.0f} MB of "
        "cached sentence vectors; token vectors are held per chunk of 1,000 pairs)"
    )


if __name__ == "__main__":
    main()
