#!/usr/bin/env python3
"""Write tests/tokenizer/data/normalizers.jsonl: what the reference's normalizers make of a set of
texts, character by character, for tests/tokenizer/test_normalizers.cpp.

The reference is Hugging Face tokenizers (the installed Python binding, .venv-ref). Each normalizer
is built the way a tokenizer.json builds it (Tokenizer.from_str), run on a PreTokenizedString, and
the result split into single characters (onig "(?m)." isolated), whose get_splits(original, byte)
offsets are each normalized character's origin: the bytes of the text it came from.

One JSON object a line:
  {"label", "normalizer": its JSON, or null with "normalizer_from": a tokenizer.json under
   tests/tokenizer/data whose normalizer is used, "text", "chars": [code points],
   "origins": [[begin, end], ...]}
Texts on which the reference panics (e.g. a NormalizedString that starts with a character
inserted at offset 0 followed by NFD) are left out.

Run from the repository root:
    .venv-ref/bin/python scripts/make_normalizer_goldens.py
"""
import json
import os
import random

from tokenizers import PreTokenizedString, Regex, Tokenizer
from tokenizers.models import WordLevel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "tokenizer", "data")
OUT = os.path.join(DATA, "normalizers.jsonl")


def build(cfg):
    t = Tokenizer(WordLevel({"a": 0}, unk_token="a"))
    d = json.loads(t.to_str())
    d["normalizer"] = cfg
    return Tokenizer.from_str(json.dumps(d)).normalizer


def run(norm, text):
    pts = PreTokenizedString(text)
    pts.normalize(lambda n: norm.normalize(n))
    pts.split(lambda i, n: n.split(Regex("(?m)."), "isolated"))
    splits = pts.get_splits(offset_referential="original", offset_type="byte")
    return [ord(s) for s, _, _ in splits], [list(o) for _, o, _ in splits]


HANDPICKED = [
    "",
    "Hello World",
    "  Héllo,   wörld!  ",
    "\u00c5ngstr\u00f6m \u212b \u2126 \u212a",                 # singletons
    "e\u0301 e\u0316\u0301 e\u0301\u0316 a\u0328\u0301",         # composition, reordering
    "\u1100\u1161\u11a8 \uac00\u11a8 \uac01 \ud7a3",             # Hangul
    "\u0958 \u0915\u093c \u2adc \u2add\u0338",                   # composition exclusions
    "\ufb01 \u2460 \uff21\uff22 \u3300 \u00bd \u2163 \u1d400",   # compatibility
    "\u0344 \u0f73 \u0f75 \u0f81 \u0340\u0341\u0343",           # non-starter decompositions
    "e" + "\u0301" * 20 + "\u0316" * 5 + "\u0334",               # a long mark run
    "\u0130stanbul \u0130I\u0131 \u03a3\u039f\u03a3 \u1e9e \u2c2f",  # case
    "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627 \u05e9\u05c1\u05b8",
    "\u4e2d\u6587abc\u3042\u304b\u3099 \uf900 \U00020000",      # CJK, kana with voicing
    "tab\there\nnew\r\nline\u000b\u000c\u0085\u00a0\u1680\u2003\u2028\u3000end",
    "\u0000nul\u0001\u007f\u009f\u00ad\u200b\u200d\ufeff\ufffd\u2581x",
    "\U0001f600\U0001f468\u200d\U0001f469\ufe0f \U0001f1fa\U0001f1f8 \u00a0\u0301",
    "\uff21\u0301b \u00a0\u0897 \u0e33\u0e49 \u0ec9\u0eb3",
    "Me llam\u00f3 \u1ead\u2026 \u0e33\u0e19\u0e49\u0e33",
    "'quoted' ``Backticks'' \u201csmart\u201d \u2014 dash",
    # Precompiled's 6-byte grapheme rule with marks newer than utf8proc's Unicode 15.0
    "\u0f77\u05c4\U0001611e\u0119 \u00a0\u05c4\u0897 \u00a0\u05c4\U000113b8 \u00a0\u1acf",
]

POOL = (list("aAeEsSkK .,'") + [chr(c) for c in range(0x300, 0x316)] + [chr(c) for c in range(0x591, 0x59A)] +
        [chr(c) for c in [0x1100, 0x1161, 0x11A8, 0xAC00, 0x958, 0x212B, 0xFB01, 0xFF21, 0x130, 0xA0, 0x3000,
                          0x4E00, 0x309A, 0x304B, 0xFFFD, 0x1, 0x200B, 0x2581, 0x1E0A, 0x323, 0x307, 0x1F600,
                          0x200D, 0xD, 0xA, 0x9, 0x897, 0x0B47, 0x0B3E, 0x110BA, 0x11099, 0x1D15E, 0x2126]])


def configs():
    out = [({"type": t}, t) for t in ["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Nmt",
                                       "ByteLevel"]]
    for clean, chinese, strip, lower in [(True, True, None, True), (True, True, None, False),
                                         (False, False, True, False), (True, False, False, True)]:
        out.append(({"type": "BertNormalizer", "clean_text": clean, "handle_chinese_chars": chinese,
                     "strip_accents": strip, "lowercase": lower}, "Bert"))
    for left, right in [(True, True), (True, False), (False, True)]:
        out.append(({"type": "Strip", "strip_left": left, "strip_right": right}, "Strip"))
    out.append(({"type": "Prepend", "prepend": "\u2581"}, "Prepend"))
    out.append(({"type": "Prepend", "prepend": ""}, "Prepend"))
    out.append(({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}, "Replace"))
    out.append(({"type": "Replace", "pattern": {"String": "e\u0301"}, "content": ""}, "Replace"))
    out.append(({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, "Replace"))
    out.append(({"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "StripAccents"},
                                                     {"type": "Lowercase"}]}, "Sequence"))
    return out


def main():
    random.seed(41)
    texts = HANDPICKED + ["".join(random.choice(POOL) for _ in range(random.randint(1, 16))) for _ in range(12)]
    lines = []

    def add(label, cfg, source, norm):
        for text in texts:
            try:
                chars, origins = run(norm, text)
            except BaseException:  # a panic of the reference: nothing to compare with
                continue
            lines.append(json.dumps({"label": label, "normalizer": cfg, "normalizer_from": source, "text": text,
                                     "chars": chars, "origins": origins}))

    for cfg, label in configs():
        add(label, cfg, None, build(cfg))
    # A real SentencePiece charsmap (nmt_nfkc), from a committed tokenizer.json.
    for name in ["xlm_roberta", "albert"]:
        source = "json/%s.tokenizer.json" % name
        with open(os.path.join(DATA, source)) as f:
            cfg = json.load(f)["normalizer"]
        add("Precompiled (%s)" % name, None, source, build(cfg))
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", OUT, len(lines), "cases")


if __name__ == "__main__":
    main()
