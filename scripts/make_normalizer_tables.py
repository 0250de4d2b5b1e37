#!/usr/bin/env python3
"""Write include/stile/text/normalizer_unicode_tables.hpp: the Unicode data of tokenizer.json's
normalizers, probed from the reference (Hugging Face tokenizers, the installed Python binding).

Why probe rather than take utf8proc's (Unicode 15.0) data: the reference's NFC/NFD/NFKC/NFKD come
from the crate unicode-normalization-alignments (frozen at Unicode 9.0: characters assigned later
have no decomposition, combining class 0 and compose with nothing), StripAccents removes that
crate's combining marks (General_Category M*, Unicode 9.0), and Lowercase is Rust std's
char::to_lowercase (the Unicode of the Rust release that built the wheel). Every table below is
what the reference does, code point by code point; the script checks its assumptions (and stops
when one fails) rather than trusting them:

  - canonical / compatibility decompositions: the reference's NFD / NFKD of every scalar value
    alone (the crate decomposes character by character, fully, then sorts runs of non-starters;
    the probe checks that each decomposition is already in canonical order, so the stored
    sequence is the crate's own and the first character is the one that carries change 0);
  - combining classes: Python's unicodedata gives the class (classes never change once assigned);
    a character counts as a non-starter only if the reference reorders it ("x", U+0345 (ccc 240),
    c, U+0334 (ccc 1) changes under NFD exactly when c is a non-starter);
  - composition pairs: every primary composite Python knows, kept when the reference composes its
    two characters (NFC(a b) == c);
  - combining marks: StripAccents of each scalar value alone is empty;
  - lowercase: Lowercase of each scalar value alone (one character, or U+0130's two).

Run from the repository root (tokenizers in .venv-ref):
    .venv-ref/bin/python scripts/make_normalizer_tables.py
"""
import os
import sys
import unicodedata

from tokenizers import __version__ as tokenizers_version
from tokenizers import normalizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "include", "stile", "text", "normalizer_unicode_tables.hpp")
SEP = "\n"  # a starter that decomposes, composes and lower-cases to nothing else
SCALARS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
S_BASE, S_COUNT = 0xAC00, 11172


def batch(norm, items):
    """The reference's normalization of each item (a str) alone, through one call."""
    out = []
    for i in range(0, len(items), 50000):
        part = items[i:i + 50000]
        got = norm.normalize_str(SEP.join("" if x == SEP else x for x in part)).split(SEP)
        if len(got) != len(part):
            sys.exit("make_normalizer_tables: separator broke a batch")
        out.extend(SEP if x == SEP else g for x, g in zip(part, got))  # "\n" is left alone by all
    return out


def raw_decomposition(c, compat):
    """Recursive decomposition from Python's data (no reordering)."""
    if S_BASE <= c < S_BASE + S_COUNT:
        return [ord(x) for x in unicodedata.normalize("NFD", chr(c))]
    d = unicodedata.decomposition(chr(c))
    if not d or (d.startswith("<") and not compat):
        return [c]
    parts = d.split()
    if parts[0].startswith("<"):
        parts = parts[1:]
    out = []
    for p in parts:
        out.extend(raw_decomposition(int(p, 16), compat))
    return out


def to_ranges(cps):
    ranges = []
    for c in sorted(cps):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return ranges


