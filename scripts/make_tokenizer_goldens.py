#!/usr/bin/env python3
"""Write the WordPiece tokenizer goldens and the Unicode tables of the C++ tokenizer.

The reference is what Hugging Face gives for the default model (all-MiniLM-L6-v2):
`transformers.AutoTokenizer.from_pretrained(model_dir)`, the fast tokenizer built from the model's
tokenizer.json (BertNormalizer + BertPreTokenizer + WordPiece, the special tokens as added tokens).

Setup once (a venv of its own, no torch; .venv-ref is gitignored):

    python3 -m venv .venv-ref && .venv-ref/bin/pip install transformers tokenizers

Run from the repository root:

    .venv-ref/bin/python scripts/make_tokenizer_goldens.py \
        [--model-dir ~/.cache/stile/all-MiniLM-L6-v2] [--sst2 ../shared/data/sst2/dev.tsv]

Writes, all as small text files (see tests/tokenizer/data/README.md for the formats):
  tests/tokenizer/data/hard_cases.txt        the hard cases, one JSON string literal a line
  tests/tokenizer/data/hard_cases.ids        their ids (uncased, the model's tokenizer)
  tests/tokenizer/data/hard_cases_cased.ids  their ids with lowercase=False (cased normalizer)
  tests/tokenizer/data/sst2_dev.ids          ids of every sentence of sst2/dev.tsv
  tests/tokenizer/data/pairs.tsv             sentence pairs, with and without truncation
  tests/tokenizer/data/truncation.tsv        single sentences truncated to small max lengths
  tests/tokenizer/data/invalid_utf8.tsv      byte strings that are not UTF-8 (decoded as Python's
                                             errors="replace" does, then tokenized)
  tests/tokenizer/data/code_points.txt       what normalization + pre-tokenization do to every
                                             code point (run-length coded)
  include/stile/text/bert_unicode_tables.hpp   the character classes the reference uses, as tables

Why the tables come from probing the reference rather than from utf8proc alone: tokenizers' Rust
code takes its general categories (nonspacing marks, controls/format, punctuation) from the
unicode_categories crate, which is frozen at Unicode 8.0, its NFD from a fork of
unicode-normalization of its own age, and lower-casing from Rust's std (recent Unicode). utf8proc 2.8
is Unicode 15.0. They disagree on about 600 code points (marks and punctuation added after 8.0,
new format characters, one decomposition, recent case pairs), and a disagreement on whether a
character is dropped, kept, or splits a word changes ids. So the class tables are what the
reference does, code point by code point; utf8proc still does decomposition, combining classes and
case mapping, with a short list of overrides where the reference differs from it.
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import random
import sys
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import normalizers, pre_tokenizers  # noqa: E402
from transformers import AutoTokenizer, BertTokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LENGTH = 512  # model_max_length of the model, and the C++ tokenizer's default max_length


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------------
# Hard cases


def handwritten_cases():
    return [
        # empty and whitespace only
        "", " ", "   ", "\t", "\n", "\r\n", "\t\n\r ", "\u00a0", "\u3000", "\u2028\u2029",
        "\u2000\u2001\u2002\u200a", "\u202f\u205f", "\x0b\x0c", "\x85", "\u1680",
        # plain English, casing, contractions, abbreviations
        "Hello, world!", "HELLO WORLD", "hello world", "The quick brown fox jumps over the lazy dog.",
        "Don't stop believing.", "it's", "I'm, you're, they'll, we'd", "U.S.A.", "e.g. i.e. etc.",
        "e-mail", "state-of-the-art", "well...", "Wait—what?", "!!!???", "--", "---", "...",
        "\u2026", "a.b.c.d", "a-b-c", "mother-in-law's", "rock'n'roll", "O'Neill",
        "CamelCaseWord", "snake_case_word", "kebab-case-word", "ALLCAPSWORD", "MiXeD cAsE",
        # punctuation of all kinds
        "\u201cquoted\u201d", "\u2018single\u2019", "\u00abguillemets\u00bb", "\u00a1Hola!", "\u00bfQu\u00e9?",
        "(parens) [brackets] {braces}", "a+b=c", "x^2", "50% off", "$100.00", "\u20ac50", "\u00a3", "\u00a5",
        "#hashtag", "@user", "foo_bar", "foo/bar\\baz", "a~b", "`code`", "|pipe|", "<html>", "&amp;",
        "\u00a7 1", "\u00b6", "\u2022 bullet", "\u00b7middle\u00b7dot", "\u2014\u2013", "\u2030",
        "\u3002\uff0c\uff01", "\u300c\u300d", "\u203b", "\u2e2e", "\u055d", "\u060c\u061f", "\u0964",
        "a\u00b4b", "a\u00a8b", "a\u02c6b", "~~~", "***", "^_^", ":-)", "<3", "->", "=>", "!=",
        "\u2260", "\u226e", "\u2212", "\u00d7\u00f7", "\u00b1",
        # accents and composed / decomposed forms
        "caf\u00e9", "na\u00efve", "r\u00e9sum\u00e9", "Cr\u00e8me Br\u00fbl\u00e9e", "\u00c5ngstr\u00f6m",
        "\u212bngstr\u00f6m", "\u00d8resund", "\u0141\u00f3d\u017a", "stra\u00dfe", "\u00df", "\u1e9e",
        "\u00c6sir", "\u0153uvre", "\u0130stanbul", "\u0131", "\u01c5", "\ufb01nance", "\u216b", "\u2460",
        "\uff46\uff55\uff4c\uff4c\uff37\uff49\uff44\uff54\uff48", "cafe\u0301", "e\u0301\u0323",
        "e\u0323\u0301", "\u0301", "\u0301a", "a\u20dd", "\u00f1", "n\u0303", "\u1e69", "s\u0323\u0307",
        "\u1f82", "\u0344", "\u0340\u0341", "A\u030a", "Z\u0327\u030c", "\u01d5", "\u1e17",
        "a\u0301\u0301\u0301\u0301", "\u0300" * 5, "Vi\u1ec7t Nam", "Ti\u1ebfng Vi\u1ec7t",
        "\u0218\u021b", "\u015e\u015f", "\u00e7a va", "\u0107\u0161\u017e\u0111", "\u0151\u0171",
        # Greek, Cyrillic and others with case
        "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac", "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3",
        "\u1f45\u03c4\u03b9", "\u03c2", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
        "\u0401\u043b\u043a\u0430", "\u0419", "\u0532\u0561\u0580\u0565\u0582",
        "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u1c90\u1c91", "\u13a0\u13a1\uab70",
        # CJK and the other East Asian scripts
        "\u4f60\u597d\u4e16\u754c", "\u4e2d\u6587English\u6df7\u5408", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
        "\u30ab\u30bf\u30ab\u30ca", "\u3072\u3089\u304c\u306a", "\u304c\u30ac",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\uc548\ub155\ud558\uc138\uc694", "\u1100\u1161\u11a8",
        "\U00020000", "\U0002a700", "\U0002b81f", "\U0002b820", "\U0002b91f", "\U0002b920", "\U0002ceaf",
        "\U0002ceb0", "\uf900", "\ufa6e", "\U0002f800", "\u3400", "\u4dbf", "\u9fff", "\u3007", "\u3005",
        "\u2f00", "\u31c0", "\uff61\uff62", "\uff8a\uff9f", "abc\u4e00def", "\u4e00\u4e01\u4e02",
        # right-to-left and Indic scripts
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627", "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629",
        "\u0661\u0662\u0663", "\u06f1\u06f2", "\u0640\u0640", "\ufdfa", "\ufefb",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd", "\u05be",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0939\u093f\u0928\u094d\u0926\u0940",
        "\u0915\u093c", "\u0958", "\u0915\u094d\u200d\u0937", "\u0964\u0965", "\u09ac\u09be\u0982\u09b2\u09be",
        "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd", "\u0c24\u0c46\u0c32\u0c41\u0c17\u0c41", "\u0d2e\u0d32\u0d2f\u0d3e\u0d33\u0d02",
        "\u0dc3\u0dd2\u0d82\u0dc4\u0dbd", "\u1230\u120b\u121d", "\u0f56\u0f7c\u0f51\u0f0b", "\u1781\u17d2\u1798\u17c2\u179a",
        "\u1019\u103c\u1014\u103a\u1019\u102c", "\u0ea5\u0eb2\u0ea7", "\u1820\u1821\u180e\u1822",
        "\u0a2a\u0a70\u0a1c\u0a3e\u0a2c\u0a40", "\u0a97\u0ac1\u0a9c\u0ab0\u0abe\u0aa4\u0ac0",
        # emoji and symbols
        "\U0001f642", "I \u2764\ufe0f NY", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
        "\U0001f1fa\U0001f1f8", "\U0001f600\U0001f603\U0001f604", "\U0001f970", "#\ufe0f\u20e3", "\u00a9\u00ae\u2122",
        "\u2600\u2601", "\u2713\u2717", "\u2190\u2192", "\u221e", "\u2211\u222b", "\u266a", "\U0001d400\U0001d41a",
        "\U0001f9d1\u200d\U0001f4bb", "good\U0001f44dmovie", "\U0001fae0", "\U0001f3f3\ufe0f\u200d\U0001f308",
        # zero-width, format and bidi characters
        "zero\u200bwidth", "a\u200cb", "a\u200db", "\ufeffBOM", "a\u2060b", "soft\u00adhyphen",
        "\u200e\u200fltr rtl", "a\u034fb", "a\u180eb", "\u202aembedded\u202c", "a\u2066b\u2069",
        "a\ufe0fb", "\U000e0041", "a\U000e0001b", "\u061c", "\u0600\u0601", "a\u0890b", "a\u08e2b",
        "\U00013430", "\U000110cd",
        # control characters, noncharacters, private use
        "a\x00b", "\x00", "a\x01b", "a\x7fb", "tab\there", "new\nline", "cr\rlf", "a\x1fb", "a\x1cb",
        "\x80\x9f", "a\u0085b", "a\ufffdb", "\ufffd", "\ue000", "\U000f0000", "\U0010fffd", "\ufdd0",
        "\uffff", "\U0001ffff", "\U000e0100", "a\x0bb", "a\x0cb", "\x1b[31mred\x1b[0m",
        # marks that newer Unicode versions call nonspacing (the reference predates them)
        "e\u0898", "a\u07fd", "\u0a76", "\u1734", "a\u1734", "\U00011938", "\U00011935\U00011930",
        "\ua7cb", "\u1c89", "\u166d", "\u1b7d", "\u2e43", "\u2e52", "\u0f3a\u0f3b",
        # numbers
        "123", "3.14159", "1,000,000", "1st 2nd 3rd", "\u0663\u0664\u0665", "\u0967\u0968\u0969", "\u00bd",
        "\u00b2", "0x1F", "10^-9", "2023-01-15", "12:30pm", "+1 (555) 123-4567", "1e10", "-42", "007",
        "\u2153", "\u2167", "\uff11\uff12\uff13", "\U0001d7d9",
        # URLs, paths, markup, code
        "https://www.example.com/path?query=1&x=y#frag", "user@example.com", "C:\\Program Files\\x",
        "/usr/local/bin", "<a href=\"x\">link</a>", "{\"key\": [1, 2]}", "for (int i = 0; i < n; ++i) {}",
        "SELECT * FROM t WHERE x='y';", "$HOME/.config", "v1.2.3-rc.1", "md5:d41d8cd98f00b204e9800998ecf8427e",
        # special tokens written in the text
        "[CLS]", "[SEP]", "a[SEP]b", "[sep]", "[UNK]", "[PAD][PAD]", "[MASK]", "[CLS] hello [SEP] world [SEP]",
        "[[SEP]]", "[SEP", "SEP]", "[ SEP ]", "[unused0]", "[Sep]", "x[MASK]y[UNK]z", "[SEP]\u0301", "\u0301[SEP]",
        "caf\u00e9[SEP]na\u00efve", "##", "##ing", "un##able", "[", "]", "[]",
        # long words and the 100-character limit
        "a" * 99, "a" * 100, "a" * 101, "ab" * 60, "supercalifragilisticexpialidocious",
        "pneumonoultramicroscopicsilicovolcanoconiosis", "x" * 150 + " short", "\u00e9" * 100, "\u00e9" * 101,
        "e\u0301" * 100, "a" * 99 + "\u0301", "a" * 100 + "\u0301", "a" * 100 + "\u200b", "a" * 50 + "\u4e00" + "a" * 60,
        "\u4e00" * 120, "!" * 120, "\ud55c" * 40, "unbelievably" * 8, "the " * 200,
        # whitespace runs and mixtures
        "  leading", "trailing  ", "multiple    spaces", "\t\ttabs\t\t", "a\u3000b", "a\u00a0b", "a\u2009b",
        "line1\nline2\r\nline3\rline4", "Hello\u4e16\u754c", "na\u00efve caf\u00e9 \u6771\u4eac \U0001f642!",
        "\u041f\u0440\u0438\u0432\u0435\u0442 world", "\u0645\u0631\u062d\u0628\u0627 hello \u05e9\u05dc\u05d5\u05dd",
        "it 's a charming and often affecting journey . ",
    ]


def generated_cases(vocab_words):
    """Deterministic programmatic cases: every ASCII and Latin-1 character inside a word, samples of
    many Unicode blocks, random mixtures, and vocabulary words with case and accent noise."""
    cases = []
    for cp in range(0x00, 0x100):
        cases.append("x" + chr(cp) + "y")
    blocks = [0x0100, 0x0180, 0x0250, 0x02b0, 0x0300, 0x0370, 0x0400, 0x0500, 0x0530, 0x0590, 0x0600,
              0x0700, 0x0780, 0x07c0, 0x0800, 0x0900, 0x0980, 0x0a00, 0x0b00, 0x0c00, 0x0d00, 0x0e00,
              0x0f00, 0x1000, 0x10a0, 0x1100, 0x1200, 0x13a0, 0x1400, 0x1680, 0x16a0, 0x1780, 0x1800,
              0x1900, 0x1a00, 0x1ab0, 0x1b00, 0x1c80, 0x1cd0, 0x1d00, 0x1dc0, 0x1e00, 0x1f00, 0x2000,
              0x2070, 0x20a0, 0x20d0, 0x2100, 0x2150, 0x2190, 0x2200, 0x2300, 0x2460, 0x2500, 0x2600,
              0x2700, 0x27c0, 0x2c00, 0x2c60, 0x2d00, 0x2de0, 0x2e00, 0x2e40, 0x2e50, 0x2f00, 0x3000,
              0x3040, 0x30a0, 0x3130, 0x31f0, 0x3200, 0x3300, 0xa000, 0xa4d0, 0xa640, 0xa6a0, 0xa720,
              0xa7c0, 0xa800, 0xa8e0, 0xa900, 0xa980, 0xaa00, 0xab30, 0xac00, 0xd7b0, 0xe000, 0xfb00,
              0xfb50, 0xfe00, 0xfe10, 0xfe30, 0xfe50, 0xfe70, 0xff00, 0xff60, 0xfff0, 0x10000, 0x10300,
              0x10400, 0x10d40, 0x11000, 0x11900, 0x13430, 0x16ea0, 0x16f00, 0x1d100, 0x1d400, 0x1e900,
              0x1f000, 0x1f300, 0x1f600, 0x1f900, 0x1fa70, 0x20000, 0x2b820, 0x2b900, 0x2f800, 0xe0000,
              0xf0000]
    for start in blocks:
        cases.append("".join(chr(c) for c in range(start, start + 8) if not 0xD800 <= c <= 0xDFFF))
        cases.append("w" + "".join(chr(c) for c in range(start + 8, start + 16)) + "w")
    rng = random.Random(20240603)
    pool = ([chr(c) for c in range(0x20, 0x7f)] + list("\u00e9\u00e8\u00fc\u00f1\u00c5\u00df\u0131\u0130")
            + list("\u0301\u0308\u0323\u0338\u064e\u05b8\u093c\u0e31") + list("\u4e00\u4e8c\u65e5\u6587\uac00\ud7a3\u3042\u30a2")
            + list("\u0627\u05d0\u0915\u0e01\u0430\u03b1\u10d0\u1200") + list("\u200b\u200c\u200d\ufeff\u00ad\u2060")
            + list("\x00\x01\x07\x1f\x7f\x85\u2028\u3000\u00a0\t\n\r") + list("\u2018\u2019\u201c\u201d\u2014\u3001\uff01\u00bf")
            + ["\U0001f642", "\U0001f44d", "\U0001f3fd", "\u2764", "\ufe0f", "\U0001f1fa", "\ue000", "\ufffd", "\U00020001"])
    for _ in range(120):
        n = rng.randint(1, 40)
        cases.append("".join(rng.choice(pool) for _ in range(n)))
    accents = "\u0300\u0301\u0302\u0303\u0308\u0327"
    for _ in range(80):
        words = []
        for _ in range(rng.randint(1, 12)):
            w = rng.choice(vocab_words)
            r = rng.random()
            if r < 0.25:
                w = w.upper()
            elif r < 0.5:
                w = w.capitalize()
            elif r < 0.65:
                i = rng.randrange(len(w))
                w = w[:i + 1] + rng.choice(accents) + w[i + 1:]
            elif r < 0.75:
                w = unicodedata.normalize("NFC", w[0] + "\u0301") + w[1:]
            words.append(w)
        sep = rng.choice([" ", " ", " ", "", "-", ", ", "\t", "  "])
        cases.append(sep.join(words) + rng.choice(["", ".", "!", "?", " ...", "\U0001f642"]))
    return cases


# ---------------------------------------------------------------------------------------------
# Unicode tables and the code point goldens


def to_ranges(code_points):
    """Sorted code points -> [(first, last)] of consecutive runs."""
    ranges = []
    for cp in code_points:
        if ranges and ranges[-1][1] + 1 == cp:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return ranges


def load_utf8proc():
    path = ctypes.util.find_library("utf8proc") or "libutf8proc.so.2"
    lib = ctypes.CDLL(path)
    lib.utf8proc_tolower.restype = ctypes.c_int32
    lib.utf8proc_tolower.argtypes = [ctypes.c_int32]
    lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
    lib.utf8proc_decompose_char.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.c_ssize_t,
                                            ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.utf8proc_version.restype = ctypes.c_char_p
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    return lib


def utf8proc_nfd(lib, cp):
    buf = (ctypes.c_int32 * 16)()
    boundclass = ctypes.c_int(0)
    UTF8PROC_DECOMPOSE = 1 << 4
    n = lib.utf8proc_decompose_char(cp, buf, 16, UTF8PROC_DECOMPOSE, ctypes.byref(boundclass))
    assert 0 < n <= 16, (hex(cp), n)
    return "".join(chr(buf[i]) for i in range(n))


def all_code_points():
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def probe_reference_classes(lib):
    """Per code point: the predicates the reference's normalizer and pre-tokenizer apply, read off
    its behaviour (each normalizer step alone), and where its NFD / lower-casing differ from utf8proc."""
    clean_only = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                            lowercase=False)
    strip_only = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                            lowercase=False)
    nfd = normalizers.NFD()
    lowercase = normalizers.Lowercase()
    pre = pre_tokenizers.BertPreTokenizer()
    control, whitespace, mark, punct = [], [], [], []
    no_decomposition, lower_overrides = [], []
    for cp in all_code_points():
        c = chr(cp)
        cleaned = clean_only.normalize_str(c)
        if cleaned == "" and cp not in (0, 0xFFFD):
            control.append(cp)
        elif cleaned == " " and c != " ":
            whitespace.append(cp)
        if len(pre.pre_tokenize_str("a" + c + "a")) == 3:
            punct.append(cp)
        decomposed = nfd.normalize_str(c)
        if decomposed == c and strip_only.normalize_str(c) == "":
            mark.append(cp)
        if decomposed != utf8proc_nfd(lib, cp):
            assert decomposed == c, "the reference decomposes U+%04X where utf8proc does not" % cp
            no_decomposition.append(cp)
        low = lowercase.normalize_str(c)
        if low != chr(lib.utf8proc_tolower(cp)):
            lower_overrides.append((cp, low))
    return control, whitespace, mark, punct, no_decomposition, lower_overrides


def cpp_ranges(name, ranges, comment):
    lines = ["// %s" % comment, "inline constexpr CodePointRange %s[] = {" % name]
    row = []
    for first, last in ranges:
        row.append("{0x%X, 0x%X}," % (first, last))
        if len(row) == 6:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    return "\n".join(lines)


def write_tables(path, lib, control, mark, punct, no_decomposition, lower_overrides):
    single_lower = [(cp, low) for cp, low in lower_overrides if len(low) == 1]
    multi_lower = [(cp, low) for cp, low in lower_overrides if len(low) != 1]
    # The only full (multi-character) lower-case mapping is U+0130; the C++ side special-cases it.
    assert [cp for cp, _ in multi_lower] == [0x130] and multi_lower[0][1] == "i\u0307", multi_lower
    text = [
        "#pragma once",
        "// GENERATED by scripts/make_tokenizer_goldens.py from the reference tokenizer (tokenizers %s) and"
        % __import__("tokenizers").__version__,
        "// utf8proc %s (Unicode %s); do not edit. Why these tables exist: the reference takes character"
        % (lib.utf8proc_version().decode(), lib.utf8proc_unicode_version().decode()),
        "// classes from Unicode 8.0 data and its own NFD / case tables, so utf8proc's classes alone would",
        "// not give the same ids. See the script's docstring.",
        "#include <cstdint>",
        "",
        "namespace stile::bert_tables {",
        "",
        "struct CodePointRange {",
        "  char32_t first;",
        "  char32_t last;  // inclusive",
        "};",
        "",
        cpp_ranges("kControl", to_ranges(control),
                   "Removed by clean_text (the reference's Cc, Cf, Co; not TAB, LF, CR, which are whitespace)."),
        "",
        cpp_ranges("kNonspacingMark", to_ranges(mark),
                   "Removed after NFD when accents are stripped (the reference's Mn)."),
        "",
        cpp_ranges("kPunctuation", to_ranges(punct),
                   "Split off as one-character words by the pre-tokenizer (ASCII punctuation and P*)."),
        "",
        "// Code points utf8proc decomposes but the reference's NFD keeps whole.",
        "inline constexpr char32_t kNoDecomposition[] = {%s};" % ", ".join("0x%X" % cp for cp in no_decomposition),
        "",
        "struct LowercaseOverride {",
        "  char32_t from;",
        "  char32_t to;",
        "};",
        "// Where the reference's lower-casing differs from utf8proc_tolower (recent case pairs), sorted.",
        "// U+0130 (lower-cased to U+0069 U+0307) is handled in code.",
        "inline constexpr LowercaseOverride kLowercaseOverrides[] = {",
    ]
    row = []
    for cp, low in single_lower:
        row.append("{0x%X, 0x%X}," % (cp, ord(low)))
        if len(row) == 5:
            text.append("    " + " ".join(row))
            row = []
    if row:
        text.append("    " + " ".join(row))
    text += ["};", "", "}  // namespace stile::bert_tables", ""]
    with open(path, "w") as f:
        f.write("\n".join(text))
    log("wrote %s (%d control, %d mark, %d punctuation ranges; %d lowercase overrides)" % (
        path, len(to_ranges(control)), len(to_ranges(mark)), len(to_ranges(punct)), len(single_lower)))


def hangul_nfd(cp):
    s = cp - 0xAC00
    if not 0 <= s < 11172:
        return None
    l, v, t = 0x1100 + s // 588, 0x1161 + (s % 588) // 28, 0x11A7 + s % 28
    return chr(l) + chr(v) + (chr(t) if t != 0x11A7 else "")


def write_code_points(path, tokenizer):
    """For every code point c: the words the normalizer + pre-tokenizer make of "a" + c + "a".
    Classes: k kept as is inside the word, d dropped, s whitespace, p a word of its own
    (punctuation or CJK), h Hangul syllable decomposed to its jamo (the standard formula),
    m mapped inside the word to the listed code points (hex); any other shape is x followed by the
    words, '|' between words."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    pre = tokenizer.backend_tokenizer.pre_tokenizer
    entries = []
    for cp in all_code_points():
        c = chr(cp)
        words = [w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str("a" + c + "a"))]
        if words == ["a" + c + "a"]:
            entry = ("k",)
        elif words == ["aa"]:
            entry = ("d",)
        elif words == ["a", "a"]:
            entry = ("s",)
        elif words == ["a", c, "a"]:
            entry = ("p",)
        elif len(words) == 1 and words[0][0] == "a" and words[0][-1] == "a" and words[0][1:-1] == hangul_nfd(cp):
            entry = ("h",)
        elif len(words) == 1 and words[0][0] == "a" and words[0][-1] == "a":
            entry = ("m",) + tuple("%X" % ord(x) for x in words[0][1:-1])
        else:
            entry = ("x", "|".join(" ".join("%X" % ord(x) for x in w) for w in words))
        entries.append((cp, entry))
    lines = ["# Generated by scripts/make_tokenizer_goldens.py. FIRST LAST CLASS [MAPPING], hex code points;",
             "# see the docstring of write_code_points there for the classes."]
    i = 0
    while i < len(entries):
        cp, entry = entries[i]
        j = i
        if entry[0] in "kdsph":
            # A run may skip the surrogate gap: surrogates are never decoded, so the test skips them.
            while j + 1 < len(entries) and entries[j + 1][1] == entry:
                j += 1
        lines.append(" ".join(["%X" % cp, "%X" % entries[j][0]] + list(entry)))
        i = j + 1
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    log("wrote %s (%d lines for %d code points)" % (path, len(lines) - 2, len(entries)))


