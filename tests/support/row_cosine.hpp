#pragma once
// The smallest cosine between corresponding rows of two [rows x d] row-major matrices: how far a
// model in another number format strays from the reference on its worst token.
#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <catch2/catch.hpp>

#include "stile/model/pooling.hpp"

namespace stile_test {

inline double min_row_cosine(const std::vector<float>& a, const std::vector<float>& b, std::size_t d) {
  REQUIRE(a.size() == b.size());
  double worst = 1.0;
  for (std::size_t r = 0; r * d < a.size(); ++r) {
    worst = std::min(worst, stile::cosine_similarity(std::span(a).subspan(r * d, d), std::span(b).subspan(r * d, d)));
  }
  return worst;
}

}  // namespace stile_test
