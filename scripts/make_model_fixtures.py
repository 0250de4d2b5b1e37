#!/usr/bin/env python3
"""Fixtures for tests/tokenizer/test_models.cpp: small WordPiece, BPE and Unigram models trained
with the reference (Hugging Face tokenizers, /work/main/.venv-ref) on SST-2 train.tsv lines, and
the reference's tokens for pieces run through each model alone (Model.tokenize).

    .venv-ref/bin/python scripts/make_model_fixtures.py            # writes tests/tokenizer/data/models/
    .venv-ref/bin/python scripts/make_model_fixtures.py --out /tmp/sweep --pieces 20000 --vocab 4000
    .venv-ref/bin/python scripts/make_model_fixtures.py --out /tmp/sweep --texts 20000 \
        --from-tokenizer tests/tokenizer/data/json/*.tokenizer.json   # real pipelines' pieces

The sweeps are checked by test_models' hidden case: STILE_MODEL_SWEEP=/tmp/sweep test_models "[.sweep]"
(parity per model and microseconds per 1000 pieces).

Written per model variant NAME:
    NAME.json         the tokenizer.json "model" object, as the reference writes it (some variants
                      edited: options, the legacy "a b" merges), reloaded by the reference to
                      produce the cases, so the cases are what the reference makes of this file;
    NAME.cases.jsonl  one line per piece: ["piece", [[id, begin, end], ...]], begin/end in code
                      points of the piece (the reference reports bytes: a token covers the
                      characters its bytes touch, as the reference's pipeline converts them).

Training uses train.tsv lines only (the first --train-lines); the pieces are words of later
train.tsv lines (whitespace/punctuation split, as BertPreTokenizer would give) plus hard pieces:
characters outside the vocab, emoji, accents, CJK, very long words, repeated letters (merge
ties), the unk token written out, the continuation prefix.
"""
import argparse
import json
import os
import random
import sys

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "..", "shared", "data", "sst2", "train.tsv")


def sst2_lines():
    with open(TRAIN, encoding="utf-8") as f:
        next(f)
        return [line.split("\t")[0] for line in f]


def words_of(lines):
    pre = pre_tokenizers.BertPreTokenizer()
    for line in lines:
        for word, _ in pre.pre_tokenize_str(line):
            yield word


def hard_pieces(rng):
    fixed = [
        "a", "the", "unbelievably", "antidisestablishmentarianism", "aaaaaaaaaaaaaaaa", "abababababab",
        "lll", "llll", "eeeee", "ssss", "mississippi", "bananas", "rrrrrrrrr",
        "é", "café", "naïve", "über", "façade", "Ωmega", "日本語", "中文字", "한국어", "العربية",
        "😀", "😀😀", "a😀b", "👍🏽", "🇫🇷", "e\u0301", "\u200b", "x\u00a0y", "\ufffd", "\U0010ffff",
        "ﬁ", "Ⅻ", "½", "①", "𝔘𝔫𝔦", "ǅ", "ß", "İ", "ΣΑΣ",
        "[UNK]", "<unk>", "##", "##ing", "#", "</w>", "a</w>", "<0x41>", "▁", "▁the",
        "ab" * 60, "x" * 99, "y" * 100, "z" * 101, "the" * 40, "q" * 120,
        "123456789", "3.14", "...", "!!!", "--", "''", "a-b", "A", "THE", "Hello",
        "\u00e9\u00e9\u00e9", "zzqzzq", "qj", "ŋ", "ƒ", "ÿ", "Ā",
    ]
    # Random strings over a mix of ASCII, Latin-1, other scripts and emoji.
    alphabet = list("abcdefghijklmnopqrstuvwxyz") * 4 + list("éèüñçß") + list("日本語中文") + ["😀", "👍", "∑", "ж", "ǅ"]
    for _ in range(60):
        fixed.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))))
    # Strings over few letters: merge ties and overlapping merges everywhere (bpe_handmade).
    for _ in range(80):
        fixed.append("".join(rng.choice("abcé") for _ in range(rng.randint(1, 30))))
    return fixed


