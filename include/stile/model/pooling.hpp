#pragma once
// From the hidden states of a sequence to one sentence embedding: pooling, then (optionally) L2
// normalization, as sentence-transformers does.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

enum class Pooling { kMean, kCls };

// Pools the hidden states of one sequence ([tokens x dim], row-major) into out[dim].
inline void pool_tokens(std::span<const float> hidden, std::size_t tokens, std::size_t dim, Pooling mode,
                        std::span<float> out) {
  require(out.size() == dim && hidden.size() >= tokens * dim, "pool_tokens: sizes do not match");
  require(tokens > 0, "pool_tokens: a sequence without tokens has no embedding");
  if (mode == Pooling::kCls) {
    for (std::size_t i = 0; i < dim; ++i) out[i] = hidden[i];
    return;
  }
  std::vector<double> sum(dim, 0.0);  // double: a sum over up to 512 rows, then one rounding
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t i = 0; i < dim; ++i) sum[i] += hidden[t * dim + i];
  }
  for (std::size_t i = 0; i < dim; ++i) out[i] = static_cast<float>(sum[i] / static_cast<double>(tokens));
}

// v /= max(||v||, 1e-12), as torch.nn.functional.normalize.
inline void l2_normalize(std::span<float> v) {
  double sq = 0.0;
  for (float x : v) sq += double(x) * double(x);
  const double norm = std::max(std::sqrt(sq), 1e-12);
  for (float& x : v) x = static_cast<float>(x / norm);
}

// The cosine of the angle between a and b (in double; 0 when either is all zeros).
// @pre a.size() == b.size() (checked).
inline double cosine_similarity(std::span<const float> a, std::span<const float> b) {
  require(a.size() == b.size(), "cosine_similarity: vectors of different sizes");
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return aa > 0.0 && bb > 0.0 ? ab / std::sqrt(aa * bb) : 0.0;
}

}  // namespace stile
