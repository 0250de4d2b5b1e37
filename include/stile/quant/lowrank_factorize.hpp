#pragma once
// Offline: the clustered low-rank approximation of a word-embedding table (MCUBERT, ICCAD'24,
// without its NAS). Needs Eigen (Debian's libeigen3-dev, MPL-2.0): only the converter and the
// tools and tests that factorize include this header; the runtime reads the result through
// quant/lowrank_table.hpp and store/.
//
//   1. Tokens are ordered by frequency on a corpus (counts given by the caller: SST-2 train.tsv
//      for the tools), ties and unseen tokens in vocabulary order, and cut into clusters at the
//      given boundaries. Cluster 0, the most frequent tokens, stays full.
//   2. Each other cluster i gets the best rank-r approximation of its rows under the frequency-
//      weighted squared error sum_t w_t |x_t - x^_t|^2 (w_t = (count_t + 1)^p, so unseen tokens
//      still count; p = LowRankOptions::weight_power): V_i = the top r eigenvectors of the weighted Gram matrix G_i = sum_t w_t x_t x_t^T
//      (d x d, Eigen's SelfAdjointEigenSolver), U_i = X_i V_i^T (each row projected exactly). The
//      weighted error left at rank r is the sum of G_i's eigenvalues beyond r.
//   3. The ranks: the simple search that replaces MCUBERT's NAS. Start every low-rank cluster at
//      rank 1; then, while the byte budget allows, give one more rank to the cluster whose next
//      eigenvalue (the weighted error it removes) per stored byte it costs (a U column, coded,
//      plus a V row) is largest. The eigenvalues fall, so this greedy order is the optimal
//      allocation of the continuous relaxation; it needs no model evaluation, and the tools
//      measure the result on sentence embeddings (bench/eval_embeddings).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/quant/lowrank_table.hpp"

namespace stile::quant {

struct LowRankOptions {
  // Cluster boundaries in frequency order: cluster 0 = the first ends[0] tokens (full), cluster i =
  // tokens [ends[i-1], ends[i]), the last cluster the rest. Strictly increasing, below the
  // vocabulary size.
  std::vector<std::size_t> cluster_ends{512, 4096, 12288};
  // The stored table's bytes (U rows coded, V and the full cluster fp32) at most this fraction of
  // the dense fp32 table's (4 rows d).
  double budget = 0.25;
  WordRowCodec codec = WordRowCodec::kInt8;  // the low-rank clusters' U rows; cluster 0 stays fp32
  // Token t weighs (count_t + 1)^weight_power in the error: 1 follows the corpus, 0 treats every
  // token alike; in between keeps rare tokens from being starved (their rows still come up in
  // sentences the corpus did not see).
  double weight_power = 1.0;
};

// Token ids by decreasing count, ties (and unseen tokens) in vocabulary order.
inline std::vector<std::int32_t> frequency_order(std::span<const double> counts) {
  std::vector<std::int32_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return counts[std::size_t(a)] > counts[std::size_t(b)]; });
  return order;
}

