"""stile-serve over loopback, with real HTTP clients: the openai client, http.client and raw sockets.

Run by scripts/test's Python stage. The server program is build/test/tools/stile-serve (or
$STILE_SERVE); the answers are checked against the stile package's own results (exactly) and the
reference goldens of tests/model/data/heads; every refusal against the status docs/serving.md gives,
each followed by a request that must still be served.
"""
import base64
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import stile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADS = os.path.join(ROOT, "tests/model/data/heads")
SERVE = os.environ.get("STILE_SERVE", os.path.join(ROOT, "build/test/tools/stile-serve"))
MODEL = stile.default_model_dir()
SST2_DEV = os.path.join(ROOT, "..", "shared/data/sst2/dev.tsv")

pytestmark = pytest.mark.skipif(not os.access(SERVE, os.X_OK), reason="stile-serve is not built")
needs_model = pytest.mark.skipif(not os.path.isdir(MODEL), reason="the default model is not installed")


def dev_sentences(n):
    with open(SST2_DEV, encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f.read().splitlines()[1:n + 1]]


class Server:
    """A stile-serve process on a free loopback port; stopped with SIGTERM, which must end it with 0."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([SERVE, "--port", "0", "--threads", "2", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not found:
            self.proc.kill()
            raise RuntimeError("stile-serve did not start: " + line + self.proc.stderr.read())
        self.port = int(found.group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, dict(r.getheaders()), payload

    def post(self, path, body, headers=None):
        status, _, payload = self.request("POST", path, body, headers)
        return status, json.loads(payload)

    def healthy(self):
        return self.request("GET", "/health")[0] == 200

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


@pytest.fixture(scope="module")
def embed_server():
    if not os.path.isdir(MODEL):
        pytest.skip("the default model is not installed")
    s = Server("--model", MODEL, "--read-timeout-s", "1", "--max-texts", "2048")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def library():
    return stile.SentenceEncoder(MODEL)


@needs_model
def test_openai_client_gets_the_library_vectors(embed_server, library):
    import openai
    client = openai.OpenAI(base_url=embed_server.url + "/v1", api_key="unused", max_retries=0)
    sentences = dev_sentences(20)
    want = library.encode(sentences)
    # The client asks for base64 unless told otherwise; both formats must give the same floats.
    for fmt in (openai.NOT_GIVEN, "float"):
        r = client.embeddings.create(input=sentences, model="all-MiniLM-L6-v2", encoding_format=fmt)
        got = np.array([d.embedding for d in r.data], dtype=np.float32)
        assert [d.index for d in r.data] == list(range(20))
        assert np.abs(got - want).max() == 0.0
        tokens = sum(len(t["input_ids"]) for t in library.tokenize(sentences))
        assert r.usage.prompt_tokens == r.usage.total_tokens == tokens
        assert r.model == "all-MiniLM-L6-v2"
    one = client.embeddings.create(input=sentences[0], model="m")
    assert np.abs(np.array(one.data[0].embedding, dtype=np.float32) - want[0]).max() == 0.0
    # dimensions: the first N values, normalized again (the model normalizes).
    short = client.embeddings.create(input=sentences[:2], model="m", dimensions=64, encoding_format="float")
    cut = want[:2, :64] / np.linalg.norm(want[:2, :64], axis=1, keepdims=True)
    assert np.allclose(np.array([d.embedding for d in short.data]), cut, atol=1e-6)
    assert [m.id for m in client.models.list().data] == ["all-MiniLM-L6-v2"]


@needs_model
def test_tei_embed_and_base64_wire_format(embed_server, library):
    status, body = embed_server.post("/embed", {"inputs": ["a charming film", "dull"]})
    assert status == 200 and np.abs(np.array(body, dtype=np.float32) - library.encode(["a charming film", "dull"])).max() == 0
    status, body = embed_server.post("/v1/embeddings", {"input": "a charming film", "encoding_format": "base64"})
    raw = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    assert status == 200 and np.array_equal(raw, library.encode("a charming film"))


def refusals():
    too_long = "word " * 1000
    return [
        # (what, body, status, the error's param or a word of its message)
        ("malformed JSON", b'{"input": ["a", ', 400, "not valid JSON"),
        ("not an object", b'["a"]', 400, "JSON object"),
        ("a duplicate key", b'{"input": "a", "input": "b"}', 400, "twice"),
        ("input a number", {"input": 5}, 400, "input"),
        ("input a list with a number", {"input": ["a", None]}, 400, "input"),
        ("token ids", {"input": [[101, 102]]}, 400, "input"),
        ("input missing", {"model": "m"}, 400, "input"),
        ("an empty list", {"input": []}, 400, "input"),
        ("an unknown field", {"input": "a", "temperature": 1}, 400, "temperature"),
        ("a bad encoding_format", {"input": "a", "encoding_format": "int8"}, 400, "encoding_format"),
        ("dimensions above the model's", {"input": "a", "dimensions": 385}, 400, "dimensions"),
        ("an unknown prompt", {"input": "a", "prompt_name": "query"}, 400, "input"),
        ("10,000 texts", {"input": ["a"] * 10000}, 413, "input"),
        ("a text over the model's length", {"input": too_long}, 413, "input"),
        ("a 10 MB body", json.dumps({"input": ["x" * 1000] * 10000}).encode(), 413, "larger"),
    ]


@needs_model
@pytest.mark.parametrize("what,body,status,param", refusals(), ids=[r[0] for r in refusals()])
def test_refusals_get_their_status_and_the_server_serves_on(embed_server, what, body, status, param):
    got, headers, payload = embed_server.request("POST", "/v1/embeddings", body)
    assert got == status, (what, payload[:300])
    error = json.loads(payload)["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param or param in error["message"], error
    assert embed_server.healthy()
    assert embed_server.post("/v1/embeddings", {"input": "still here"})[0] == 200


@needs_model
def test_truncation_on_request(embed_server, library):
    text = "word " * 1000
    status, body = embed_server.post("/v1/embeddings", {"input": text, "truncate": True, "encoding_format": "float"})
    assert status == 200 and body["usage"]["prompt_tokens"] == 256
    assert np.abs(np.array(body["data"][0]["embedding"], dtype=np.float32) - library.encode(text)).max() == 0


@needs_model
def test_a_slow_client_is_cut_off_and_others_are_served(embed_server):
    s = socket.create_connection(("127.0.0.1", embed_server.port))
    s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inp")
    assert embed_server.post("/v1/embeddings", {"input": "served meanwhile"})[0] == 200
    s.settimeout(10)
    start = time.time()
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < int(
            re.search(rb"Content-Length: (\d+)", answer).group(1)):
        chunk = s.recv(65536)
        assert chunk, answer
        answer += chunk
    s.close()
    # Closed after the read timeout (1 s here), with 400 and the reason.
    assert answer.startswith(b"HTTP/1.1 400") and b"read timeout" in answer and time.time() - start < 5
    assert embed_server.healthy()


@needs_model
def test_a_client_that_disconnects_mid_request(embed_server):
    body = json.dumps({"input": ["word " * 200] * 64}).encode()
    for cut in (len(body) // 2, len(body)):  # mid-body, and before the answer
        s = socket.create_connection(("127.0.0.1", embed_server.port))
        s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:cut])
        s.close()
    assert embed_server.healthy()
    assert embed_server.post("/v1/embeddings", {"input": "still here"})[0] == 200


@needs_model
def test_eight_clients_two_hundred_requests_each(embed_server):
    texts = dev_sentences(40)
    requests = [texts[i % 40:i % 40 + 1 + i % 3] for i in range(40)]
    single = [embed_server.post("/v1/embeddings", {"input": r, "encoding_format": "float"})[1] for r in requests]

    def client(k):
        c = http.client.HTTPConnection("127.0.0.1", embed_server.port, timeout=120)
        errors, mismatches = 0, 0
        for i in range(200):
            j = (k * 7 + i) % len(requests)
            c.request("POST", "/v1/embeddings", body=json.dumps({"input": requests[j], "encoding_format": "float"}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            payload = r.read()
            if r.status != 200:
                errors += 1
            elif json.loads(payload)["data"] != single[j]["data"]:
                mismatches += 1
        c.close()
        return errors, mismatches

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(client, range(8)))
    assert results == [(0, 0)] * 8
    metrics = embed_server.request("GET", "/metrics")[2].decode()
    batches = int(re.search(r"^stile_batches_total (\d+)$", metrics, re.M).group(1))
    served = int(re.search(r'^stile_requests_total\{endpoint="/v1/embeddings",status="200"\} (\d+)$', metrics, re.M).group(1))
    assert served >= 1600 and batches < served  # concurrent requests shared encoder runs
    assert re.search(r'^stile_request_duration_seconds_count\{endpoint="/v1/embeddings"\} \d+$', metrics, re.M)


@needs_model
def test_a_full_queue_answers_503_and_the_accepted_ones_are_served():
    server = Server("--model", MODEL, "--max-queue", "1", "--max-batch-tokens", "100000")
    try:
        big = {"input": ["word " * 250] * 200}
        outcome = {}
        t = threading.Thread(target=lambda: outcome.update(big=server.post("/v1/embeddings", big)[0]))
        t.start()
        statuses = []
        while t.is_alive() and 503 not in statuses:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(lambda _: server.request("POST", "/v1/embeddings", {"input": "small"}), range(4)))
            for status, headers, payload in answers:
                statuses.append(status)
                if status == 503:
                    assert headers.get("Retry-After") == "1" and "busy" in json.loads(payload)["error"]["message"]
        t.join()
        assert outcome["big"] == 200 and 503 in statuses and set(statuses) <= {200, 503}
        assert server.post("/v1/embeddings", {"input": "after"})[0] == 200
    finally:
        assert server.stop() == 0


@needs_model
def test_sigterm_finishes_the_request_in_flight():
    server = Server("--model", MODEL)
    outcome = {}
    t = threading.Thread(target=lambda: outcome.update(r=server.post("/v1/embeddings", {"input": ["word " * 250] * 100})))
    t.start()
    time.sleep(0.3)
    code = server.stop()
    t.join()
    assert code == 0 and outcome["r"][0] == 200 and len(outcome["r"][1]["data"]) == 100


def test_rerank_and_classify_equal_the_library_and_the_references():
    cross = stile.TaskModel(os.path.join(HEADS, "bert_crossencoder"))
    with open(os.path.join(HEADS, "bert_crossencoder", "golden.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    server = Server("--task-model", os.path.join(HEADS, "bert_crossencoder"))
    try:
        for c in cases:
            status, ranked = server.post("/rerank", {"query": c["query"], "texts": c["passages"], "truncate": True,
                                                     "return_text": True})
            assert status == 200
            assert [r["index"] for r in ranked] == [r["corpus_id"] for r in c["rank"]]
            assert np.allclose([r["score"] for r in ranked], [r["score"] for r in c["rank"]], atol=1e-5)
            want = cross.predict([(c["query"], p) for p in c["passages"]])
            assert [r["score"] for r in ranked] == [float(want[r["index"]]) for r in ranked]
            assert all(r["text"] == c["passages"][r["index"]] for r in ranked)
        status, body = server.post("/classify", {"inputs": "x"})
        assert status == 200 and len(body) == 1
        status, body = server.post("/embed", {"inputs": "x"})
        assert status == 400 and body["error_type"] == "Validation" and "--model" in body["error"]
    finally:
        assert server.stop() == 0

    with open(os.path.join(HEADS, "bert_seqcls", "golden.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    server = Server("--task-model", os.path.join(HEADS, "bert_seqcls"), "--auto-truncate")
    try:
        singles = [c for c in cases if c["text_pair"] is None]
        status, got = server.post("/classify", {"inputs": [c["text"] for c in singles]})
        assert status == 200
        for c, g in zip(singles, got):
            assert [d["label"] for d in g] == [d["label"] for d in c["pipeline"]]
            assert np.allclose([d["score"] for d in g], [d["score"] for d in c["pipeline"]], atol=1e-5)
        pair = next(c for c in cases if c["text_pair"] is not None)
        status, got = server.post("/classify", {"inputs": [pair["text"], pair["text_pair"]], "raw_scores": True})
        labels = ["negative", "neutral", "positive"]
        assert status == 200 and np.allclose([{d["label"]: d["score"] for d in got}[l] for l in labels], pair["logits"],
                                             atol=1e-5)
        status, body = server.post("/rerank", {"query": "q", "texts": ["p"]})
        assert status == 400 and "cross-encoder" in body["error"]
        status, body = server.post("/classify", {"inputs": [["a", "b", "c"]]})
        assert status == 400 and body["error_type"] == "Validation"
    finally:
        assert server.stop() == 0


def test_a_bad_model_or_flag_fails_at_start(tmp_path):
    r = subprocess.run([SERVE, "--port", "0", "--model", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and str(tmp_path) in r.stderr
    r = subprocess.run([SERVE, "--port", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--model" in r.stderr
    r = subprocess.run([SERVE, "--task-model", os.path.join(HEADS, "bert_ner"), "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "token classification" in r.stderr


@needs_model
def test_the_elastic_engine_under_a_target_per_request(tmp_path):
    store = str(tmp_path / "minilm.stile")
    stile.convert(MODEL, store, bits=[4, 32])
    want = stile.Engine(store).run("a charming and moving film")["embedding"]
    server = Server("--store", store)
    try:
        # Without a device profile the planner cannot aim at a target: refused, the server serves on.
        status, body = server.post("/v1/embeddings", {"input": "x", "target_ms": 40})
        assert status == 400 and body["error"]["param"] == "target_ms" and "profile" in body["error"]["message"]
        status, body = server.post("/v1/embeddings", {"input": ["a charming and moving film"], "encoding_format": "float"})
        assert status == 200 and np.abs(np.array(body["data"][0]["embedding"], dtype=np.float32) - want).max() < 1e-6
    finally:
        assert server.stop() == 0
    stile.profile(store, repeats=1, lengths=[16])
    server = Server("--store", store)
    try:
        status, body = server.post("/v1/embeddings", {"input": ["a charming and moving film"], "target_ms": 10000,
                                                      "encoding_format": "float"})
        # A target no plan comes near: the whole model at 32 bits, the library's embedding.
        assert status == 200 and np.abs(np.array(body["data"][0]["embedding"], dtype=np.float32) - want).max() < 1e-6
        account = body["stile"][0]
        assert account["target_ms"] == 10000 and not account["deadline_missed"] and account["tokens"] == 7
        # The header, when the body names no target; a target no request can meet is reported missed.
        status, body = server.post("/v1/embeddings", {"input": "a charming and moving film"},
                                   headers={"X-Stile-Target-Ms": "0.001"})
        assert status == 200 and body["stile"][0]["target_ms"] == 0.001 and body["stile"][0]["deadline_missed"]
        metrics = server.request("GET", "/metrics")[2].decode()
        assert re.search(r"^stile_deadline_misses_total 1$", metrics, re.M)
        status, body = server.post("/v1/embeddings", {"input": "x"}, headers={"X-Stile-Target-Ms": "soon"})
        assert status == 400 and body["error"]["param"] == "X-Stile-Target-Ms"
        status, body = server.post("/classify", {"inputs": "x"})
        assert status == 400 and "head" in body["error"]
    finally:
        assert server.stop() == 0

    # A store converted from a classifier answers /classify with its own head. The store keeps a
    # vocab.txt WordPiece: the test checkpoint's vocabulary is written out of its tokenizer.json.
    classifier = str(tmp_path / "bert_seqcls")
    shutil.copytree(os.path.join(HEADS, "bert_seqcls"), classifier)
    with open(os.path.join(classifier, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    with open(os.path.join(classifier, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    store = str(tmp_path / "seqcls.stile")
    assert stile.convert(classifier, store, bits=[32])["head_sidecar"] == store + ".head.safetensors"
    texts = ["a charming film", "dull and lifeless", "fine"]  # three: two would be one pair
    want = stile.TaskModel(classifier).classify(texts)
    server = Server("--store", store)
    try:
        status, got = server.post("/classify", {"inputs": texts})
        assert status == 200
        for g, w in zip(got, want):
            assert [d["label"] for d in g] == [d["label"] for d in w]
            assert np.allclose([d["score"] for d in g], [d["score"] for d in w], atol=1e-5)
    finally:
        assert server.stop() == 0


@needs_model
def test_the_readme_example_runs():
    out = subprocess.run([os.sys.executable, os.path.join(ROOT, "examples/serve_quickstart.py")], capture_output=True,
                         text=True, check=True, timeout=120, env={**os.environ, "STILE_SERVE": SERVE}).stdout
    assert out.split() == ["2", "384", "16"]
