#!/usr/bin/env python3
"""Writes include/stile/text/unicode_regex_tables.hpp and include/stile/text/pre_tokenizer_tables.hpp
from the reference (Hugging Face tokenizers, the Python binding in .venv-ref), probed per code point.

Why: the reference's pre-tokenizers take their character classes from three sources whose Unicode
versions differ from each other and from PCRE2's (Unicode 14 in PCRE2 10.42):
  - Oniguruma's tables for tokenizer.json regexes (Split "Regex", ByteLevel's GPT-2 pattern):
    \\s \\d \\w \\p{..}. stile runs these with PCRE2; unicode_regex_tables.hpp gives, per class whose
    PCRE2 tables differ, PCRE2 class items holding exactly Oniguruma's code points: the nearest
    PCRE2 class plus the code points it lacks, or (small classes) the code points written out, with
    their complement. Each is checked against Oniguruma here.
  - Rust's std: char::is_whitespace (WhitespaceSplit, BertPreTokenizer), char::is_numeric (Digits).
  - unicode_categories' is_punctuation plus ASCII punctuation (Punctuation, BertPreTokenizer), and
    Rust regex's \\w and \\s (Whitespace's `\\w+|[^\\w\\s]+`).
pre_tokenizer_tables.hpp holds those predicates as sorted code point ranges.

Every class is probed through a pre-tokenizer over one string holding every Unicode scalar value
(no surrogates: Rust strings cannot hold them); PCRE2's classes come from libpcre2-32 via ctypes.

Run: .venv-ref/bin/python scripts/make_pre_tokenizer_tables.py   (from the repository root)
"""
import ctypes
import ctypes.util
import sys

import tokenizers
from tokenizers import Regex, pre_tokenizers as pt

# The classes stile translates with Oniguruma's tables: the escapes, and the properties real
# tokenizer.json files use (GPT-2, Llama 3, Qwen, GPT-4o-style patterns) plus their relatives.
ONIG_CLASSES = ["\\s", "\\d", "\\w", "L", "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn", "Mc", "Me", "N", "Nd",
                "Nl", "No", "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So",
                "Z", "Zs", "Zl", "Zp", "C", "Cc", "Cf", "Co", "Cn", "Han", "Hiragana", "Katakana",
                "Hangul", "Latin", "Greek", "Cyrillic", "Arabic", "Hebrew", "Thai", "Devanagari"]

SCALARS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
ALL = "".join(map(chr, SCALARS))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def unmatched_by_removal(pretok):
    """Code points a pre-tokenizer with "removed" behaviour keeps: the ones its pattern does not match."""
    kept = set()
    for _, (b, e) in pretok.pre_tokenize_str(ALL):
        kept.update(SCALARS[b:e])
    return kept


_CACHE = {}


def onig_class(name):
    if name in _CACHE:
        return _CACHE[name]
    pattern = name if name.startswith("\\") else "\\p{%s}" % name
    _CACHE[name] = set(SCALARS) - unmatched_by_removal(pt.Split(Regex(pattern), "removed"))
    return _CACHE[name]


class Pcre2:
    def __init__(self):
        lib = ctypes.CDLL(ctypes.util.find_library("pcre2-32") or "libpcre2-32.so.0")
        lib.pcre2_compile_32.restype = ctypes.c_void_p
        lib.pcre2_compile_32.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32,
                                         ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.c_void_p]
        lib.pcre2_match_data_create_32.restype = ctypes.c_void_p
        lib.pcre2_match_data_create_32.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
        lib.pcre2_match_32.restype = ctypes.c_int
        lib.pcre2_match_32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                       ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p]
        lib.pcre2_get_ovector_pointer_32.restype = ctypes.POINTER(ctypes.c_size_t)
        lib.pcre2_get_ovector_pointer_32.argtypes = [ctypes.c_void_p]
        lib.pcre2_jit_compile_32.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self.lib = lib
        self.subject = (ctypes.c_uint32 * len(SCALARS))(*SCALARS)

    def members(self, items):
        pattern = "[%s]+" % items
        pat = (ctypes.c_uint32 * len(pattern))(*map(ord, pattern))
        err, off = ctypes.c_int(), ctypes.c_size_t()
        PCRE2_UTF, PCRE2_UCP = 0x00080000, 0x00020000
        code = self.lib.pcre2_compile_32(pat, len(pattern), PCRE2_UTF | PCRE2_UCP, ctypes.byref(err),
                                         ctypes.byref(off), None)
        if not code:
            raise SystemExit("PCRE2 refuses %s (error %d)" % (pattern, err.value))
        self.lib.pcre2_jit_compile_32(code, 1)
        md = self.lib.pcre2_match_data_create_32(1, None)
        out, start, n = set(), 0, len(SCALARS)
        while start < n:
            rc = self.lib.pcre2_match_32(code, self.subject, n, start, 0, md, None)
            if rc < 0:
                break
            ov = self.lib.pcre2_get_ovector_pointer_32(md)
            out.update(SCALARS[ov[0]:ov[1]])
            start = ov[1]
        return out