// table: [rows x d] fp32 row-major; counts: one per row (occurrences on the corpus).
inline LowRankWordTable factorize_word_table(std::span<const float> table, std::size_t rows, std::size_t d,
                                             std::span<const double> counts, const LowRankOptions& options) {
  require(rows > 0 && d > 0 && table.size() == rows * d, "factorize_word_table: the table is not rows x d");
  require(counts.size() == rows, "factorize_word_table: one count per row is needed");
  const std::vector<std::size_t>& ends = options.cluster_ends;
  require(!ends.empty() && ends.front() > 0, "factorize_word_table: cluster 0 needs at least one token");
  for (std::size_t i = 0; i < ends.size(); ++i) {
    require(ends[i] < rows && (i == 0 || ends[i] > ends[i - 1]),
            concat("factorize_word_table: cluster boundaries must increase strictly and stay below the ", rows,
                   " tokens"));
  }
  require(options.budget > 0, "factorize_word_table: the budget must be positive");

  const std::vector<std::int32_t> order = frequency_order(counts);
  LowRankWordTable out;
  out.rows = rows;
  out.cols = d;
  std::vector<std::size_t> bounds = {0};
  bounds.insert(bounds.end(), ends.begin(), ends.end());
  bounds.push_back(rows);
  out.clusters.resize(bounds.size() - 1);
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    out.clusters[i].tokens.assign(order.begin() + std::ptrdiff_t(bounds[i]), order.begin() + std::ptrdiff_t(bounds[i + 1]));
  }

  // Cluster 0: full, fp32.
  LowRankCluster& c0 = out.clusters[0];
  c0.rank = d;
  c0.codec = WordRowCodec::kF32;
  c0.u.resize(c0.tokens.size() * d);
  for (std::size_t t = 0; t < c0.tokens.size(); ++t) {
    std::copy_n(table.data() + std::size_t(c0.tokens[t]) * d, d, c0.u.data() + t * d);
  }

  // The weighted Gram matrix of every other cluster and its eigen-decomposition (eigenvalues
  // decreasing).
  using Mat = Eigen::MatrixXd;
  const std::size_t n_low = out.clusters.size() - 1;
  std::vector<Mat> basis(n_low);         // columns: eigenvectors, decreasing eigenvalue
  std::vector<Eigen::VectorXd> eig(n_low);
  for (std::size_t i = 0; i < n_low; ++i) {
    const std::vector<std::int32_t>& tokens = out.clusters[i + 1].tokens;
    Mat x(static_cast<Eigen::Index>(tokens.size()), static_cast<Eigen::Index>(d));
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const double w = std::sqrt(std::pow(counts[std::size_t(tokens[t])] + 1.0, options.weight_power));
      for (std::size_t j = 0; j < d; ++j) x(Eigen::Index(t), Eigen::Index(j)) = w * table[std::size_t(tokens[t]) * d + j];
    }
    const Mat gram = x.transpose() * x;
    Eigen::SelfAdjointEigenSolver<Mat> solver(gram);
    require(solver.info() == Eigen::Success, "factorize_word_table: the eigen-decomposition did not converge");
    basis[i] = solver.eigenvectors().rowwise().reverse();
    eig[i] = solver.eigenvalues().reverse();
  }

  // The rank search under the byte budget.
  const double budget_bytes = options.budget * 4.0 * double(rows) * double(d);
  double used = double(c0.bytes(d));
  std::vector<std::size_t> rank(n_low, 1);
  // One more rank in cluster i: a value more in each of its U rows (1 byte at int8, 4 at f32; the
  // int8 row's scale is there at any rank) and a row more of V (d floats).
  const double value_bytes = options.codec == WordRowCodec::kInt8 ? 1.0 : 4.0;
  auto step_bytes = [&](std::size_t i) {
    return double(out.clusters[i + 1].tokens.size()) * value_bytes + 4.0 * double(d);
  };
  for (std::size_t i = 0; i < n_low; ++i) {
    used += double(out.clusters[i + 1].tokens.size() * word_row_bytes(options.codec, 1)) + 4.0 * double(d);
  }
  if (used > budget_bytes) {
    throw Error(concat("factorize_word_table: the budget (", std::to_string(options.budget),
                       " of the dense table) is below the smallest table these clusters allow: cluster 0 full and "
                       "rank 1 elsewhere takes ",
                       static_cast<std::uint64_t>(used), " bytes of ", static_cast<std::uint64_t>(budget_bytes),
                       " (make cluster 0 smaller or the budget larger)"));
  }
  for (;;) {
    std::size_t best = n_low;
    double best_gain = -1.0;
    for (std::size_t i = 0; i < n_low; ++i) {
      if (rank[i] + 1 >= d || used + step_bytes(i) > budget_bytes) continue;  // rank d: store it full instead
      const double gain = std::max(0.0, eig[i](Eigen::Index(rank[i]))) / step_bytes(i);
      if (gain > best_gain) {
        best_gain = gain;
        best = i;
      }
    }
    if (best == n_low) break;
    used += step_bytes(best);
    ++rank[best];
  }

  for (std::size_t i = 0; i < n_low; ++i) {
    LowRankCluster& c = out.clusters[i + 1];
    const std::size_t r = rank[i];
    c.rank = r;
    c.codec = options.codec;
    c.v.resize(r * d);
    for (std::size_t k = 0; k < r; ++k) {
      for (std::size_t j = 0; j < d; ++j) c.v[k * d + j] = float(basis[i](Eigen::Index(j), Eigen::Index(k)));
    }
    // U = X V^T (each row projected on the basis), as one product.
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    RowMat x(static_cast<Eigen::Index>(c.tokens.size()), static_cast<Eigen::Index>(d));
    for (std::size_t t = 0; t < c.tokens.size(); ++t) {
      std::copy_n(table.data() + std::size_t(c.tokens[t]) * d, d, x.data() + t * d);
    }
    const RowMat u = x * basis[i].leftCols(Eigen::Index(r)).cast<float>();
    c.u.assign(u.data(), u.data() + u.size());
  }
  return out;
}

}  // namespace stile::quant