def main():
    alone = [chr(c) for c in SCALARS]
    nfd = batch(normalizers.NFD(), alone)
    nfkd = batch(normalizers.NFKD(), alone)
    lower = batch(normalizers.Lowercase(), alone)
    strip = batch(normalizers.StripAccents(), alone)

    # Decompositions (Hangul is arithmetic, not stored).
    canonical, compat = {}, {}
    for c, d, kd in zip(SCALARS, nfd, nfkd):
        if S_BASE <= c < S_BASE + S_COUNT:
            continue
        if d != chr(c):
            canonical[c] = [ord(x) for x in d]
        if kd != d:
            compat[c] = [ord(x) for x in kd]

    # Combining classes.
    ccc = {}
    candidates = [c for c in SCALARS if unicodedata.combining(chr(c)) and c not in canonical and c not in compat]
    probes = ["x\u0345" + chr(c) + "\u0334" for c in candidates]
    for c, p, got in zip(candidates, probes, batch(normalizers.NFD(), probes)):
        if got != p:
            ccc[c] = unicodedata.combining(chr(c))

    def sort_key(x):
        return ccc.get(x, 0)

    # The crate sorts each run of non-starters stably; a decomposition that is not in canonical
    # order would make the stored (probed, sorted) sequence differ from the crate's raw one.
    for table, is_compat in ((canonical, False), (compat, True)):
        for c, d in table.items():
            raw = raw_decomposition(c, is_compat)
            if raw != d:
                sys.exit("make_normalizer_tables: U+%04X decomposes to %s, Python's raw data %s" % (c, d, raw))

    # Composition pairs.
    pairs = {}
    for c in SCALARS:
        if S_BASE <= c < S_BASE + S_COUNT:
            continue
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(p, 16) for p in d.split()]
        if len(parts) != 2 or unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) != chr(c):
            continue
        pairs[(parts[0], parts[1])] = c
    keys = list(pairs)
    got = batch(normalizers.NFC(), ["".join(map(chr, k)) for k in keys])
    pairs = {k: pairs[k] for k, g in zip(keys, got) if g == chr(pairs[k])}

    # Marks, lowercase.
    marks = [c for c, s in zip(SCALARS, strip) if s == ""]
    lower_map, lower_multi = {}, {}
    for c, l in zip(SCALARS, lower):
        if l == chr(c):
            continue
        if len(l) == 1:
            lower_map[c] = ord(l)
        else:
            lower_multi[c] = [ord(x) for x in l]
    if list(lower_multi) != [0x130] or lower_multi[0x130] != [0x69, 0x307]:
        sys.exit("make_normalizer_tables: unexpected multi-character lowercase %r" % lower_multi)
    for c in range(0x80):
        want = c + 32 if 0x41 <= c <= 0x5A else c
        if lower_map.get(c, c) != want:
            sys.exit("make_normalizer_tables: ASCII lowercase differs at %d" % c)

    print("tokenizers %s: %d canonical, %d compatibility decompositions, %d non-starters, %d pairs, "
          "%d marks, %d lowercase" % (tokenizers_version, len(canonical), len(compat), len(ccc), len(pairs),
                                      len(marks), len(lower_map)))

    pool, pool_at = [], {}

    def pool_index(seq):
        key = tuple(seq)
        if key not in pool_at:
            pool_at[key] = len(pool)
            pool.extend(seq)
        return pool_at[key]

    decomp_rows = []
    for c in sorted(set(canonical) | set(compat)):
        cd = canonical.get(c, [c])
        kd = compat.get(c, cd)
        ci = pool_index(cd) if c in canonical else 0
        ki = pool_index(kd)
        decomp_rows.append((c, ci, len(cd) if c in canonical else 0, ki, len(kd) if c in compat else 0))
    if len(pool) >= 1 << 16 or max(len(x) for x in list(canonical.values()) + list(compat.values())) > 255:
        sys.exit("make_normalizer_tables: pool too large for uint16 offsets")

    def rows(items, per_line, fmt):
        lines, line = [], []
        for it in items:
            line.append(fmt(it))
            if len(line) == per_line:
                lines.append("    " + " ".join(line))
                line = []
        if line:
            lines.append("    " + " ".join(line))
        return "\n".join(lines)

    text = f"""#pragma once
// GENERATED by scripts/make_normalizer_tables.py from the reference (tokenizers {tokenizers_version});
// do not edit. The Unicode data of tokenizer.json's normalizers as the reference has it: NFx from
// unicode-normalization-alignments (Unicode 9.0), StripAccents' combining marks (the same crate),
// Lowercase from Rust's char::to_lowercase. See the script's docstring for how each is probed.
#include <cstdint>

namespace stile::tok::normalizer_tables {{

struct Decomposition {{
  char32_t code_point;
  std::uint16_t canonical;         // offset in kDecompositionPool
  std::uint8_t canonical_size;     // 0: no canonical decomposition
  std::uint16_t compatibility;     // NFKD's decomposition (offset), when it differs from NFD's
  std::uint8_t compatibility_size; // 0: NFKD decomposes as NFD does
}};

struct CombiningClass {{
  char32_t code_point;
  std::uint8_t ccc;
}};

struct Composition {{
  char32_t first;
  char32_t second;
  char32_t composite;
}};

struct CaseMapping {{
  char32_t code_point;
  char32_t lower;
}};

struct Range {{
  char32_t first;
  char32_t last;  // inclusive
}};

// Full decompositions (Hangul syllables excluded: they are arithmetic), sorted by code point.
inline constexpr Decomposition kDecompositions[] = {{
{rows(decomp_rows, 4, lambda r: "{0x%X, %d, %d, %d, %d}," % r)}
}};

inline constexpr char32_t kDecompositionPool[] = {{
{rows(pool, 12, lambda c: "0x%X," % c)}
}};

// Non-starters, sorted by code point.
inline constexpr CombiningClass kCombiningClasses[] = {{
{rows(sorted(ccc.items()), 8, lambda r: "{0x%X, %d}," % r)}
}};

// Primary composites (Hangul excluded), sorted by (first, second).
inline constexpr Composition kCompositions[] = {{
{rows(sorted((a, b, c) for (a, b), c in pairs.items()), 5, lambda r: "{0x%X, 0x%X, 0x%X}," % r)}
}};

// Single-character lowercase mappings of non-ASCII characters (U+0130 -> "i\\u0307" is the one
// longer mapping, handled in code), sorted by code point.
inline constexpr CaseMapping kLowercase[] = {{
{rows(sorted((c, l) for c, l in lower_map.items() if c >= 0x80), 6, lambda r: "{0x%X, 0x%X}," % r)}
}};

// What StripAccents removes.
inline constexpr Range kCombiningMarks[] = {{
{rows(to_ranges(marks), 6, lambda r: "{0x%X, 0x%X}," % tuple(r))}
}};

}}  // namespace stile::tok::normalizer_tables
"""
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