def to_ranges(cps):
    ranges = []
    for c in sorted(cps):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def class_items(cps):
    parts = []
    for a, b in to_ranges(cps):
        parts.append("\\x{%x}" % a if a == b else "\\x{%x}-\\x{%x}" % (a, b))
    return "".join(parts)


SCRIPTS = {"Han", "Hiragana", "Katakana", "Hangul", "Latin", "Greek", "Cyrillic", "Arabic", "Hebrew", "Thai",
           "Devanagari"}
MAX_EXPLICIT_RANGES = 64


def pcre2_base(name):
    """The PCRE2 class items closest to Oniguruma's class: \\w is Alphabetic, marks, decimal digits
    and connector punctuation there (PCRE2's \\w is letters, numbers and _); a script
    is the Script property there (PCRE2's \\p{Han} is Script_Extensions, \\p{sc:Han} is Script)."""
    if name == "\\w":
        return "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
    if name.startswith("\\"):
        return name
    if name in SCRIPTS:
        return "\\p{sc:%s}" % name
    return "\\p{%s}" % name


def whitespace_classes():
    """Rust regex's \\w and \\s as the Whitespace pre-tokenizer sees them: over "a<c> a<c> ...",
    a word character stays with the "a" (one piece), whitespace is removed (the piece is "a"), any
    other character is a piece of its own."""
    text_parts, starts = [], []
    pos = 0
    for c in SCALARS:
        starts.append(pos)
        text_parts.append("a" + chr(c) + " ")
        pos += 3
    pieces = pt.Whitespace().pre_tokenize_str("".join(text_parts))
    word, space = set(), set()
    by_start = {}
    for piece, (b, e) in pieces:
        by_start.setdefault(b - b % 3, []).append((b, e))
    for i, c in enumerate(SCALARS):
        got = by_start.get(starts[i], [])
        if got == [(starts[i], starts[i] + 2)]:
            word.add(c)
        elif got == [(starts[i], starts[i] + 1)]:
            space.add(c)
        elif got != [(starts[i], starts[i] + 1), (starts[i] + 1, starts[i] + 2)]:
            raise SystemExit("unexpected Whitespace pieces for U+%04X: %r" % (c, got))
    return word, space


def numeric_class():
    """char::is_numeric through Digits (contiguous): pieces alternate numeric / not numeric."""
    out = set()
    numeric = False  # U+0000 is not numeric
    for _, (b, e) in pt.Digits(individual_digits=False).pre_tokenize_str(ALL):
        if numeric:
            out.update(SCALARS[b:e])
        numeric = not numeric
    return out


def cpp_ranges(name, cps, comment):
    ranges = to_ranges(cps)
    lines = ["// " + comment, "inline constexpr CodePointRange %s[] = {" % name]
    row = []
    for a, b in ranges:
        row.append("{0x%X, 0x%X}," % (a, b))
        if len(row) == 8:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    return "\n".join(lines) + "\n"


SCRIPTS_RS = "/work/ref/tokenizers/src/pre_tokenizers/unicode_scripts/scripts.rs"


