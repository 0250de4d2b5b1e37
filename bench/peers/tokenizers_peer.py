#!/usr/bin/env python3
"""The peer of bench/run_tokenizer_bench: Hugging Face tokenizers (the Rust library through its
Python binding) encoding on one thread, and the texts the bench times.

  texts     --tokenizer FILE --sst2 DEV_TSV --sentences OUT --docs OUT [--doc-tokens 512]
            SST-2 dev sentences one a line, and documents of about 512 tokens for this tokenizer
            (consecutive dev sentences joined until the tokenizer gives doc-tokens - 2 tokens).
  time      --tokenizer FILE --texts FILE [--seconds S] [--pairs]
            prints one JSON object: {"batch": {...}, "loop": {...}}, each with texts, tokens,
            seconds, texts_per_s, tokens_per_s, us_per_text. batch: Tokenizer.encode_batch over all
            texts (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false: one thread); loop:
            Tokenizer.encode text by text.
  summarize RESULTS.jsonl   the table: per tokenizer and text set, medians over the rounds.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402


def load(path):
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(path)
    t.no_truncation()
    t.no_padding()
    return t


def cmd_texts(a):
    tok = load(a.tokenizer)
    sentences = []
    with open(a.sst2, encoding="utf-8") as f:
        next(f)
        for line in f:
            s = line.rstrip("\n").split("\t")[0].strip()
            if s:
                sentences.append(s)
    with open(a.sentences, "w", encoding="utf-8") as f:
        f.write("\n".join(sentences) + "\n")
    docs, cur = [], []
    target = a.doc_tokens - 2
    i = 0
    while len(docs) < a.docs_count:
        cur.append(sentences[i % len(sentences)])
        i += 1
        n = len(tok.encode(" ".join(cur), add_special_tokens=False).ids)
        if n >= target:
            # cut the last sentence's words until the document is at most `target` tokens
            words = " ".join(cur).split(" ")
            while len(tok.encode(" ".join(words), add_special_tokens=False).ids) > target:
                words.pop()
            docs.append(" ".join(words))
            cur = []
    with open(a.docs, "w", encoding="utf-8") as f:
        f.write("\n".join(docs) + "\n")


def rate(texts, tokens, seconds):
    return {"texts": texts, "tokens": tokens, "seconds": seconds, "texts_per_s": texts / seconds,
            "tokens_per_s": tokens / seconds, "us_per_text": 1e6 * seconds / texts}


def timed(fn, per_pass, seconds):
    fn()  # warm-up
    start = time.perf_counter()
    done = tokens = 0
    while True:
        tokens += fn()
        done += per_pass
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return rate(done, tokens, elapsed)


def cmd_time(a):
    tok = load(a.tokenizer)
    with open(a.texts, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if a.pairs:
        inputs = [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]
        batch = lambda: sum(len(e.ids) for e in tok.encode_batch(inputs))  # noqa: E731
        loop = lambda: sum(len(tok.encode(x, y).ids) for x, y in inputs)  # noqa: E731
    else:
        inputs = lines
        batch = lambda: sum(len(e.ids) for e in tok.encode_batch(inputs))  # noqa: E731
        loop = lambda: sum(len(tok.encode(x).ids) for x in inputs)  # noqa: E731
    print(json.dumps({"batch": timed(batch, len(inputs), a.seconds), "loop": timed(loop, len(inputs), a.seconds)}))


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cmd_summarize(a):
    rows = [json.loads(l) for l in open(a.results, encoding="utf-8") if l.strip()]
    cells = {}
    for r in rows:
        cells.setdefault((r["tokenizer"], r["texts"]), []).append(r)
    print(f"Single-thread encode throughput, stile vs Hugging Face tokenizers "
          f"{__import__('tokenizers').__version__} (medians of {max(len(v) for v in cells.values())} alternating "
          f"rounds), on {cpu_model()}")
    print(f"{'tokenizer':16s} {'texts':10s} {'stile texts/s':>14s} {'HF batch':>10s} {'HF loop':>10s} "
          f"{'stile us/text':>13s} {'stile tok/s':>12s} {'HF batch tok/s':>14s} {'x batch':>8s} {'x loop':>7s}")
    for (name, texts), rs in cells.items():
        st = statistics.median(r["stile"]["texts_per_s"] for r in rs)
        hb = statistics.median(r["hf"]["batch"]["texts_per_s"] for r in rs)
        hl = statistics.median(r["hf"]["loop"]["texts_per_s"] for r in rs)
        us = statistics.median(r["stile"]["us_per_text"] for r in rs)
        stt = statistics.median(r["stile"]["tokens_per_s"] for r in rs)
        hbt = statistics.median(r["hf"]["batch"]["tokens_per_s"] for r in rs)
        locked = sum(1 for r in rs if r.get("locked", True))
        load = statistics.median(r.get("load", 0.0) for r in rs)
        check = "" if rs[0]["stile"]["tokens"] / rs[0]["stile"]["texts"] == rs[0]["hf"]["batch"]["tokens"] / rs[0]["hf"]["batch"]["texts"] else "  (token counts differ!)"
        print(f"{name:16s} {texts:10s} {st:14.0f} {hb:10.0f} {hl:10.0f} {us:13.1f} {stt:12.0f} {hbt:14.0f} "
              f"{st / hb:7.2f}x {st / hl:6.2f}x  load {load:.1f}, {locked}/{len(rs)} locked{check}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("texts")
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--sst2", required=True)
    t.add_argument("--sentences", required=True)
    t.add_argument("--docs", required=True)
    t.add_argument("--doc-tokens", type=int, default=512)
    t.add_argument("--docs-count", type=int, default=40)
    m = sub.add_parser("time")
    m.add_argument("--tokenizer", required=True)
    m.add_argument("--texts", required=True)
    m.add_argument("--seconds", type=float, default=1.0)
    m.add_argument("--pairs", action="store_true")
    s = sub.add_parser("summarize")
    s.add_argument("results")
    a = p.parse_args()
    {"texts": cmd_texts, "time": cmd_time, "summarize": cmd_summarize}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