def chars_touched(piece, begin, end):
    """Byte range [begin, end) of piece -> the code points it touches."""
    starts = []
    at = 0
    for c in piece:
        starts.append(at)
        at += len(c.encode("utf-8"))
    n = len(piece)

    def char_of(b):
        i = 0
        while i + 1 < n and starts[i + 1] <= b:
            i += 1
        return i

    if n == 0:
        return 0, 0
    b = min(char_of(begin), n - 1) if begin < at else n - 1
    e = char_of(end - 1) + 1 if end < at else n
    return b, max(e, b + 1)


def train(kind, lines, vocab_size):
    if kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"])
    elif kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"])
    elif kind == "bpe_affix":
        tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"],
                                      continuing_subword_prefix="##", end_of_word_suffix="</w>")
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<unk>"], unk_token="<unk>")
    else:
        raise ValueError(kind)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(lines, trainer)
    return json.loads(tok.to_str())["model"]


def byte_tokens():
    return ["<0x%02X>" % b for b in range(256)]


def variants(lines, vocab_size):
    """(name, model json) pairs."""
    out = []
    wp = train("wordpiece", lines, vocab_size)
    out.append(("wordpiece", wp))
    wp_short = dict(wp, max_input_chars_per_word=8)
    out.append(("wordpiece_short", wp_short))
    # No continuation prefix: later pieces are looked up as they are.
    out.append(("wordpiece_no_prefix", dict(wp, continuing_subword_prefix="")))

    bpe = train("bpe", lines, vocab_size)
    out.append(("bpe", bpe))
    legacy = dict(bpe, merges=["%s %s" % tuple(m) for m in bpe["merges"]])
    legacy["merges"] = ["#version: 0.2"] + legacy["merges"]
    out.append(("bpe_legacy_fuse", dict(legacy, fuse_unk=True)))
    out.append(("bpe_ignore_merges", dict(bpe, ignore_merges=True)))
    out.append(("bpe_no_unk", dict(bpe, unk_token=None)))
    # byte_fallback: "<0xNN>" tokens appended for most bytes (some left out, so unk still shows).
    vocab = dict(bpe["vocab"])
    for t in byte_tokens():
        if t not in vocab and t not in ("<0xF0>", "<0x9F>"):
            vocab[t] = len(vocab)
    out.append(("bpe_byte_fallback", dict(bpe, vocab=vocab, byte_fallback=True, fuse_unk=True)))
    affix = train("bpe_affix", lines, vocab_size)
    out.append(("bpe_affix", affix))
    # Byte fallback with a prefix and a suffix: the reference falls back on their bytes too.
    avocab = dict(affix["vocab"])
    for t in byte_tokens():
        if t not in avocab:
            avocab[t] = len(avocab)
    out.append(("bpe_affix_byte_fallback", dict(affix, vocab=avocab, byte_fallback=True, unk_token=None)))
    # Hand-made: a merge listed twice (the later rank counts), two merges making one token
    # ("ab c" and "a bc"), merges of byte tokens, ties everywhere on strings over "abcé".
    hv = {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6, "ca": 7, "cab": 8, "aa": 9,
          "<0xC3>": 10, "<0xA9>": 11, "<0xC3><0xA9>": 12, "aaa": 13, "bca": 14}
    hm = [["b", "c"], ["a", "b"], ["c", "a"], ["ab", "c"], ["a", "bc"], ["c", "ab"], ["a", "a"], ["a", "b"],
          ["aa", "a"], ["bc", "a"], ["<0xC3>", "<0xA9>"]]
    out.append(("bpe_handmade", {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True,
                                 "ignore_merges": False, "vocab": hv, "merges": hm}))

    uni = train("unigram", lines, vocab_size)
    out.append(("unigram", uni))
    uvocab = list(uni["vocab"])
    have = {p for p, _ in uvocab}
    for t in byte_tokens():
        if t not in have and t not in ("<0xF0>", "<0x9F>"):
            uvocab.append([t, -20.0])
    out.append(("unigram_byte_fallback", dict(uni, vocab=uvocab, byte_fallback=True)))
    # Ties: equal scores everywhere, so only the reference's order decides.
    out.append(("unigram_ties", dict(uni, vocab=[[p, -1.0] for p, _ in uni["vocab"]])))
    return out