def write_scripts_table(path=SCRIPTS_RS):
    """UnicodeScripts' classes: the reference's own table (scripts.rs get_script, parsed) with its
    fixed_script changes (Hiragana, Katakana and U+30FC are Han; ' ' is Any, as is every code point
    the table leaves out). Written as ranges of script ids, 0 standing for Any."""
    import re
    arm = re.compile(r"^\s*0x([0-9A-Fa-f]+)(?:\.\.=0x([0-9A-Fa-f]+))? => Script::(\w+),\s*$")
    entries = []
    for line in open(path, encoding="utf-8"):
        m = arm.match(line)
        if m:
            a = int(m.group(1), 16)
            b = int(m.group(2), 16) if m.group(2) else a
            entries.append((a, b, m.group(3)))
    names = ["Any"]
    per_cp = {}
    for a, b, name in entries:
        if name in ("Hiragana", "Katakana"):
            name = "Han"
        for c in range(a, b + 1):
            per_cp.setdefault(c, name)
    per_cp[0x30FC] = "Han"
    per_cp[0x20] = "Any"
    ranges = []
    for c in sorted(per_cp):
        name = per_cp[c]
        if name == "Any":
            continue
        if name not in names:
            names.append(name)
        sid = names.index(name)
        if ranges and ranges[-1][1] == c - 1 and ranges[-1][2] == sid:
            ranges[-1][1] = c
        else:
            ranges.append([c, c, sid])
    with open("include/stile/text/unicode_scripts_table.hpp", "w") as f:
        f.write("#pragma once\n// GENERATED by scripts/make_pre_tokenizer_tables.py from the reference's\n"
                "// pre_tokenizers/unicode_scripts/scripts.rs with fixed_script's changes; do not edit.\n"
                "// Script ids (0: Any): %s.\n" % ", ".join("%d %s" % (i, n) for i, n in enumerate(names)))
        f.write("#include <cstdint>\n\nnamespace stile::tok::unicode_scripts_table {\n\n"
                "struct ScriptRange {\n  char32_t first;\n  char32_t last;  // inclusive\n  std::uint8_t script;\n};\n\n"
                "inline constexpr ScriptRange kScripts[] = {\n")
        row = []
        for a, b, sid in ranges:
            row.append("{0x%X, 0x%X, %d}," % (a, b, sid))
            if len(row) == 6:
                f.write("    " + " ".join(row) + "\n")
                row = []
        if row:
            f.write("    " + " ".join(row) + "\n")
        f.write("};\n\n}  // namespace stile::tok::unicode_scripts_table\n")
    log("scripts: %d ranges, %d scripts" % (len(ranges), len(names)))