# ---------------------------------------------------------------------------------------------
# Goldens


def ids_line(ids):
    return " ".join(str(i) for i in ids)


def jstr(text):
    return json.dumps(text, ensure_ascii=True)


def encode(tokenizer, text, pair=None, max_length=MAX_LENGTH):
    return tokenizer(text, pair, truncation=True, max_length=max_length)


def encode_pair(tokenizer, a, b, max_length):
    """A pair, as the tokenizers library encodes it. transformers' tokenizer(a, b) is the same except
    that it takes an empty b for no pair at all (Python truthiness) and returns encode(a); an
    explicit encode_pair in C++ always makes a pair, so the goldens take the library's answer."""
    from tokenizers import Tokenizer
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()
    backend.enable_truncation(max_length)
    enc = backend.encode(a, b)
    if b:
        assert enc.ids == encode(tokenizer, a, b, max_length)["input_ids"], (a, b, max_length)
    return {"input_ids": enc.ids, "token_type_ids": enc.type_ids}


def read_sst2(path):
    with open(path, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        assert header == ["sentence", "label"], header
        return [line.rstrip("\n").split("\t")[0] for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", default=os.path.expanduser(
        os.environ.get("STILE_MODEL_DIR", "~/.cache/stile/all-MiniLM-L6-v2")))
    ap.add_argument("--sst2", default=os.path.join(ROOT, "..", "shared", "data", "sst2", "dev.tsv"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "tokenizer", "data"))
    ap.add_argument("--tables", default=os.path.join(ROOT, "include", "stile", "io", "bert_unicode_tables.hpp"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    assert tokenizer.is_fast and tokenizer.model_max_length == MAX_LENGTH, tokenizer
    # The same tokenizer built from vocab.txt alone (what the C++ side reads) must agree.
    from_vocab = BertTokenizer(vocab=os.path.join(args.model_dir, "vocab.txt"))
    cased = BertTokenizer(vocab=os.path.join(args.model_dir, "vocab.txt"), do_lower_case=False)
    vocab = tokenizer.get_vocab()
    vocab_words = sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) > 2)

    lib = load_utf8proc()
    control, whitespace, mark, punct, no_decomposition, lower_overrides = probe_reference_classes(lib)
    expected_whitespace = [0x9, 0xA, 0xD, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F,
                                                                                         0x205F, 0x3000]
    assert whitespace == expected_whitespace, [hex(c) for c in whitespace]  # hard-coded on the C++ side
    write_tables(args.tables, lib, control, mark, punct, no_decomposition, lower_overrides)
    write_code_points(os.path.join(args.out, "code_points.txt"), tokenizer)

    cases = handwritten_cases()
    n_hand = len(cases)
    cases += generated_cases(vocab_words)
    with open(os.path.join(args.out, "hard_cases.txt"), "w") as f:
        for text in cases:
            f.write(jstr(text) + "\n")
    with open(os.path.join(args.out, "hard_cases.ids"), "w") as f, \
            open(os.path.join(args.out, "hard_cases_cased.ids"), "w") as fc:
        for text in cases:
            ids = encode(tokenizer, text)["input_ids"]
            assert ids == encode(from_vocab, text)["input_ids"], text
            f.write(ids_line(ids) + "\n")
            fc.write(ids_line(encode(cased, text)["input_ids"]) + "\n")
    log("wrote %d hard cases (%d hand-written, %d generated)" % (len(cases), n_hand, len(cases) - n_hand))

    sentences = read_sst2(args.sst2)
    assert len(sentences) == 872, len(sentences)
    with open(os.path.join(args.out, "sst2_dev.ids"), "w") as f:
        for s in sentences:
            f.write(ids_line(encode(tokenizer, s)["input_ids"]) + "\n")
    log("wrote ids of %d sst2 dev sentences" % len(sentences))

    # Pairs: consecutive dev sentences and hand-picked edge cases, untruncated and at small lengths
    # (longest_first: the longer side loses tokens first, both halve when both are long).
    pair_texts = [(sentences[i], sentences[i + 1]) for i in range(0, 40, 2)] + [
        ("", ""), ("", "only the second"), ("only the first", ""), ("Caf\u00e9 [SEP] x", "\u4f60\u597d y"),
        ("a b c d e f g", "h i j k l m n o p"), ("one", "two three four five six seven eight nine ten eleven"),
        ("one two three four five six seven eight nine ten eleven", "one"), ("x " * 300, "y " * 300),
    ]
    with open(os.path.join(args.out, "pairs.tsv"), "w") as f:
        f.write("# max_length\ttext_a (JSON)\ttext_b (JSON)\tinput_ids\ttoken_type_ids\n")
        for a, b in pair_texts:
            for max_length in (MAX_LENGTH, 3, 4, 5, 8, 13, 20):
                enc = encode_pair(tokenizer, a, b, max_length)
                f.write("%d\t%s\t%s\t%s\t%s\n" % (max_length, jstr(a), jstr(b), ids_line(enc["input_ids"]),
                                                  ids_line(enc["token_type_ids"])))
    with open(os.path.join(args.out, "truncation.tsv"), "w") as f:
        f.write("# max_length\ttext (JSON)\tinput_ids\n")
        for text in sentences[40:60] + ["", "a", "x " * 600, "\u00e9" * 300, "[SEP] " * 20]:
            for max_length in (2, 3, 5, 8, 16):
                f.write("%d\t%s\t%s\n" % (max_length, jstr(text), ids_line(encode(tokenizer, text, None,
                                                                                   max_length)["input_ids"])))
    log("wrote pairs.tsv (%d pairs x 7 lengths) and truncation.tsv" % len(pair_texts))

    # Invalid UTF-8: the C++ tokenizer by default decodes as Python's errors="replace" does (each
    # maximal ill-formed subsequence becomes U+FFFD), and clean_text then drops U+FFFD.
    bad = [b"\xff", b"\xfe\xff", b"ab\xffcd", b"\x80", b"caf\xc3", b"caf\xc3 ok", b"\xc3\x28", b"\xe2\x82",
           b"\xe2\x82a", b"\xe2\x28\xa1", b"\xf0\x9f\x99", b"\xf0\x9f\x99x", b"\xf0\x9f", b"\xf0\x28\x8c\x28",
           b"\xed\xa0\x80", b"\xed\xbf\xbfz", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf8\x88\x80\x80\x80", b"\xf4\x90\x80\x80",
           b"\xc1\xbf", b"\xe0\x9f\xbf", b"\xf0\x8f\xbf\xbf", b"hello \xff world", b"[SEP]\xff[CLS]", b"\xff[SEP]",
           b"\xe4\xbd\xa0\xe5\xa5", b"\xe4\xbd\xa0\xe5\xa5\xbd", b"na\xc3\xafve\xc3", b"\xc3\xc3\xa9", b"a" * 99 + b"\xff"
           + b"b", b"\xef\xbb\xbfbom", b"\xf4\x8f\xbf\xbf", b"\xcc\x81\xff\xcc\x81a"]
    with open(os.path.join(args.out, "invalid_utf8.tsv"), "w") as f:
        f.write("# bytes (hex)\tinput_ids\n")
        for b in bad:
            f.write("%s\t%s\n" % (b.hex(), ids_line(encode(tokenizer, b.decode("utf-8", errors="replace"))["input_ids"])))
    log("wrote invalid_utf8.tsv (%d byte strings)" % len(bad))

    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    log("goldens: %d KiB in %s" % (total // 1024, args.out))


if __name__ == "__main__":
    sys.exit(main())