def write_cases(out_dir, name, model, pieces):
    """NAME.json (the model object) and NAME.cases.jsonl (the reference's tokens of each piece)."""
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(model, ensure_ascii=False) + "\n")
    # The reference reads the very file written.
    ref = Tokenizer.from_str(json.dumps({"version": "1.0", "model": model})).model
    with open(os.path.join(out_dir, name + ".cases.jsonl"), "w", encoding="utf-8") as f:
        for p in pieces:
            try:
                toks = ref.tokenize(p)
            except Exception:  # the reference refuses (a missing unk): recorded as such
                f.write(json.dumps([p, "error"], ensure_ascii=False) + "\n")
                continue
            rows = [[t.id, *chars_touched(p, *t.offsets)] for t in toks]
            f.write(json.dumps([p, rows], ensure_ascii=False, separators=(",", ":")) + "\n")
    print(name, len(pieces), "pieces", file=sys.stderr)


def from_tokenizers(files, out_dir, texts, seed):
    """The pieces a real pipeline gives its model: stress-corpus texts (scripts/tokenizer_stress_corpus.py)
    through the tokenizer's own normalizer and pre-tokenizer."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tokenizer_stress_corpus as corpus

    sentences = corpus.read_sst2(TRAIN)
    for path in files:
        name = os.path.basename(path).replace(".tokenizer.json", "").replace(".json", "")
        tok = Tokenizer.from_file(path)
        seen = set()
        pieces = []
        for case in corpus.cases(seed, texts, sentences, []):
            for raw in (case["text"], case["pair"]):
                if raw is None:
                    continue
                text = raw.decode("utf-8", "replace")
                if tok.normalizer is not None:
                    text = tok.normalizer.normalize_str(text)
                words = tok.pre_tokenizer.pre_tokenize_str(text) if tok.pre_tokenizer is not None else [(text, None)]
                for w, _ in words:
                    if w and w not in seen:
                        seen.add(w)
                        pieces.append(w)
        with open(path, encoding="utf-8") as f:
            model = json.load(f)["model"]
        write_cases(out_dir, name, model, pieces)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "tokenizer", "data", "models"))
    ap.add_argument("--train-lines", type=int, default=400)
    ap.add_argument("--vocab", type=int, default=400)
    ap.add_argument("--pieces", type=int, default=400, help="SST-2 words (distinct) per model")
    ap.add_argument("--from-tokenizer", nargs="+", help="tokenizer.json files: their models on their pipelines' pieces")
    ap.add_argument("--texts", type=int, default=20000, help="stress-corpus cases per --from-tokenizer file")
    ap.add_argument("--seed", type=int, default=7, help="the stress corpus's seed")
    args = ap.parse_args()
    if args.from_tokenizer:
        os.makedirs(args.out, exist_ok=True)
        from_tokenizers(args.from_tokenizer, args.out, args.texts, args.seed)
        return

    rng = random.Random(41)
    lines = sst2_lines()
    train_lines = lines[: args.train_lines]
    seen = set()
    pieces = []
    for w in words_of(lines[args.train_lines:]):
        if w not in seen:
            seen.add(w)
            pieces.append(w)
        if len(pieces) >= args.pieces:
            break
    pieces += [p for p in hard_pieces(rng) if p not in seen]

    os.makedirs(args.out, exist_ok=True)
    for name, model in variants(train_lines, args.vocab):
        write_cases(args.out, name, model, pieces)

if __name__ == "__main__":
    main()