def main():
    import os
    write_scripts_table()
    if os.environ.get("ONLY_SCRIPTS"):
        return
    import pickle
    cache = os.environ.get("ONIG_CACHE")  # a pickle of the probed classes, to rerun quickly
    if cache and os.path.exists(cache):
        _CACHE.update(pickle.load(open(cache, "rb")))
    version = tokenizers.__version__
    pcre2 = Pcre2()
    entries = []
    for name in ONIG_CLASSES:
        onig = onig_class(name)
        plain = pcre2.members(name if name.startswith("\\") else "\\p{%s}" % name)
        base = pcre2_base(name)
        pc = pcre2.members(base)
        extra, missing = onig - pc, pc - onig
        explicit = len(to_ranges(onig)) <= MAX_EXPLICIT_RANGES
        if plain == onig:
            how = "same"
        elif not missing:
            how = "base+extra"
            entries.append((name, base + class_items(extra), ""))
        elif explicit:
            how = "explicit"
            entries.append((name, class_items(onig), class_items(set(SCALARS) - onig)))
        else:
            how = "PCRE2's (differs)"
        log("%-10s onig %7d pcre2 %7d base %7d onig-only %5d base-only %5d -> %s" % (
            name, len(onig), len(plain), len(pc), len(extra), len(missing), how))
        if how.startswith("PCRE2"):
            log("   base-only: %s" % " ".join("%04X" % c for c in sorted(missing)[:40]))
        verify = entries[-1] if entries and entries[-1][0] == name else None
        if verify is not None and pcre2.members(verify[1]) != onig:
            raise SystemExit("translation of %s does not give Oniguruma's class" % name)

    with open("include/stile/text/unicode_regex_tables.hpp", "w") as f:
        f.write("#pragma once\n")
        f.write("// GENERATED by scripts/make_pre_tokenizer_tables.py from tokenizers %s (its Oniguruma) and\n"
                "// PCRE2 (libpcre2-32); do not edit. Per class escape or property whose tables\n"
                "// differ: PCRE2 class items with exactly Oniguruma's code points (regex.hpp uses them).\n" % version)
        f.write("#include <string_view>\n\nnamespace stile::tok::unicode_regex_tables {\n\n")
        f.write("struct OnigClass {\n"
                "  std::u32string_view name;        // \"\\\\s\", \"\\\\d\", \"\\\\w\" or a property name as written in \\p{...}\n"
                "  std::u32string_view items;       // PCRE2 class items holding exactly Oniguruma's class\n"
                "  std::u32string_view complement;  // the same for its complement; empty: none written\n"
                "};\n\n")
        f.write("inline constexpr OnigClass kOnigClasses[] = {\n")
        for key, items, comp in entries:
            f.write('    {U"%s", U"%s", U"%s"},\n' % (key.replace("\\", "\\\\"), items.replace("\\", "\\\\"),
                                               comp.replace("\\", "\\\\")))
        f.write("};\n\n}  // namespace stile::tok::unicode_regex_tables\n")

    # ByteLevel matches GPT-2's pattern by hand over Oniguruma's \p{L}, \p{N} and \s.
    with open("include/stile/text/onig_class_tables.hpp", "w") as f:
        f.write("#pragma once\n")
        f.write("// GENERATED by scripts/make_pre_tokenizer_tables.py from tokenizers %s (its Oniguruma); do\n"
                "// not edit. Oniguruma's \\p{L}, \\p{N} and \\s, for ByteLevel's GPT-2 matcher.\n" % version)
        f.write("#include \"stile/text/bert_unicode_tables.hpp\"\n\nnamespace stile::tok::onig_class_tables {\n\n"
                "using CodePointRange = bert_tables::CodePointRange;\n\n")
        f.write(cpp_ranges("kLetter", onig_class("L"), "\\p{L}"))
        f.write("\n" + cpp_ranges("kNumber", onig_class("N"), "\\p{N}"))
        f.write("\n" + cpp_ranges("kSpace", onig_class("\\s"), "\\s"))
        f.write("\n}  // namespace stile::tok::onig_class_tables\n")
    if cache:
        pickle.dump(_CACHE, open(cache, "wb"))
    if os.environ.get("ONLY_REGEX"):
        return
    log("probing Rust char classes")
    space_split = set(SCALARS) - unmatched_by_removal(pt.WhitespaceSplit())
    punct = set(SCALARS) - unmatched_by_removal(pt.Punctuation("removed"))
    numeric = numeric_class()
    word, rx_space = whitespace_classes()
    with open("include/stile/text/pre_tokenizer_tables.hpp", "w") as f:
        f.write("#pragma once\n")
        f.write("// GENERATED by scripts/make_pre_tokenizer_tables.py from tokenizers %s, probed per code\n"
                "// point through its pre-tokenizers; do not edit.\n" % version)
        f.write("#include \"stile/text/bert_unicode_tables.hpp\"\n\nnamespace stile::tok::pre_tokenizer_tables {\n\n"
                "using CodePointRange = bert_tables::CodePointRange;\n\n")
        f.write(cpp_ranges("kWhitespace", space_split, "Rust's char::is_whitespace (WhitespaceSplit, BertPreTokenizer)."))
        f.write("\n" + cpp_ranges("kPunctuation", punct,
                                  "ASCII punctuation or unicode_categories' is_punctuation (Punctuation, "
                                  "BertPreTokenizer)."))
        f.write("\n" + cpp_ranges("kNumeric", numeric, "Rust's char::is_numeric (Digits)."))
        f.write("\n" + cpp_ranges("kRegexWord", word, "Rust regex's \\w (the Whitespace pre-tokenizer)."))
        f.write("\n" + cpp_ranges("kRegexSpace", rx_space, "Rust regex's \\s (the Whitespace pre-tokenizer)."))
        f.write("\n}  // namespace stile::tok::pre_tokenizer_tables\n")
    log("whitespace %d punctuation %d numeric %d word %d space %d" % (len(space_split), len(punct), len(numeric),
                                                                     len(word), len(rx_space)))


if __name__ == "__main__":
    main()
