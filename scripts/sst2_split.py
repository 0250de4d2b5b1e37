#!/usr/bin/env python3
"""The seeded SST-2 split of calibrate/sst2.hpp, in pure Python (no numpy, no torch).

The C++ split (split_sst2) is one permutation of train.tsv's rows by Fisher-Yates driven by
std::mt19937_64(seed), with a bounded draw that uses only the engine's outputs (rejection below
2^64 mod bound, then modulo): its first `train` rows train the heads, the next `calibration` rows
calibrate. This file reimplements mt19937_64 and that draw exactly, so the fine-tuning tool
(scripts/finetune_elastic.py) holds out the same calibration rows as every C++ tool.

    python3 scripts/sst2_split.py --digest [--rows 65349]   prints the split's digest (see digest())

tests/eval/test_sst2.cpp checks the C++ split gives the same digest, and the
ctest `sst2_split_python` runs this script against the same committed value.
"""
import argparse
import sys

MASK64 = (1 << 64) - 1
DEFAULT_SEED = 20261123
DEFAULT_TRAIN = 8000
DEFAULT_CALIBRATION = 1000
# The digest of split_sst2(65349) with the default Sst2Split (SST-2 train.tsv has 65,349 rows).
EXPECTED_DIGEST_65349 = "707e611dd85bb6c0"  # tests/eval/test_sst2.cpp checks the C++ side


class MT19937_64:
    """std::mt19937_64: the parameters fixed by the C++ standard ([rand.predef])."""

    def __init__(self, seed):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK64
        for i in range(1, 312):
            self.mt[i] = (6364136223846793005 * (self.mt[i - 1] ^ (self.mt[i - 1] >> 62)) + i) & MASK64
        self.index = 312

    def _twist(self):
        mt = self.mt
        upper, lower = 0xFFFFFFFF80000000, 0x7FFFFFFF
        for i in range(312):
            x = (mt[i] & upper) | (mt[(i + 1) % 312] & lower)
            xa = x >> 1
            if x & 1:
                xa ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + 156) % 312] ^ xa
        self.index = 0

    def __call__(self):
        if self.index >= 312:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def uniform_below(engine, bound):
    threshold = ((1 << 64) - bound) % bound  # 2^64 mod bound, as (0 - bound) % bound in uint64
    while True:
        x = engine()
        if x >= threshold:
            return x % bound


def seeded_permutation(n, seed):
    perm = list(range(n))
    engine = MT19937_64(seed)
    for i in range(n, 1, -1):
        j = uniform_below(engine, i)
        perm[i - 1], perm[j] = perm[j], perm[i - 1]
    return perm


def split_sst2(rows, seed=DEFAULT_SEED, train=DEFAULT_TRAIN, calibration=DEFAULT_CALIBRATION):
    """(head-training rows, calibration rows, the rest): disjoint row indices into train.tsv."""
    if train + calibration > rows:
        raise ValueError(f"SST-2 split: {train} training + {calibration} calibration rows asked of {rows}")
    perm = seeded_permutation(rows, seed)
    return perm[:train], perm[train:train + calibration], perm[train + calibration:]


def digest(rows, seed=DEFAULT_SEED, train=DEFAULT_TRAIN, calibration=DEFAULT_CALIBRATION):
    """FNV-1a 64 over the split's indices (train part, then calibration part), each as 8 little-endian
    bytes; hex. The C++ test computes the same over split_sst2's parts."""
    h = 0xCBF29CE484222325
    head, cal, _ = split_sst2(rows, seed, train, calibration)
    for i in head + cal:
        for b in int(i).to_bytes(8, "little"):
            h ^= b
            h = (h * 0x100000001B3) & MASK64
    return f"{h:016x}"


def read_tsv(path):
    """GLUE single-sentence TSV -> (sentences, labels); the same checks as parse_glue_tsv, briefly."""
    sentences, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        header = f.readline().rstrip("\n").rstrip("\r")
        if header != "sentence\tlabel":
            raise ValueError(f"{path}: line 1: expected the header 'sentence<TAB>label'")
        for k, line in enumerate(f, start=2):
            line = line.rstrip("\n").rstrip("\r")
            parts = line.split("\t")
            if len(parts) != 2 or not parts[0] or parts[1] not in ("0", "1"):
                raise ValueError(f"{path}: line {k}: expected 'sentence<TAB>0|1'")
            sentences.append(parts[0])
            labels.append(int(parts[1]))
    return sentences, labels


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=65349)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--digest", action="store_true", help="print the split's digest")
    p.add_argument("--expect", help="exit 1 unless the digest equals this")
    a = p.parse_args()
    d = digest(a.rows, a.seed)
    print(d)
    if a.expect and d != a.expect:
        print(f"sst2_split: digest {d}, expected {a.expect}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
