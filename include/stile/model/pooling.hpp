#pragma once
// From the hidden states of a sequence to one sentence embedding: pooling, then (optionally) L2
// normalization, as sentence-transformers' Pooling and Normalize modules do.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "stile/core/error.hpp"

namespace stile {

// sentence-transformers' pooling modes (its Pooling module's "pooling_mode" names: cls, max, mean,
// mean_sqrt_len_tokens, weightedmean, lasttoken).
enum class Pooling { kMean, kCls, kMax, kMeanSqrtLen, kWeightedMean, kLastToken };

// Pools the hidden states of one sequence ([tokens x dim], row-major) into out[dim]. The first
// `skip` tokens (a prompt that the pooling leaves out: include_prompt false) take no part, as in
// sentence-transformers' padded forward:
//   cls          the row of the first token not skipped (row 0 when every token is skipped)
//   max          the element-wise maximum (-inf when every token is skipped)
//   mean         the sum over the tokens divided by their count; mean_sqrt_len_tokens by its
//                square root (zeros when every token is skipped)
//   weightedmean the sum weighted by each token's position in the whole sequence, from 1,
//                divided by the weights' sum (a skipped prompt keeps the rest's positions)
//   lasttoken    the last row (zeros when every token is skipped)
// Sums are taken in double and rounded once.
inline void pool_tokens(std::span<const float> hidden, std::size_t tokens, std::size_t dim, Pooling mode,
                        std::span<float> out, std::size_t skip = 0) {
  require(out.size() == dim && hidden.size() >= tokens * dim, "pool_tokens: sizes do not match");
  require(tokens > 0, "pool_tokens: a sequence without tokens has no embedding");
  const auto row = [&](std::size_t t) { return hidden.subspan(t * dim, dim); };
  const bool none = skip >= tokens;
  switch (mode) {
    case Pooling::kCls:
      std::copy_n(row(none ? 0 : skip).begin(), dim, out.begin());
      return;
    case Pooling::kLastToken:
      if (none) {
        std::fill(out.begin(), out.end(), 0.0f);
      } else {
        std::copy_n(row(tokens - 1).begin(), dim, out.begin());
      }
      return;
    case Pooling::kMax:
      std::fill(out.begin(), out.end(), -std::numeric_limits<float>::infinity());
      for (std::size_t t = skip; t < tokens; ++t) {
        for (std::size_t i = 0; i < dim; ++i) out[i] = std::max(out[i], row(t)[i]);
      }
      return;
    case Pooling::kMean:
    case Pooling::kMeanSqrtLen:
    case Pooling::kWeightedMean: {
      std::vector<double> sum(dim, 0.0);
      double weights = 0.0;
      for (std::size_t t = skip; t < tokens; ++t) {
        const double w = mode == Pooling::kWeightedMean ? static_cast<double>(t + 1) : 1.0;
        for (std::size_t i = 0; i < dim; ++i) sum[i] += w * row(t)[i];
        weights += w;
      }
      // The reference divides by max(weights, 1e-9): a sequence left without tokens pools to zeros.
      const double divisor = std::max(mode == Pooling::kMeanSqrtLen ? std::sqrt(weights) : weights, 1e-9);
      for (std::size_t i = 0; i < dim; ++i) out[i] = static_cast<float>(sum[i] / divisor);
      return;
    }
  }
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
