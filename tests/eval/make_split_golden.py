#!/usr/bin/env python3
"""The golden split indices of test_sst2.cpp, from an independent implementation.

std::mt19937_64 written out from its definition in the C++ standard ([rand.eng.mers],
[rand.predef]), and the same Fisher-Yates with rejection as calibrate/sst2.hpp. Pure Python, no
packages: run it and compare with the numbers hard-coded in test_sst2.cpp.
"""
MASK = (1 << 64) - 1


class MT19937_64:
    N, M = 312, 156

    def __init__(self, seed):
        self.mt = [seed & MASK]
        for i in range(1, self.N):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK)
        self.i = self.N

    def __call__(self):
        if self.i >= self.N:
            for k in range(self.N):
                y = (self.mt[k] & 0xFFFFFFFF80000000) | (self.mt[(k + 1) % self.N] & 0x7FFFFFFF)
                v = self.mt[(k + self.M) % self.N] ^ (y >> 1)
                if y & 1:
                    v ^= 0xB5026F5AA96619E9
                self.mt[k] = v
            self.i = 0
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


def permutation(n, seed):
    p = list(range(n))
    engine = MT19937_64(seed)
    for i in range(n, 1, -1):
        threshold = ((1 << 64) - i) % i  # 2^64 mod i: outputs below it are rejected
        x = engine()
        while x < threshold:
            x = engine()
        j = x % i
        p[i - 1], p[j] = p[j], p[i - 1]
    return p


if __name__ == "__main__":
    engine = MT19937_64(5489)  # the default seed
    for _ in range(9999):
        engine()
    print("10000th output of a default mt19937_64 is the standard's:", engine() == 9981545732273789042)
    print("seeded_permutation(10, 1):", permutation(10, 1))
    p = permutation(65349, 20261123)
    print("split_seeded(65349, 20261123, 8000): first[:8]", p[:8], "second[:8]", p[8000:8008])
