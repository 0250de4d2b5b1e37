#!/usr/bin/env python3
"""Writes tests/tokenizer/data/pre_tokenizers.jsonl: pre-tokenizer goldens from the reference
(Hugging Face tokenizers, the Python binding in .venv-ref).

The first line: {"configs": {name: the tokenizer.json pre_tokenizer object}}; then one line per
case: {"name", "text", "pieces"}, pieces being [piece, begin, end] with begin/end BYTE offsets into the UTF-8 text (the reference's
pre_tokenize_str gives character offsets; converted here). Texts: hand-picked cases (empty
matches, every split behaviour, prefixes, multi-byte characters) and samples over all code points
(each alone in a run of its neighbours, between letters, next to spaces and digits).

Run: .venv-ref/bin/python scripts/make_pre_tokenizer_goldens.py   (from the repository root)
"""
import json

from tokenizers import Tokenizer

BASE = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")


def split(pattern, behavior, invert=False, kind="Regex"):
    return {"type": "Split", "pattern": {kind: pattern}, "behavior": behavior, "invert": invert}


CONFIGS = {
    "bert": {"type": "BertPreTokenizer"},
    "bytelevel": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "bytelevel_noprefix": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
    "bytelevel_noregex": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False},
    "metaspace": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    "metaspace_first_nosplit": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                "split": False},
    "metaspace_legacy": {"type": "Metaspace", "replacement": "_", "add_prefix_space": False,
                         "prepend_scheme": "never", "str_rep": "_"},
    "whitespace": {"type": "Whitespace"},
    "whitespace_split": {"type": "WhitespaceSplit"},
    "punct_isolated": {"type": "Punctuation", "behavior": "Isolated"},
    "punct_default": {"type": "Punctuation"},
    "punct_contiguous": {"type": "Punctuation", "behavior": "Contiguous"},
    "punct_mwp": {"type": "Punctuation", "behavior": "MergedWithPrevious"},
    "punct_mwn": {"type": "Punctuation", "behavior": "MergedWithNext"},
    "punct_removed": {"type": "Punctuation", "behavior": "Removed"},
    "digits": {"type": "Digits", "individual_digits": False},
    "digits_individual": {"type": "Digits", "individual_digits": True},
    "delimiter": {"type": "CharDelimiterSplit", "delimiter": "x"},
    "fixed3": {"type": "FixedLength", "length": 3},
    "fixed_default": {"type": "FixedLength"},
    "split_gpt2": split(GPT2, "Isolated"),
    "split_llama3": split(LLAMA3, "Isolated"),
    "split_ws_removed": split(r"\s+", "Removed"),
    "split_sstar_mwn": split(r"\s*", "MergedWithNext"),
    "split_sstar_contiguous_inverted": split(r"\s*", "Contiguous", True),
    "split_astar_mwp": split(r"a*", "MergedWithPrevious"),
    "split_astar_mwn": split(r"a*", "MergedWithNext"),
    "split_alt_empty": split(r"|a", "MergedWithNext"),
    "split_w_isolated": split(r"\w+", "Isolated"),
    "split_W_removed": split(r"\W+", "Removed"),
    "split_D_isolated": split(r"\D+", "Isolated"),
    "split_S_inverted": split(r"\S+", "Isolated", True),
    "split_punct_prop": split(r"\p{P}+", "MergedWithNext"),
    "split_han": split(r"\p{Han}+|\p{Hiragana}|\p{Katakana}", "Isolated"),
    "split_onig_syntax": split(r"\h+|(?m)<.>|^x|y$|\u00e9|a{,2}", "Isolated"),
    "split_str": split("ab", "MergedWithNext", False, "String"),
    "split_str_empty": split("", "Contiguous", False, "String"),
    "split_str_meta": split(".*", "Removed", True, "String"),
    "unicode_scripts": {"type": "UnicodeScripts"},
    "sequence": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                                                       {"type": "Digits", "individual_digits": True},
                                                       {"type": "Punctuation", "behavior": "Isolated"}]},
}

HAND = ["", " ", "  a", "a  ", "Hello world's  123 !!  ", "a\nb\r\n c  \t d", "the-final--countdown", "ab ab  abab",
        "don't I'M THEY'LL 1234567 x.*y", "\u00e9\u0301 caf\u00e9 na\u00efve", "\u2581a b", " \u2581", "__x _",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u3067\u3059\u3002", "a\u0085b\u000bc\u180ed\u00a0e",
        "ab\u200c\u200dcd", "\U0001F600 emoji \U0001F468\u200d\U0001F469 x", "baaac aab bc", "x\nx y\ny <\n>",
        "\u0661\u0662\u0663 \u00bd \u2167 \u0f2a", "ag09fz", "   leading and trailing   ", "a\u3000b\u2028c",
        "\U00010D40\U0001E030 \u1C89", " \u4eac\u3044\u30b0\u30fc abc123 \u0410\u0411 \u0378x \u0301a"]


def samples():
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    out = []
    step = 797  # one code point in 797 across the whole range, in runs of 48
    picked = cps[::step]
    for i in range(0, len(picked), 48):
        blk = picked[i:i + 48]
        out.append("".join(map(chr, blk)))
        out.append(" ".join("a%sb" % chr(c) for c in blk))
        out.append("".join(" %s%s1'" % (chr(c), chr(c)) for c in blk))
    return out


def reference(config, texts):
    doc = dict(BASE)
    doc["pre_tokenizer"] = config
    pre = Tokenizer.from_str(json.dumps(doc)).pre_tokenizer
    for t in texts:
        cum = [0]
        for ch in t:
            cum.append(cum[-1] + len(ch.encode()))
        yield [[p, cum[b], cum[e]] for p, (b, e) in pre.pre_tokenize_str(t)]


def main():
    sample_texts = samples()
    n = 0
    with open("tests/tokenizer/data/pre_tokenizers.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"configs": CONFIGS}, ensure_ascii=False) + "\n")
        for name, config in CONFIGS.items():
            # Every configuration gets the hand cases; the sample over all code points goes to those
            # whose classes differ (the rest would only repeat it).
            texts = HAND + (sample_texts if name in ("bert", "bytelevel", "whitespace", "digits",
                                                     "split_llama3", "split_han", "unicode_scripts") else [])
            for text, pieces in zip(texts, reference(config, texts)):
                f.write(json.dumps({"name": name, "text": text, "pieces": pieces}, ensure_ascii=False) + "\n")
                n += 1
    print("wrote %d goldens" % n)


if __name__ == "__main__":
    main()
