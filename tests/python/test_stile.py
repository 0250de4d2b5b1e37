"""The Python package against the C++ library and the reference pipelines' goldens.

Run by scripts/test's Python stage (a venv with `pip install .`):
    pytest tests/python
The default model (scripts/fetch-model) and the C++ embed program (build/test/tools/embed, for
the exact comparison) are used when present; the head goldens are tests/model/data/heads.
"""
import json
import os
import subprocess

import numpy as np
import pytest

import stile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADS = os.path.join(ROOT, "tests/model/data/heads")
EMBED = os.environ.get("STILE_EMBED", os.path.join(ROOT, "build/test/tools/embed"))
MODEL = stile.default_model_dir()
SST2_DEV = os.path.join(ROOT, "..", "shared/data/sst2/dev.tsv")

needs_model = pytest.mark.skipif(not os.path.isdir(MODEL), reason="the default model is not installed")


def dev_sentences(n):
    with open(SST2_DEV, encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f.read().splitlines()[1:n + 1]]


def golden(name):
    with open(os.path.join(HEADS, name, "golden.json"), encoding="utf-8") as f:
        return json.load(f)


@needs_model
@pytest.mark.skipif(not os.access(EMBED, os.X_OK), reason="the C++ embed program is not built")
def test_encode_equals_the_cpp_embed_exactly():
    sentences = dev_sentences(70)
    out = subprocess.run([EMBED, "--model", MODEL, "--format", "json"], input="\n".join(sentences) + "\n",
                         capture_output=True, text=True, check=True)
    cpp = np.array([row["embedding"] for row in json.loads(out.stdout)], dtype=np.float32)
    model = stile.SentenceEncoder(MODEL)
    for batch_size in (1, 7, 64):
        got = model.encode(sentences, batch_size=batch_size)
        assert got.shape == (70, 384) and got.dtype == np.float32
        assert np.abs(got - cpp).max() == 0.0, batch_size


