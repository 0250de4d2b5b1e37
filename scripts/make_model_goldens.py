#!/usr/bin/env python3
"""Write golden outputs of the reference BERT (sentence-transformers all-MiniLM-L6-v2) for the C++ tests.

Run with the reference venv (see bench/peers/README.md for its setup):

    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_model_goldens.py \
        [--model ~/.cache/stile/all-MiniLM-L6-v2] [--sst2 /work/shared/data/sst2/dev.tsv] \
        [--out tests/model/data]

Writes into --out:
  goldens.bin   little-endian arrays (f32 / i32 / u8), each at a 16-byte aligned offset
  goldens.idx   line-based text index of goldens.bin (what the C++ tests read)
  goldens.json  human-readable summary (texts, wordpiece tokens, noise floor); not needed by tests
The format is documented in tests/model/data/README.md.

Reference semantics (what the goldens are):
  * token ids: the model's fast tokenizer, add_special_tokens, truncation at max_seq_length (256);
    token_type_ids all 0, attention_mask all 1 for the single runs.
  * hidden: BertModel last_hidden_state of the single, unpadded run (batch 1), eager attention, fp32.
  * mean: mean pooling over the (all-ones) attention mask, as sentence-transformers Pooling does.
  * embedding: mean / max(||mean||_2, 1e-12), as the Normalize module (= SentenceTransformer.encode).
  * cls: hidden row 0.
  * one padded batch of 8 sentences run together with an attention mask; the real rows of its
    last hidden state and its embeddings, to check padding does not change results.
"""
import argparse
import hashlib
import json
import os
import sys
import time
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HIDDEN_ROWS_LIMIT = 256  # store hidden states for cases up to this many tokens (size budget)
SIZE_BUDGET = 4 * 1024 * 1024


def log(*a):
    print(*a, flush=True)


def hard_cases(tokenizer, sst2_rest):
    """The 20+ hard cases: (category, text). Deterministic."""
    cases = [
        ("accents", "Café déjà vu: a naïve façade, a résumé in Ångström, São Paulo and Zürich."),
        ("combining", "e\u0301cole cafe\u0301 nai\u0308ve (decomposed accents) vs école café naïve"),
        ("cjk_chinese", "我喜欢这部电影，但是结局太突然了。"),
        ("cjk_japanese", "東京タワーはとても綺麗です！映画も最高でした。"),
        ("hangul", "이 영화는 정말 재미있어요"),
        ("emoji", "I loved it 😍🔥👍🏽 !!! 10/10 would watch again 🎬🍿"),
        ("punct_runs", "What?!?!... No way---really??? (((yes))) ;;; ''\"\"`` ~~~###$$$%%%"),
        ("long_words", "supercalifragilisticexpialidocious antidisestablishmentarianism "
                       "pneumonoultramicroscopicsilicovolcanoconiosis"),
        ("word_over_100_chars", "before " + "abcdefghij" * 12 + " after"),
        ("empty", ""),
        ("whitespace_only", " \t\n  \u3000 \r\n "),
        ("mixed_scripts", "Привет world! Γειά σου κόσμε, مرحبا بالعالم, שלום, नमस्ते 123 日本"),
        ("control_chars", "tab\there\x00nul\x07bell\u200bzero-width\ufeffbom\u00adsoft\ufffdrep\r\nend"),
        ("upper_numbers", "THE MOVIE WAS RELEASED IN 1999 FOR $3.5M (USD), A 45% DROP vs. 2001's 7,000,000."),
        ("smart_quotes", "\u201cSmart quotes\u201d and \u2018single\u2019 \u2013 en dash \u2014 em dash \u2026 ellipsis"),
        ("url_email", "Visit https://example.com/path?q=1&x=2 or mail me@example.org at 3:45pm."),
        ("fullwidth_ligature", "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３ Straße ﬁnancial œuvre"),
        ("special_tokens_in_text", "[CLS] literal [SEP] and [MASK] markers, [PAD] [UNK] ##ing ##s"),
        ("spaces_newlines", "   lots    of \t spaces\n\nand   newlines   "),
        ("single_char", "a"),
    ]
    # exactly 128 tokens: words from SST-2 dev sentences after the first 40, added while it fits
    words = " ".join(sst2_rest).split()
    text, n = "", 2
    for w in words:
        cand = (text + " " + w) if text else w
        m = len(tokenizer(cand, add_special_tokens=True)["input_ids"])
        if m > 128:
            continue
        text, n = cand, m
        if n == 128:
            break
    assert n == 128, n
    cases.append(("len128", text))
    # needs truncation at 256: ~400 tokens of SST-2 words
    long_text = " ".join(words[:360])
    assert len(tokenizer(long_text)["input_ids"]) > 300
    cases.append(("truncated_256", long_text))
    return cases


