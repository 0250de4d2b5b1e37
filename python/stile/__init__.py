"""stile's encoders from Python.

    import stile
    model = stile.SentenceEncoder("~/.cache/stile/all-MiniLM-L6-v2")
    embeddings = model.encode(["A sentence.", "Another one."])      # numpy, [2, 384]
    scores = model.similarity(embeddings, embeddings)

    classifier = stile.TaskModel("path/to/BertForSequenceClassification")
    classifier.classify(["A gripping film."])                        # [[{"label", "score"}, ...]]
    reranker.rerank("a query", ["passage one", "passage two"])        # [{"corpus_id", "score"}, ...]
    tagger.ner("Ada Lovelace was born in London.")                   # [{"entity_group", "score", ...}]
    splade.sparse("a query")                                          # {token: weight}

SentenceEncoder.encode takes sentence-transformers' arguments and gives the same shapes, so code
written for SentenceTransformer(...).encode runs by changing the import. Errors are stile.StileError
(a RuntimeError) with stile's message, naming the file and the field. The C++ work runs without the
GIL; embeddings and scores come back as numpy arrays that own stile's buffers.
"""
from __future__ import annotations

import os
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from ._stile import Engine as _Engine
from ._stile import SentenceEncoder as _SentenceEncoder
from ._stile import StileError
from ._stile import TaskModel as _TaskModel
from ._stile import convert as _convert
from ._stile import profile as _profile
from ._stile import set_simd_target as _set_simd_target

__all__ = ["SentenceEncoder", "TaskModel", "Engine", "StileError", "convert", "default_model_dir", "profile",
           "set_simd_target"]


def default_model_dir() -> str:
    """$STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2 (what scripts/fetch-model installs)."""
    return os.environ.get("STILE_MODEL_DIR") or os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2")


def _texts(sentences: Union[str, Iterable[str]]) -> tuple[list[str], bool]:
    if isinstance(sentences, str):
        return [sentences], True
    return list(sentences), False


