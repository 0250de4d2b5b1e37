"""Batch throughput: sentence embeddings per second over SST-2 dev (872 sentences, in file order,
cut into batches of B), end to end (tokenize, encode, pool, normalize), one engine at a time in
alternating rounds. stile (at the CPU's best SIMD target and forced to AVX2) packs each batch's
sentences without padding; ONNX Runtime runs the padded batch (the fp32 export, the same through
its transformer optimizer, and its dynamic int8 quantization, as bench/peers/bert_peers.py makes
them); PyTorch is sentence-transformers' encode (which sorts each call's sentences by length
before padding).

    python3 bench/batch_throughput.py [--batches 8,32] [--threads 1,2] [--rounds 3] [--json FILE]

Each engine runs in its own worker process (stile in build/pyenv, the peers in .venv-ref), loaded
and warmed before the timed rounds; the figure per cell is the median over rounds of one pass over
the sentences. The ONNX files come from bench/peers/bert_peers.py's cache (~/.cache/stile/peers).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2")
PEERS_CACHE = os.path.expanduser("~/.cache/stile/peers")
SST2_DEV = os.path.join(ROOT, "..", "shared/data/sst2/dev.tsv")
STILE_PYTHON = os.path.join(ROOT, "build/pyenv/bin/python")
PEER_PYTHON = os.path.join(ROOT, ".venv-ref/bin/python")
ENGINES = {"stile fp32": STILE_PYTHON, "stile int8": STILE_PYTHON, "stile fp32 AVX2": STILE_PYTHON,
           "stile int8 AVX2": STILE_PYTHON, "ONNX Runtime fp32": PEER_PYTHON,
           "ONNX Runtime fp32 optimized": PEER_PYTHON, "ONNX Runtime int8": PEER_PYTHON, "PyTorch fp32": PEER_PYTHON}
ONNX_FILES = {"ONNX Runtime fp32": "-eager-ts.onnx", "ONNX Runtime fp32 optimized": ".opt.onnx",
              "ONNX Runtime int8": ".int8-pc.onnx"}


def sentences():
    with open(SST2_DEV, encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f.read().splitlines()[1:]]


def onnx_file(suffix):
    found = sorted(glob.glob(os.path.join(PEERS_CACHE, "all-MiniLM-L6-v2-*" + suffix)))
    if not found:
        sys.exit(f"no {suffix} in {PEERS_CACHE}: run bench/peers/bert_peers.py with --engines "
                 "onnxruntime,onnxruntime-opt,onnxruntime-int8 once")
    return found[-1]


def make_encoder(engine, threads):
    """A function that embeds a list of sentences (normalized, as the model's pipeline does)."""
    if engine.startswith("stile"):
        import stile
        if engine.endswith("AVX2"):
            stile.set_simd_target("AVX2")  # what a laptop without AVX-512 runs
        model = stile.SentenceEncoder(MODEL, precision=engine.split()[1], threads=threads)
        return lambda batch: model.encode(batch, batch_size=len(batch))
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    if engine.startswith("PyTorch"):
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(MODEL, device="cpu")
        return lambda batch: st.encode(batch, batch_size=len(batch), convert_to_numpy=True)
    import onnxruntime as ort
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    path = onnx_file(ONNX_FILES[engine])
    session = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}

    def encode(batch):
        feeds = tokenizer(batch, padding=True, truncation=True, max_length=256, return_tensors="np")
        feeds = {k: v.astype(np.int64) for k, v in feeds.items() if k in names}
        hidden = session.run(None, feeds)[0]
        mask = feeds["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    return encode


def worker(engine, threads, batch):
    """Loads, warms up, then times one pass per "go" on stdin and answers with its seconds."""
    texts = sentences()
    batches = [texts[i:i + batch] for i in range(0, len(texts), batch)]
    encode = make_encoder(engine, threads)
    for b in batches:  # warm-up pass
        encode(b)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        t0 = time.perf_counter()
        for b in batches:
            encode(b)
        print(time.perf_counter() - t0, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--worker-threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.worker_threads, args.batch)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from machine import cpu_name
    n = len(sentences())
    results = []
    cells = [(int(t), int(b)) for t in args.threads.split(",") for b in args.batches.split(",")]
    for k, (threads, batch) in enumerate(cells):
        procs = {}
        for engine, python in ENGINES.items():
            print(f"[{k + 1}/{len(cells)}] {threads} thread(s), batch {batch}: loading {engine}", file=sys.stderr,
                  flush=True)
            p = subprocess.Popen([python, os.path.abspath(__file__), "--worker", engine, "--batch", str(batch),
                                  "--worker-threads", str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if p.stdout.readline().strip() != "ready":
                sys.exit(f"{engine} did not start")
            procs[engine] = p
        seconds = {e: [] for e in procs}
        for _ in range(args.rounds):
            for engine, p in procs.items():  # alternate within each round
                p.stdin.write("go\n")
                p.stdin.flush()
                seconds[engine].append(float(p.stdout.readline()))
        for engine, p in procs.items():
            p.stdin.close()
            p.wait(timeout=60)
            s = statistics.median(seconds[engine])
            results.append({"engine": engine, "threads": threads, "batch": batch, "seconds": s,
                            "sentences_per_s": n / s, "rounds": seconds[engine]})
    out = {"cpu": cpu_name(), "sentences": n, "results": results}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    print(f"{out['cpu']}; SST-2 dev, {n} sentences; median of {args.rounds} alternating rounds\n")
    print("| threads | batch | engine | sentences/s | stile fp32 / this | stile int8 / this |")
    print("|---:|---:|---|---:|---:|---:|")
    by = {(r["engine"], r["threads"], r["batch"]): r for r in results}
    for threads, batch in cells:
        f32 = by[("stile fp32", threads, batch)]["sentences_per_s"]
        i8 = by[("stile int8", threads, batch)]["sentences_per_s"]
        for engine in ENGINES:
            r = by[(engine, threads, batch)]["sentences_per_s"]
            print(f"| {threads} | {batch} | {engine} | {r:.0f} | {f32 / r:.2f}x | {i8 / r:.2f}x |")


if __name__ == "__main__":
    main()