class Blob:
    """Accumulates arrays into one little-endian buffer plus a text index."""

    def __init__(self):
        self.buf = bytearray()
        self.lines = []

    def add(self, key, name, arr):
        arr = np.ascontiguousarray(arr)
        if arr.dtype == np.float32:
            dt = "f32"
        elif arr.dtype == np.int32:
            dt = "i32"
        elif arr.dtype == np.uint8:
            dt = "u8"
        else:
            raise TypeError(arr.dtype)
        while len(self.buf) % 16:
            self.buf.append(0)
        off = len(self.buf)
        self.buf += arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        dims = " ".join(str(d) for d in arr.shape)
        self.lines.append(f"array {key} {name} {dt} {off} {arr.ndim} {dims}".rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/stile/all-MiniLM-L6-v2"))
    ap.add_argument("--sst2", default="/work/shared/data/sst2/dev.tsv")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "model", "data"))
    ap.add_argument("--n-sst2", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    log(f"[1/6] loading {args.model} (torch {torch.__version__})")
    st = SentenceTransformer(args.model, device="cpu")
    st.eval()
    max_len = int(st.max_seq_length)
    modules = json.load(open(os.path.join(args.model, "modules.json")))
    mod_types = [m["type"].rsplit(".", 1)[-1] for m in modules]
    pool_cfg = json.load(open(os.path.join(args.model, "1_Pooling", "config.json")))
    assert mod_types == ["Transformer", "Pooling", "Normalize"], mod_types
    assert pool_cfg["pooling_mode_mean_tokens"] and not pool_cfg["pooling_mode_cls_token"], pool_cfg
    tok = AutoTokenizer.from_pretrained(args.model)
    assert tok.is_fast, "need the fast tokenizer"
    bert = AutoModel.from_pretrained(args.model, attn_implementation="eager").eval()
    bert_sdpa = AutoModel.from_pretrained(args.model, attn_implementation="sdpa").eval()
    hidden = bert.config.hidden_size
    log(f"      modules {mod_types}, pooling mean, max_seq_length {max_len}, hidden {hidden}, "
        f"layers {bert.config.num_hidden_layers}, heads {bert.config.num_attention_heads}")

    log(f"[2/6] building cases from {args.sst2}")
    rows = open(args.sst2, encoding="utf-8").read().split("\n")
    assert rows[0].split("\t")[0] == "sentence", rows[0]
    sst = [r.split("\t")[0] for r in rows[1:] if r.strip()]
    cases = [("sst2", s) for s in sst[: args.n_sst2]]
    cases += hard_cases(tok, sst[args.n_sst2:])
    log(f"      {len(cases)} cases ({args.n_sst2} sst2 + {len(cases) - args.n_sst2} hard)")

    def encode_ids(text):
        e = tok(text, add_special_tokens=True, truncation=True, max_length=max_len)
        return e["input_ids"]

    def pool(h, mask):  # h [B,T,H] float32, mask [B,T]
        m = mask.unsqueeze(-1).to(h.dtype)
        mean = (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
        return mean, torch.nn.functional.normalize(mean, p=2, dim=1)

    log("[3/6] single unpadded runs")
    blob = Blob()
    results = []
    noise = {}
    sdpa_diff = 0.0
    st_diff = 0.0
    with torch.inference_mode():
        for i, (cat, text) in enumerate(cases):
            ids = encode_ids(text)
            full_len = len(tok(text, add_special_tokens=True)["input_ids"])
            # cross-check against sentence-transformers' own tokenization (applies max_seq_length)
            st_ids = st.tokenize([text])["input_ids"][0].tolist()
            assert st_ids == ids, (i, st_ids, ids)
            x = torch.tensor([ids], dtype=torch.long)
            mask = torch.ones_like(x)
            tt = torch.zeros_like(x)
            h = bert(input_ids=x, attention_mask=mask, token_type_ids=tt).last_hidden_state
            h2 = bert_sdpa(input_ids=x, attention_mask=mask, token_type_ids=tt).last_hidden_state
            sdpa_diff = max(sdpa_diff, (h - h2).abs().max().item())
            mean, emb = pool(h, mask)
            ref = st.encode([text], batch_size=1, convert_to_numpy=True)[0]
            st_diff = max(st_diff, float(np.abs(ref - emb[0].numpy()).max()))
            results.append(dict(cat=cat, text=text, ids=ids, hidden=h[0].numpy().copy(),
                                mean=mean[0].numpy().copy(), emb=emb[0].numpy().copy(),
                                truncated=full_len > len(ids), full_len=full_len))
            if i % 10 == 0 or i == len(cases) - 1:
                log(f"      case {i:3d} {cat:24s} {len(ids):4d} tokens")
    noise["eager_vs_sdpa_hidden_max_abs"] = sdpa_diff
    noise["sentence_transformers_encode_vs_golden_embedding_max_abs"] = st_diff

    log("[4/6] padded batch of 8")
    cand = sorted((len(r["ids"]), i) for i, r in enumerate(results) if len(r["ids"]) <= 64)
    distinct = []
    for n, i in cand:
        if not distinct or distinct[-1][0] != n:
            distinct.append((n, i))
    picks = [distinct[round(k * (len(distinct) - 1) / 7)][1] for k in range(8)]
    picks = [picks[k] for k in (3, 0, 7, 1, 5, 2, 6, 4)]  # mixed order: longest not first
    L = max(len(results[i]["ids"]) for i in picks)
    bids = np.zeros((8, L), dtype=np.int32)
    bmask = np.zeros((8, L), dtype=np.int32)
    for j, i in enumerate(picks):
        n = len(results[i]["ids"])
        bids[j, :n] = results[i]["ids"]
        bmask[j, :n] = 1
    # the tokenizer's own padding must agree with ours
    tb = tok([results[i]["text"] for i in picks], padding=True, truncation=True, max_length=max_len)
    assert np.array_equal(np.array(tb["input_ids"]), bids) and np.array_equal(np.array(tb["attention_mask"]), bmask)
    with torch.inference_mode():
        x = torch.from_numpy(bids).long()
        m = torch.from_numpy(bmask).long()
        bh = bert(input_ids=x, attention_mask=m, token_type_ids=torch.zeros_like(x)).last_hidden_state
        bmean, bemb = pool(bh, m)
    bd_h = bd_e = 0.0
    for j, i in enumerate(picks):
        n = len(results[i]["ids"])
        bd_h = max(bd_h, float(np.abs(bh[j, :n].numpy() - results[i]["hidden"]).max()))
        bd_e = max(bd_e, float(np.abs(bemb[j].numpy() - results[i]["emb"]).max()))
    noise["batch_vs_single_hidden_max_abs"] = bd_h
    noise["batch_vs_single_embedding_max_abs"] = bd_e
    log(f"      batch cases {picks}, lengths {[len(results[i]['ids']) for i in picks]}, padded to {L}")
    log(f"      reference noise floor: batch vs single  hidden max|d| = {bd_h:.3e}, embedding max|d| = {bd_e:.3e}")
    log(f"                             eager vs sdpa     hidden max|d| = {sdpa_diff:.3e}")
    log(f"                             ST.encode vs golden embedding max|d| = {st_diff:.3e}")

    log("[5/6] writing arrays")
    for i, r in enumerate(results):
        blob.add(i, "text", np.frombuffer(r["text"].encode("utf-8"), dtype=np.uint8))
        blob.add(i, "ids", np.array(r["ids"], dtype=np.int32))
        if len(r["ids"]) <= HIDDEN_ROWS_LIMIT:
            blob.add(i, "hidden", r["hidden"].astype(np.float32))
        blob.add(i, "mean", r["mean"].astype(np.float32))
        blob.add(i, "embedding", r["emb"].astype(np.float32))
        blob.add(i, "cls", r["hidden"][0].astype(np.float32))
    blob.add("batch", "ids", bids)
    blob.add("batch", "mask", bmask)
    for j, i in enumerate(picks):
        n = len(results[i]["ids"])
        blob.add(f"batch.{j}", "hidden", bh[j, :n].numpy().astype(np.float32))
        blob.add(f"batch.{j}", "embedding", bemb[j].numpy().astype(np.float32))
    data = bytes(blob.buf)
    if len(data) > SIZE_BUDGET:
        sys.exit(f"goldens.bin is {len(data)} bytes, over the {SIZE_BUDGET} budget: lower HIDDEN_ROWS_LIMIT")
    crc = zlib.crc32(data) & 0xFFFFFFFF

    head = [
        "# stile golden outputs: see README.md in this folder. Generated by scripts/make_model_goldens.py",
        "stile-goldens 1",
        f"model all-MiniLM-L6-v2 hidden {hidden} layers {bert.config.num_hidden_layers} "
        f"heads {bert.config.num_attention_heads} max_seq_length {max_len} pooling mean normalize 1",
        f"data goldens.bin {len(data)} crc32 {crc:08x}",
        f"reference torch {torch.__version__} transformers {__import__('transformers').__version__} "
        f"tokenizers {__import__('tokenizers').__version__} sentence_transformers "
        f"{__import__('sentence_transformers').__version__} attention eager threads {args.threads}",
    ]
    for k, v in noise.items():
        head.append(f"noise {k} {v:.9e}")
    head.append(f"cases {len(results)}")
    for i, r in enumerate(results):
        head.append(f"case {i} {r['cat']} {len(r['ids'])} {int(r['truncated'])} "
                    f"{int(len(r['ids']) <= HIDDEN_ROWS_LIMIT)}")
    head.append(f"batch 8 {L} " + " ".join(str(i) for i in picks))
    idx_text = "\n".join(head + blob.lines) + "\nend\n"

    summary = {
        "format": "see README.md; goldens.idx + goldens.bin are authoritative, this file is for people",
        "model": os.path.basename(os.path.normpath(args.model)),
        "max_seq_length": max_len,
        "noise_floor": noise,
        "batch": {"cases": picks, "padded_len": L},
        "goldens_bin_sha256": hashlib.sha256(data).hexdigest(),
        "cases": [
            {"id": i, "category": r["cat"], "text": r["text"], "n_tokens": len(r["ids"]),
             "untruncated_tokens": r["full_len"], "truncated": r["truncated"], "ids": r["ids"],
             "tokens": tok.convert_ids_to_tokens(r["ids"])}
            for i, r in enumerate(results)
        ],
    }

    log(f"[6/6] writing {out}")
    for name, payload, mode in (("goldens.bin", data, "wb"), ("goldens.idx", idx_text, "w"),
                                ("goldens.json", json.dumps(summary, ensure_ascii=False, indent=1) + "\n", "w")):
        path = os.path.join(out, name)
        tmp = path + ".tmp"
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as f:
            f.write(payload)
        os.replace(tmp, path)
    log(f"      goldens.bin {len(data)} bytes crc32 {crc:08x}; goldens.idx {len(idx_text)} bytes; "
        f"{sum(1 for r in results if len(r['ids']) <= HIDDEN_ROWS_LIMIT)}/{len(results)} cases with hidden states")


if __name__ == "__main__":
    t0 = time.time()
    main()
    log(f"done in {time.time() - t0:.1f} s")
