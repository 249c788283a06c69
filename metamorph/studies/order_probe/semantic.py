"""Diagnostic scores of OrderProbe's explanations (paper §4.2 and Table 2; release notes §3–6
and their corrections).

Per generation (:func:`semantic_scores`), the explanation ``e`` against the item's reference
meanings ``r_1..r_m`` (split only on the release's ``||``; nothing is scored when m = 0, e.g.
every Japanese item of the release — the reason is recorded):

* **S_Acc** — fusion of the release's components with its weights, each aggregated by the max
  over references: cross-encoder 0.5 (a logit through ONE sigmoid), representation ensemble 0.3
  (mean of sentence-embedding cosine and BERTScore F1 that are available), content F-β 0.2.
  Model components are used only when a suitable local model is configured; the weights are
  renormalized over the components actually used (so with no model S_Acc = F-β), and every row
  records the components (``s_acc_components``). Content F-β: β = 2 on token *sets* — character
  tokens for zh/ja, whitespace word tokens for ko — minus :data:`STOP_TOKENS`;
  F = (1+β²)PR/(β²P+R), 0 when nothing overlaps.
* **S_Logic** — NLI entailment probability with the explanation as *premise* and each
  reference as *hypothesis* (the paper's P(e ⇒ r); the release has it reversed), max over
  references; null with the reason when no local NLI model is configured — never 0.
* **S_Info** — ROUGE-L precision (LCS / |e|, language tokens as above but without stop-token
  removal) times a verbosity penalty VP = 1 if |e| ≤ |r| else exp(1 − |e|/|r|) (long
  explanations are penalized, concise ones are not — the release's BLEU brevity penalty did the
  opposite); max over references of the product.

Per model × language × setting (:func:`diagnostics`), from the scrambled inputs' S_Acc:

* **S_Cons** = mean over items of (1 − E_i)(1 − R_i), E_i = mean over the item's permutations of
  (max − score), R_i = max − min (per item; the release mixed items and runs).
* **MDR / MDA** — S_orig is the S_Acc of the model's own reply to the unperturbed input (never a
  random number). For each permutation p, d_p = mean over items of (S_orig − S_p)/S_orig
  (items with S_orig = 0 are excluded and counted); MDR = mean_p d_p, MDA = max_p d_p (the
  paper's "maximum over permutations" of the relative drop). S_seq = 1 − (0.5·MDR + 0.5·MDA)
  (may exceed 1 when scrambled inputs score higher than the unperturbed one).
* **S_struct** = clip(1 − σ/μ̄, 0, 1) where σ is the population standard deviation of the
  per-structure means μ_k of per-item mean scores and μ̄ their mean (a coefficient of variation;
  the release's σ/range always lay in [0.5, 1]); 1 when all μ_k are equal; null with fewer than
  two structures.
* **S_Rob** = harmonic mean of clip(S_seq, 0, 1) and S_struct (0 when both are 0).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from metamorph.measurability import CALL_ERROR, every_call_failed, no_reply_parsed
from metamorph.schemas import require_columns
from metamorph.studies.order_probe.sources import OrderItem

__all__ = [
    "BETA",
    "CALL_ERROR_NOTE",
    "FLOOR",
    "NO_EXPLANATION_NOTE",
    "NO_NLI",
    "STOP_TOKENS",
    "WEIGHTS",
    "Scorers",
    "content_fbeta",
    "diagnostics",
    "harmonic",
    "lang_tokens",
    "load_scorers",
    "mdr_mda",
    "rouge_l_precision",
    "s_cons",
    "s_info",
    "s_struct",
    "score_explanation",
    "semantic_scores",
    "sigmoid",
    "verbosity_penalty",
]

BETA = 2.0
#: below this maximum S_Acc, S_Cons and S_struct are flagged as degenerate in the note
FLOOR = 0.05
#: ``semantic_scores.note`` of a generation whose call failed (no reply, no score)
CALL_ERROR_NOTE = "call error: no reply"
#: ``semantic_scores.note`` of a reply from which no explanation was parsed
NO_EXPLANATION_NOTE = "no explanation parsed"
WEIGHTS = {"cross_encoder": 0.5, "representation": 0.3, "fbeta": 0.2}
#: function tokens removed before content F-β (characters for zh/ja, words for ko)
STOP_TOKENS = {
    "zh_cn": set("的地得了着是在和与及或也都就而之其这那个"),
    "zh_tw": set("的地得了著是在和與及或也都就而之其這那個"),
    "ja": set("のはがをにへとでもやかなだ"),
    "ko": {"것", "수", "등", "및", "그", "이", "저", "또는", "그리고"},
}


def lang_tokens(text: str, language: str) -> list[str]:
    """Language-appropriate tokens of ``text`` (NFKC): for zh/ja every letter or digit character
    (punctuation, symbols and whitespace dropped); for ko whitespace-separated words with
    punctuation stripped."""
    text = unicodedata.normalize("NFKC", text or "")
    keep = lambda ch: unicodedata.category(ch)[0] in ("L", "N")  # noqa: E731
    if language == "ko":
        words = ["".join(c for c in w if keep(c)) for w in text.split()]
        return [w for w in words if w]
    return [c for c in text if keep(c)]


def content_fbeta(pred: str, ref: str, language: str, beta: float = BETA) -> float:
    """Content F-β on token sets (module doc). 0 for an empty prediction; in [0, 1]."""
    stop = STOP_TOKENS.get(language, set())
    p = {t for t in lang_tokens(pred, language) if t not in stop}
    r = {t for t in lang_tokens(ref, language) if t not in stop}
    overlap = len(p & r)
    if not p or not r or overlap == 0:
        return 0.0
    prec, rec = overlap / len(p), overlap / len(r)
    return (1 + beta**2) * prec * rec / (beta**2 * prec + rec)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l_precision(pred: str, ref: str, language: str) -> float:
    """LCS(pred, ref) / |pred| over language tokens; 0 for an empty prediction."""
    p, r = lang_tokens(pred, language), lang_tokens(ref, language)
    return _lcs(p, r) / len(p) if p and r else 0.0


def verbosity_penalty(pred_len: int, ref_len: int) -> float:
    """1 when the explanation is no longer than the reference, else exp(1 − c/r) (c, r in tokens)."""
    if ref_len <= 0:
        raise ValueError("verbosity_penalty: reference length must be >= 1")
    return 1.0 if pred_len <= ref_len else math.exp(1 - pred_len / ref_len)


def s_info(pred: str, refs: Sequence[str], language: str) -> tuple[float, float, float]:
    """``(S_Info, P_ROUGE-L, VP)`` of the best reference (max of P·VP over references)."""
    best = (0.0, 0.0, 1.0)
    c = len(lang_tokens(pred, language))
    for ref in refs:
        r = len(lang_tokens(ref, language))
        if r == 0:
            continue
        p, vp = rouge_l_precision(pred, ref, language), verbosity_penalty(c, r)
        if p * vp > best[0] or best == (0.0, 0.0, 1.0):
            best = (p * vp, p, vp)
    return best


def sigmoid(x: float) -> float:
    """The logistic function, applied once to a cross-encoder logit."""
    return 1.0 / (1.0 + math.exp(-x))


@dataclass
class Scorers:
    """The model-based components available (each ``None`` when not configured).

    ``cross_encoder(pairs) -> logits`` for (explanation, reference) pairs; ``embedding(a, b) ->
    cosine``; ``bertscore(cands, refs) -> F1s``; ``nli(premise, hypothesis) -> P(entailment)``.
    """

    cross_encoder: Callable[[list[tuple[str, str]]], list[float]] | None = None
    embedding: Callable[[str, str], float] | None = None
    bertscore: Callable[[list[str], list[str]], list[float]] | None = None
    nli: Callable[[str, str], float] | None = None
    names: dict[str, str] = field(default_factory=dict)

    def s_acc_components(self) -> str:
        used = ["fbeta(beta=2; char tokens zh/ja, word tokens ko)"]
        for k in ("cross_encoder", "embedding", "bertscore"):
            if getattr(self, k) is not None:
                used.append(f"{k}({self.names.get(k, '?')})")
        w = self.weights()
        return "; ".join(used) + " | weights " + ", ".join(f"{k}={v:.3g}" for k, v in w.items())

    def weights(self) -> dict[str, float]:
        w = {"fbeta": WEIGHTS["fbeta"]}
        if self.cross_encoder is not None:
            w["cross_encoder"] = WEIGHTS["cross_encoder"]
        if self.embedding is not None or self.bertscore is not None:
            w["representation"] = WEIGHTS["representation"]
        total = sum(w.values())
        return {k: v / total for k, v in w.items()}

    def describe(self) -> str:
        nli = f"nli({self.names['nli']})" if self.nli is not None else "S_Logic: no local NLI model configured"
        return f"S_Acc: {self.s_acc_components()}; {nli}"


NO_NLI = "no local NLI model configured (S_Logic needs one; not computed)"


def load_scorers(
    cross_encoder_path: str | None = None,
    embedding_model_path: str | None = None,
    nli_model_path: str | None = None,
    bertscore_model_path: str | None = None,
    bertscore_num_layers: int | None = None,
) -> Scorers:
    """Scorers from local model directories (nothing is downloaded; ``HF_HUB_OFFLINE``). A path
    that does not load raises ``ValueError`` naming it — a configured component never silently
    becomes 0. ``None`` leaves the component out. BERTScore needs ``bertscore_num_layers`` with
    its path (bert-score's own table only knows hub names); F1, no IDF, no baseline rescaling."""
    s = Scorers()
    if bertscore_model_path and not bertscore_num_layers:
        raise ValueError("bertscore_model_path needs bertscore_num_layers (e.g. 8 for bert-base-chinese)")
    try:
        if bertscore_model_path:
            from bert_score import BERTScorer

            bs = BERTScorer(model_type=bertscore_model_path, num_layers=bertscore_num_layers, lang=None)
            s.bertscore = lambda cands, refs: [float(v) for v in bs.score(cands, refs)[2]]
            s.names["bertscore"] = bertscore_model_path
        if cross_encoder_path:
            from sentence_transformers import CrossEncoder
            import torch

            ce = CrossEncoder(cross_encoder_path, local_files_only=True)
            s.cross_encoder = lambda pairs: [float(v) for v in ce.predict(pairs, activation_fn=torch.nn.Identity())]
            s.names["cross_encoder"] = cross_encoder_path
        if embedding_model_path:
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(embedding_model_path, local_files_only=True)

            def cos(a: str, b: str) -> float:
                va, vb = st.encode([a, b], normalize_embeddings=True)
                return float(np.dot(va, vb))

            s.embedding = cos
            s.names["embedding"] = embedding_model_path
        if nli_model_path:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            tok = AutoTokenizer.from_pretrained(nli_model_path, local_files_only=True)
            mdl = AutoModelForSequenceClassification.from_pretrained(nli_model_path, local_files_only=True).eval()
            ent = {v.lower(): k for k, v in mdl.config.id2label.items()}.get("entailment")
            if ent is None:
                raise ValueError(f"{nli_model_path}: the model has no 'entailment' label ({mdl.config.id2label})")

            def nli(premise: str, hypothesis: str) -> float:
                with torch.no_grad():
                    enc = tok(premise, hypothesis, truncation=True, max_length=512, return_tensors="pt")
                    return float(torch.softmax(mdl(**enc).logits[0], -1)[ent])

            s.nli = nli
            s.names["nli"] = nli_model_path
    except (OSError, ImportError) as exc:
        raise ValueError(f"a configured scoring model could not be loaded locally: {exc}") from None
    return s


def score_explanation(expl: str, refs: Sequence[str], language: str, scorers: Scorers) -> dict:
    """fbeta, s_acc, s_logic, s_logic_note, rouge_l_precision, verbosity_penalty, s_info of one
    explanation against non-empty ``refs`` (module doc)."""
    if not refs:
        raise ValueError("score_explanation: no references")
    fb = max(content_fbeta(expl, r, language) for r in refs)
    parts = {"fbeta": fb}
    if scorers.cross_encoder is not None:
        parts["cross_encoder"] = (
            0.0 if not expl else max(sigmoid(v) for v in scorers.cross_encoder([(expl, r) for r in refs]))
        )
    rep = []
    if scorers.embedding is not None:
        rep.append(0.0 if not expl else max(max(0.0, scorers.embedding(expl, r)) for r in refs))
    if scorers.bertscore is not None:
        rep.append(0.0 if not expl else max(scorers.bertscore([expl] * len(refs), list(refs))))
    if rep:
        parts["representation"] = float(np.mean(rep))
    w = scorers.weights()
    acc = float(sum(w[k] * parts[k] for k in w))
    if scorers.nli is None:
        logic, note = None, NO_NLI
    else:
        logic, note = (0.0 if not expl else max(scorers.nli(expl, r) for r in refs)), None
    info, p, vp = s_info(expl, refs, language)
    return {
        "fbeta": fb,
        "s_acc": min(1.0, max(0.0, acc)),
        "s_logic": logic,
        "s_logic_note": note,
        "rouge_l_precision": p,
        "verbosity_penalty": vp,
        "s_info": info,
    }


def semantic_scores(scored: pd.DataFrame, items: Sequence[OrderItem], scorers: Scorers) -> pd.DataFrame:
    """S_Acc / S_Logic / S_Info per generation (module doc). Columns:
    :class:`~.schemas.SemanticScores`. Rows without references or with a call error keep null
    scores and say why in ``note``."""
    require_columns(
        scored,
        ("model_id", "setting", "language", "item_id", "pattern", "explanation", "reason"),
        "semantic_scores(scored)",
    )
    by_id = {x.item_id: x for x in items}
    comps = scorers.s_acc_components()
    rows = []
    for r in scored.itertuples():
        x = by_id[r.item_id]
        base = {
            "model_id": r.model_id,
            "setting": r.setting,
            "language": r.language,
            "item_id": r.item_id,
            "pattern": r.pattern,
            "structure": x.structure,
            "n_references": len(x.meanings),
            "s_acc_components": comps,
        }
        null = {
            "fbeta": None,
            "s_acc": None,
            "s_logic": None,
            "rouge_l_precision": None,
            "verbosity_penalty": None,
            "s_info": None,
        }
        if not x.meanings:
            rows.append({**base, **null, "s_logic_note": "no reference meanings", "note": "no reference meanings"})
        elif r.reason == CALL_ERROR:
            rows.append({**base, **null, "s_logic_note": "call error", "note": CALL_ERROR_NOTE})
        elif not isinstance(r.explanation, str):
            rows.append({**base, **null, "s_logic_note": NO_EXPLANATION_NOTE, "note": NO_EXPLANATION_NOTE})
        else:
            rows.append({**base, **score_explanation(r.explanation, x.meanings, x.language, scorers), "note": None})
    cols = [
        "model_id",
        "setting",
        "language",
        "item_id",
        "pattern",
        "structure",
        "n_references",
        "fbeta",
        "s_acc",
        "s_acc_components",
        "s_logic",
        "s_logic_note",
        "rouge_l_precision",
        "verbosity_penalty",
        "s_info",
        "note",
    ]
    return pd.DataFrame(rows, columns=cols)


def s_cons(per_item: dict[str, Sequence[float]]) -> float | None:
    """Mean over items of (1 − E)(1 − R) from each item's per-permutation scores (module doc);
    ``None`` for no item."""
    vals = []
    for scores in per_item.values():
        a = np.asarray(scores, dtype=float)
        if a.size == 0:
            continue
        e, rng = float(np.mean(a.max() - a)), float(a.max() - a.min())
        vals.append((1 - e) * (1 - rng))
    return float(np.mean(vals)) if vals else None


def mdr_mda(orig: dict[str, float], scrambled: pd.DataFrame) -> tuple[float | None, float | None, int]:
    """``(MDR, MDA, n_excluded)`` from S_orig per item and scrambled rows (item_id, pattern,
    s_acc). Items with S_orig = 0 (or missing) are excluded (counted)."""
    ok = {i: v for i, v in orig.items() if v is not None and v > 0}
    excluded = len(set(scrambled["item_id"])) - len(set(scrambled["item_id"]) & set(ok))
    part = scrambled[scrambled["item_id"].isin(ok)]
    if part.empty:
        return None, None, excluded
    drop = (part["item_id"].map(ok) - part["s_acc"]) / part["item_id"].map(ok)
    d_p = drop.groupby(part["pattern"]).mean()
    return float(d_p.mean()), float(d_p.max()), excluded


def s_struct(item_means: pd.Series, structures: pd.Series) -> float | None:
    """clip(1 − σ/μ̄, 0, 1) over per-structure means (module doc); None with < 2 structures."""
    df = pd.DataFrame({"m": item_means, "s": structures}).dropna()
    mu = df.groupby("s")["m"].mean()
    if len(mu) < 2:
        return None
    if np.allclose(mu.values, mu.values[0]):
        return 1.0
    cv = float(mu.std(ddof=0) / mu.mean()) if mu.mean() > 0 else math.inf
    return float(min(1.0, max(0.0, 1 - cv)))


def harmonic(a: float | None, b: float | None) -> float | None:
    """Harmonic mean of clip(a, 0, 1) and b; None if either is None; 0 if both are 0."""
    if a is None or b is None:
        return None
    a = min(1.0, max(0.0, a))
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def diagnostics(sem: pd.DataFrame) -> pd.DataFrame:
    """S_* per model × language (incl. ``all``) × setting (module doc). A call error has no
    explanation and no score (:func:`semantic_scores`): it is in no mean, ``n_call_errors`` counts
    it, and a cell whose every call failed has null scores with ``not_measurable`` = "not
    measurable: every call failed (N of N)". Columns: :class:`~.schemas.Diagnostics`."""
    require_columns(
        sem,
        (
            "model_id",
            "setting",
            "language",
            "item_id",
            "pattern",
            "structure",
            "s_acc",
            "s_logic",
            "s_logic_note",
            "s_info",
            "s_acc_components",
            "note",
        ),
        "diagnostics(semantic_scores)",
    )
    pooled = pd.concat([sem, sem.assign(language="all")], ignore_index=True)
    rows = []
    for (m, lang, setting), part in pooled.groupby(["model_id", "language", "setting"], sort=True):
        notes = []
        valid = part[part["s_acc"].notna()]
        scr = valid[valid["pattern"] != "ABCD"]
        unp = valid[valid["pattern"] == "ABCD"]
        if valid.empty:
            notes.append(f"no S_Acc: {part['note'].dropna().iloc[0] if part['note'].notna().any() else 'no rows'}")
        cons = s_cons({i: g["s_acc"].tolist() for i, g in scr.groupby("item_id")})
        mdr, mda, excl = mdr_mda(dict(zip(unp["item_id"], unp["s_acc"])), scr[["item_id", "pattern", "s_acc"]])
        if excl:
            notes.append(f"MDR/MDA: {excl} item(s) excluded (S_orig = 0 or missing)")
        seq = None if mdr is None else 1 - (0.5 * mdr + 0.5 * mda)
        im = scr.groupby("item_id")["s_acc"].mean()
        st = s_struct(im, scr.drop_duplicates("item_id").set_index("item_id")["structure"].reindex(im.index))
        if st is None and not scr.empty:
            notes.append("S_struct: fewer than two structure labels")
        if not scr.empty and float(scr["s_acc"].max()) < FLOOR:
            notes.append(
                f"every S_Acc < {FLOOR}: S_Cons (near 1) and S_struct (σ/μ̄ of near-zero means) are degenerate here"
            )
        logic = part["s_logic"].dropna()
        scr_logic = part[(part["pattern"] != "ABCD")]["s_logic"].dropna()
        if logic.empty:
            notes.append(
                f"S_Logic: {part['s_logic_note'].dropna().iloc[0] if part['s_logic_note'].notna().any() else 'none'}"
            )
        n_errors = int(part["note"].eq(CALL_ERROR_NOTE).sum())
        n_unparsed = int(part["note"].eq(NO_EXPLANATION_NOTE).sum())
        unmeasurable = (
            every_call_failed(n_errors)
            if n_errors == len(part)
            else no_reply_parsed(n_unparsed)
            if n_errors + n_unparsed == len(part)
            else None
        )
        rows.append(
            {
                "model_id": m,
                "language": lang,
                "setting": setting,
                "n_call_errors": n_errors,
                "not_measurable": unmeasurable,
                "n_items": int(scr["item_id"].nunique()),
                "s_acc_mean": float(scr["s_acc"].mean()) if len(scr) else None,
                "s_logic": float(scr_logic.mean()) if len(scr_logic) else None,
                "s_info": float(scr["s_info"].mean()) if len(scr) else None,
                "s_cons": cons,
                "mdr": mdr,
                "mda": mda,
                "s_seq": seq,
                "s_struct": st,
                "s_rob": harmonic(seq, st),
                "components": part["s_acc_components"].iloc[0],
                "note": "; ".join(notes) or None,
            }
        )
    return pd.DataFrame(rows)