class SentenceEncoder:
    """A sentence-transformers model directory (modules.json, the encoder, Pooling, Dense, Normalize,
    prompts), run by stile. precision: fp32 (default), fp16, int8 or ibert; threads: 0 for one per
    core (or $STILE_NUM_THREADS)."""

    def __init__(self, model_name_or_path: Optional[str] = None, precision: str = "fp32", threads: int = 0):
        path = os.path.expanduser(model_name_or_path or default_model_dir())
        self._model = _SentenceEncoder(path, precision, threads)

    def encode(self, sentences: Union[str, Sequence[str]], batch_size: int = 32, show_progress_bar: bool = False,
               convert_to_numpy: bool = True, normalize_embeddings: bool = False, prompt_name: Optional[str] = None,
               stride: Optional[int] = None) -> np.ndarray:
        """The embeddings of `sentences`: [len(sentences), dim] float32, or [dim] for one string.
        batch_size sentences run through the encoder at a time (their tokens packed, no padding);
        normalize_embeddings L2-normalizes each; prompt_name puts the model's named prompt first;
        stride embeds a text longer than max_seq_length in overlapping windows (stile's extension;
        the default truncates, as sentence-transformers does)."""
        del show_progress_bar, convert_to_numpy  # always numpy; no progress bar
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        texts, single = _texts(sentences)
        parts = [self._model.embed(texts[b:b + batch_size], prompt_name, stride)
                 for b in range(0, len(texts), batch_size)]
        out = np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)
        if normalize_embeddings:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, 1e-12)
        return out[0] if single else out

    def tokenize(self, sentences: Union[str, Sequence[str]], prompt_name: Optional[str] = None) -> list[dict]:
        """Each text's input_ids, token_type_ids and attention_mask, as encode tokenizes it."""
        texts, _ = _texts(sentences)
        return [{"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
                for ids, types, mask in self._model.tokenize(texts, prompt_name)]

    def similarity(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """[len(a), len(b)] by the model's similarity_fn_name: cosine (default), dot, or the negated
        euclidean or manhattan distance, as sentence-transformers' similarity gives them."""
        a, b = np.atleast_2d(a).astype(np.float32), np.atleast_2d(b).astype(np.float32)
        fn = self.similarity_fn_name
        if fn == "dot":
            return a @ b.T
        if fn == "euclidean":
            return -np.linalg.norm(a[:, None, :] - b[None, :, :], axis=-1)
        if fn == "manhattan":
            return -np.abs(a[:, None, :] - b[None, :, :]).sum(-1)
        an = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
        bn = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
        return an @ bn.T

    @property
    def dim(self) -> int:
        return self._model.dim

    def get_sentence_embedding_dimension(self) -> int:
        return self._model.dim

    @property
    def max_seq_length(self) -> int:
        return self._model.max_seq_length

    @property
    def similarity_fn_name(self) -> str:
        return self._model.similarity_fn_name

    @property
    def prompts(self) -> dict[str, str]:
        return dict(self._model.prompts)


def _char_index(text: str, byte: int) -> int:
    return len(text.encode("utf-8")[:byte].decode("utf-8", errors="replace"))


class TaskModel:
    """A fine-tuned checkpoint with its own head (config.json's architectures): a sequence classifier
    or cross-encoder, a token classifier, or a SPLADE masked LM; the answers of transformers'
    pipelines and sentence-transformers' CrossEncoder / SparseEncoder."""

    def __init__(self, model_path: str, precision: str = "fp32", threads: int = 0):
        self._model = _TaskModel(os.path.expanduser(model_path), precision, threads)

    @property
    def task(self) -> str:
        return self._model.task

    @property
    def labels(self) -> list[str]:
        return list(self._model.labels)

    def logits(self, texts: Union[str, Sequence[str]], text_pairs: Optional[Sequence[str]] = None):
        """(logits, scores) as numpy arrays [texts x labels]."""
        t, _ = _texts(texts)
        return self._model.classify(t, None if text_pairs is None else list(text_pairs))

    def classify(self, texts: Union[str, Sequence[str]], text_pairs: Optional[Sequence[str]] = None) -> list:
        """Per text, every label with its score, best first (the text-classification pipeline's
        output with top_k=None)."""
        _, scores = self.logits(texts, text_pairs)
        labels = self.labels
        return [sorted(({"label": labels[k], "score": float(row[k])} for k in range(len(labels))),
                       key=lambda d: -d["score"]) for row in scores]

    def predict(self, pairs: Sequence[Sequence[str]]) -> np.ndarray:
        """A cross-encoder's score per (query, passage) pair (CrossEncoder.predict)."""
        return np.array([self._model.score_pairs(q, [p])[0] for q, p in pairs])

    def rerank(self, query: str, documents: Sequence[str], top_k: Optional[int] = None,
               return_documents: bool = False) -> list[dict]:
        """The documents by descending score (CrossEncoder.rank): corpus_id, score (and text)."""
        docs = list(documents)
        scores = self._model.score_pairs(query, docs)
        order = sorted(range(len(docs)), key=lambda i: -scores[i])  # stable: ties keep their order
        out = [{"corpus_id": i, "score": float(scores[i])} for i in order[:top_k]]
        if return_documents:
            for r in out:
                r["text"] = docs[r["corpus_id"]]
        return out

    def ner(self, text: str, aggregation_strategy: str = "simple", stride: Optional[int] = None) -> list[dict]:
        """The token-classification pipeline's entities: start and end are str indices of text, word
        the text they cover."""
        grouped = aggregation_strategy != "none"
        out = []
        for label, score, begin, end, index in self._model.entities(text, aggregation_strategy, stride):
            start, stop = _char_index(text, begin), _char_index(text, end)
            entity = {"entity_group" if grouped else "entity": label, "score": score, "word": text[start:stop],
                      "start": start, "end": stop}
            if not grouped:
                entity["index"] = index
            out.append(entity)
        return out

    def sparse(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """SPLADE's vector: (vocabulary ids, weights), ids ascending, every weight > 0."""
        return self._model.sparse(text)

    def decode(self, ids: Iterable[int], weights: Iterable[float], top_k: Optional[int] = None) -> list:
        """[(token, weight)] by descending weight (SparseEncoder.decode)."""
        pairs = sorted(zip(ids, weights), key=lambda p: -p[1])[:top_k]
        return [(self._model.token(int(i)), float(w)) for i, w in pairs]


class Engine:
    """The elastic engine over a shard store (tools/convert): each request runs the submodel the
    planner picks for target_ms (with STORE.profile.json from tools/profile; without one, the whole
    model at the highest stored bitwidth) while its shards stream from storage (emulated: emmc, sd,
    nvme; none: the real device), holding preload_kb KiB between requests. A store converted from
    a fine-tuned classifier classifies each request with its own head (STORE.head.safetensors)."""

    def __init__(self, store: str, storage: str = "none", target_ms: float = 0.0, preload_kb: float = 0.0,
                 threads: int = 0):
        self._engine = _Engine(os.path.expanduser(store), storage, target_ms, preload_kb, threads)

    def run(self, text: str, target_ms: Optional[float] = None) -> dict:
        """One request. target_ms, when given, is the latency target of this request and the next
        ones (0: none; a target needs the store's device profile). Returns: embedding (numpy), label,
        label_name, scores and logits (with a head), tokens, plan (per layer, its (shard, bits)),
        plan_note, estimated_ms, target_ms, deadline_missed, deadline_note, timeline (total_ms,
        embeddings_ms, io_ms, stall_ms, compute_ms, head_ms, bytes_read, storage, emulated), trace
        (the Chrome trace JSON), and the bytes held."""
        return self._engine.run(text, target_ms)

    @property
    def resident_bytes(self) -> int:
        return self._engine.resident_bytes

    @property
    def backend(self) -> str:
        return self._engine.backend


def convert(model_dir: str, store: str, bits: Sequence[int] = (2, 3, 4, 5, 6, 32), shards: int = 0) -> dict:
    """Converts a checkpoint directory to a shard store for Engine, as the convert program does: every
    layer cut into shards (0: one per attention head), each stored at every bitwidth of bits (2..6
    and 32). A checkpoint with a sequence- or token-classification head also gets STORE.head.safetensors,
    which Engine reads. Returns the converter's report: file_bytes, shards, per bitwidth its bytes,
    mean_abs_error and relative_rmse, and head_sidecar (its path, or None)."""
    return _convert(os.path.expanduser(model_dir), os.path.expanduser(store), list(bits), shards)


def profile(store: str, storage: str = "none", repeats: int = 5, lengths: Sequence[int] = (16, 32, 64, 128, 256),
            threads: int = 0) -> str:
    """Measures this device for a shard store, as the profile program does: the read time of a shard
    version at each bitwidth (through the storage emulator named: emmc, sd, nvme; none: the real
    device) and the compute time of a layer per bitwidth, shard count and token length (repeats timed
    runs each). Writes STORE.profile.json, which Engine's planner reads, and returns its path. Run it
    on an otherwise idle machine."""
    return _profile(os.path.expanduser(store), storage, repeats, list(lengths), threads)


def set_simd_target(name: str) -> None:
    """Runs stile's SIMD kernels for one Highway target from now on (e.g. "AVX2" on an AVX-512
    CPU: what a laptop without AVX-512 runs), as the programs' --target does. Call it before
    creating models. A target this CPU lacks, or stile did not compile, raises StileError."""
    _set_simd_target(name)