def read_model_goldens():
    """The default model's reference goldens (tests/model/data/README.md): per case its text and the
    embedding sentence-transformers' encode gave."""
    data_dir = os.path.join(ROOT, "tests/model/data")
    with open(os.path.join(data_dir, "goldens.bin"), "rb") as f:
        data = f.read()
    arrays = {}
    with open(os.path.join(data_dir, "goldens.idx"), encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == "array":
                key, name, dtype, offset, ndim = fields[1], fields[2], fields[3], int(fields[4]), int(fields[5])
                shape = [int(d) for d in fields[6:6 + ndim]]
                t = {"f32": "<f4", "i32": "<i4", "u8": "u1"}[dtype]
                count = int(np.prod(shape))
                arrays[(key, name)] = np.frombuffer(data, dtype=t, count=count, offset=offset).reshape(shape)
    ids = sorted({int(k) for k, _ in arrays if k.isdigit()})
    texts = [arrays[(str(i), "text")].tobytes().decode("utf-8") for i in ids]
    return texts, np.stack([arrays[(str(i), "embedding")] for i in ids])


@needs_model
def test_encode_equals_sentence_transformers():
    # The goldens are sentence-transformers 6.2's encode of each text alone (torch fp32); its batched
    # encode differs from that by 1.9e-7 at most (the goldens' noise floor).
    texts, want = read_model_goldens()
    model = stile.SentenceEncoder(MODEL)
    for batch_size in (1, 7, 64):
        for normalize in (False, True):
            got = model.encode(texts, batch_size=batch_size, normalize_embeddings=normalize)
            assert np.abs(got - want).max() <= 1e-5, (batch_size, normalize)


@needs_model
def test_encode_shapes_normalization_and_similarity():
    model = stile.SentenceEncoder(MODEL, threads=1)
    one = model.encode("A man is eating food.")
    assert one.shape == (model.dim,) == (384,)
    both = model.encode(["A man is eating food.", "A man is eating a piece of bread."], normalize_embeddings=True)
    assert np.allclose(np.linalg.norm(both, axis=1), 1.0, atol=1e-6)
    assert np.allclose(both[0], one, atol=1e-6)  # the model normalizes already
    sim = model.similarity(both, both)
    assert sim.shape == (2, 2) and np.allclose(np.diag(sim), 1.0, atol=1e-6) and 0.3 < sim[0, 1] < 0.99
    assert model.encode([]).shape == (0, 384)
    tokens = model.tokenize("A man")
    assert tokens[0]["input_ids"][0] == 101 and tokens[0]["input_ids"][-1] == 102
    long_text = " ".join(dev_sentences(40))
    assert not np.array_equal(model.encode(long_text, stride=32), model.encode(long_text))


def test_errors_are_stile_errors_with_stile_messages(tmp_path):
    with pytest.raises(stile.StileError, match="config.json"):
        stile.SentenceEncoder(str(tmp_path))
    with pytest.raises(stile.StileError, match="config.json"):
        stile.TaskModel(str(tmp_path))
    assert issubclass(stile.StileError, RuntimeError)
    tagger = stile.TaskModel(os.path.join(HEADS, "bert_ner"))
    with pytest.raises(stile.StileError, match="not token classification|is token classification"):
        tagger.classify(["text"])
    with pytest.raises(stile.StileError, match="aggregation"):
        tagger.ner("text", aggregation_strategy="mean")
    classifier = stile.TaskModel(os.path.join(HEADS, "bert_seqcls"))
    with pytest.raises(stile.StileError, match="one output"):
        classifier.rerank("q", ["p"])
    with pytest.raises(stile.StileError, match="text_pair"):
        classifier.logits(["a", "b"], ["only one"])


def test_classify_equals_the_text_classification_pipeline():
    model = stile.TaskModel(os.path.join(HEADS, "bert_seqcls"))
    assert model.task == "sequence-classification" and model.labels == ["negative", "neutral", "positive"]
    cases = [c for c in golden("bert_seqcls")["cases"] if c["text_pair"] is None]
    got = model.classify([c["text"] for c in cases])
    for c, g in zip(cases, got):
        assert [d["label"] for d in g] == [d["label"] for d in c["pipeline"]]
        assert np.allclose([d["score"] for d in g], [d["score"] for d in c["pipeline"]], atol=1e-5)
    pairs = [c for c in golden("bert_seqcls")["cases"] if c["text_pair"] is not None]
    logits, _ = model.logits([c["text"] for c in pairs], [c["text_pair"] for c in pairs])
    assert np.allclose(logits, [c["logits"] for c in pairs], atol=1e-5)


def test_rerank_equals_the_cross_encoder():
    model = stile.TaskModel(os.path.join(HEADS, "bert_crossencoder"))
    for c in golden("bert_crossencoder")["cases"]:
        ranked = model.rerank(c["query"], c["passages"], return_documents=True)
        assert [r["corpus_id"] for r in ranked] == [r["corpus_id"] for r in c["rank"]]
        assert np.allclose([r["score"] for r in ranked], [r["score"] for r in c["rank"]], atol=1e-5)
        assert ranked[0]["text"] == c["passages"][ranked[0]["corpus_id"]]
        assert np.allclose(model.predict([(c["query"], p) for p in c["passages"]]), c["scores"], atol=1e-5)


def test_ner_equals_the_token_classification_pipeline():
    model = stile.TaskModel(os.path.join(HEADS, "bert_ner"))
    for c in golden("bert_ner")["cases"]:
        if c["stride"] is not None:
            continue
        for strategy in ("none", "simple", "first", "max", "average"):
            got, want = model.ner(c["text"], strategy), c["pipeline"][strategy]
            key = "entity" if strategy == "none" else "entity_group"
            assert [(e[key], e["start"], e["end"]) for e in got] == [(e[key], e["start"], e["end"]) for e in want]
            assert np.allclose([e["score"] for e in got], [e["score"] for e in want], atol=1e-5)


def test_sparse_equals_the_sparse_encoder():
    model = stile.TaskModel(os.path.join(HEADS, "bert_splade"))
    c = golden("bert_splade")["cases"][0]
    ids, weights = model.sparse(c["text"])
    assert ids.dtype == np.int32 and weights.dtype == np.float32
    want = dict(zip(c["indices"], c["values"]))
    assert sorted(want) == ids.tolist()
    assert np.allclose(weights, [want[i] for i in ids.tolist()], atol=1e-5)
    assert model.decode(ids, weights, top_k=1)[0][0] == c["top"][0][0]


@needs_model
def test_the_readme_example_runs():
    out = subprocess.run([os.sys.executable, os.path.join(ROOT, "examples/python_quickstart.py")], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("(3, 384)")


CONVERT = os.environ.get("STILE_CONVERT", os.path.join(ROOT, "build/test/tools/convert"))


@needs_model
@pytest.mark.skipif(not os.access(CONVERT, os.X_OK), reason="the C++ convert program is not built")
def test_engine_runs_a_store_and_reports_its_request(tmp_path):
    store = str(tmp_path / "minilm.stile")
    subprocess.run([CONVERT, MODEL, store, "--bits", "4,32"], check=True, capture_output=True)
    engine = stile.Engine(store)
    r = engine.run("a charming and moving film")
    # No profile: the whole model at the highest stored bitwidth, so the embedding is the model's.
    want = stile.SentenceEncoder(MODEL).encode("a charming and moving film")
    assert r["embedding"].shape == (384,) and np.abs(r["embedding"] - want).max() < 1e-5
    assert len(r["plan"]) == 6 and all(bits == 32 for layer in r["plan"] for _, bits in layer)
    assert r["tokens"] == 7 and r["label"] is None and not r["deadline_missed"]
    assert r["timeline"]["total_ms"] > 0 and r["timeline"]["bytes_read"] > 0
    trace = json.loads(r["trace"])
    assert any(e.get("name") == "compute layer 5" for e in trace["traceEvents"])
    assert engine.resident_bytes > 0
    with pytest.raises(stile.StileError, match="nowhere.stile"):
        stile.Engine(str(tmp_path / "nowhere.stile"))


@needs_model
def test_convert_profile_and_a_planned_request(tmp_path):
    store = str(tmp_path / "minilm.stile")
    report = stile.convert(MODEL, store, bits=[4, 32])
    assert report["file_bytes"] == os.path.getsize(store) and report["shards"] == 12
    assert sorted(report["bits"]) == [4, 32] and report["bits"][32]["relative_rmse"] == 0
    assert 0 < report["bits"][4]["relative_rmse"] < 0.2 and report["head_sidecar"] is None
    path = stile.profile(store, repeats=1, lengths=[16])
    assert path == store + ".profile.json" and os.path.exists(path)
    engine = stile.Engine(store)
    loose = engine.run("a charming and moving film", target_ms=1000)
    assert loose["target_ms"] == 1000 and all(bits == 32 for layer in loose["plan"] for _, bits in layer)
    tight = engine.run("a charming and moving film", target_ms=0.01)
    assert tight["target_ms"] == 0.01 and tight["deadline_missed"] and tight["deadline_note"]
    with pytest.raises(stile.StileError, match="config.json"):
        stile.convert(str(tmp_path), str(tmp_path / "x.stile"))
    with pytest.raises(stile.StileError, match="storage"):
        stile.profile(store, storage="floppy")


@needs_model
def test_a_forced_simd_target():
    with pytest.raises(stile.StileError, match="SIMD target 'VAX'.*not one this CPU has"):
        stile.set_simd_target("VAX")
    # In a process of its own: the target holds for the rest of the process.
    script = ("import stile, sys\n"
              "try:\n    stile.set_simd_target('AVX2')\nexcept stile.StileError:\n    sys.exit(3)\n"
              "sys.stdout.buffer.write(stile.SentenceEncoder().encode('a charming film').tobytes())\n")
    r = subprocess.run([os.sys.executable, "-c", script], capture_output=True)
    if r.returncode == 3:
        pytest.skip("this CPU has no AVX2")
    assert r.returncode == 0, r.stderr
    avx2 = np.frombuffer(r.stdout, dtype=np.float32)
    assert np.abs(avx2 - stile.SentenceEncoder().encode("a charming film")).max() < 1e-5
