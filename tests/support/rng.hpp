#pragma once
// A seeded random generator that gives the same numbers on every platform and standard library
// (the <random> distributions do not): splitmix64.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace stile_test {

struct Rng {
  std::uint64_t state;

  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1), 53 bits.
  double operator()() { return double(next() >> 11) * 0x1p-52 - 1.0; }
  // Uniform in [-1, 1), 24 bits.
  float unit() { return static_cast<float>(next() >> 40) * 0x1p-24f * 2.0f - 1.0f; }
  // Uniform in 0..n-1 (modulo bias is irrelevant at test sizes).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  // Any finite float, over the whole exponent range (denormals and -0.0 included).
  float any_finite() {
    for (;;) {
      const float f = std::bit_cast<float>(static_cast<std::uint32_t>(next()));
      if (std::isfinite(f)) return f;
    }
  }
};

}  // namespace stile_test
