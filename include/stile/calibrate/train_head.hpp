#pragma once
// Training a classification head, offline: multinomial logistic regression over pooled sentence
// embeddings, giving a LinearHead (model/linear_head.hpp, which the runtime reads), and scoring a
// head on labelled embeddings.
//
// Training minimises the mean softmax cross-entropy plus l2/2 ||W||^2 (the bias is not
// penalised) with L-BFGS from W = 0, b = 0: full batch, no randomness, sums in double in fixed
// chunks of rows added in chunk order, so the same features give the same head bit for bit
// whatever the thread count. The problem is convex and, with l2 > 0, strictly so in W: the
// optimum is unique, and L-BFGS reaches it on 8000 x 384 features in a few hundred cheap
// iterations (a full-batch gradient is ~12 M multiply-adds).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/linear_head.hpp"

namespace stile {

// How `head` does on n embeddings ([n x hidden]) with their labels: correct predictions and the
// mean log-probability of the true label.
inline HeadScore score_head(const LinearHead& head, std::span<const float> embeddings,
                            std::span<const std::size_t> labels) {
  const std::size_t d = head.hidden();
  require(embeddings.size() == labels.size() * d, "score_head: " + std::to_string(labels.size()) + " labels and " +
                                                      std::to_string(embeddings.size()) + " embedding values (hidden " +
                                                      std::to_string(d) + ")");
  HeadScore s;
  s.total = labels.size();
  double sum = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::span<const float> e = embeddings.subspan(i * d, d);
    if (head.predict(e) == labels[i]) ++s.correct;
    sum += head.log_probability(e, labels[i]);
  }
  s.mean_log_prob = labels.empty() ? 0.0 : sum / double(labels.size());
  return s;
}

struct LogisticRegressionOptions {
  double l2 = 1e-4;               // penalty l2/2 ||W||^2 on top of the mean cross-entropy
  std::size_t iterations = 1000;  // L-BFGS iterations at most
  double tolerance = 1e-6;        // converged when max |gradient| < tolerance
  std::size_t history = 10;       // L-BFGS memory (pairs kept)
  ThreadPool* pool = nullptr;     // threads for the gradient (null: one thread); results do not depend on it
};

struct LogisticRegressionReport {
  double loss = 0;          // the objective at the answer
  double gradient_max = 0;  // max |gradient| there
  std::size_t iterations = 0;
  bool converged = false;     // gradient_max < tolerance (else the iteration limit, or no more progress)
  double train_accuracy = 0;  // accuracy of the answer on its training rows
};

namespace train_head_detail {

inline constexpr std::size_t kChunkRows = 256;  // fixed, so sums do not depend on the thread count

}  // namespace train_head_detail

// The objective and its gradient at params = [W (classes x dim, row-major), b (classes)]:
//   mean_i -log softmax(W x_i + b)[y_i] + l2/2 ||W||^2,
//   dW_c = mean_i (p_ic - [y_i = c]) x_i + l2 W_c,   db_c = mean_i (p_ic - [y_i = c]).
// gradient is resized to params.size().
inline double logistic_objective(std::span<const double> params, std::span<const float> features, std::size_t dim,
                                 std::span<const std::size_t> labels, std::size_t classes, double l2,
                                 std::vector<double>& gradient, ThreadPool* pool = nullptr) {
  const std::size_t n = labels.size();
  require(dim > 0 && classes > 0 && params.size() == classes * (dim + 1) && features.size() == n * dim && n > 0,
          "logistic_objective: sizes do not match");
  const std::size_t chunks = (n + train_head_detail::kChunkRows - 1) / train_head_detail::kChunkRows;
  std::vector<std::vector<double>> part_grad(chunks, std::vector<double>(params.size(), 0.0));
  std::vector<double> part_loss(chunks, 0.0);
  const double* w = params.data();
  const double* b = params.data() + classes * dim;
  auto run_chunk = [&](std::size_t k) {
    std::vector<double>& g = part_grad[k];
    std::vector<double> z(classes);
    double loss = 0;
    const std::size_t end = std::min(n, (k + 1) * train_head_detail::kChunkRows);
    for (std::size_t i = k * train_head_detail::kChunkRows; i < end; ++i) {
      const float* x = features.data() + i * dim;
      for (std::size_t c = 0; c < classes; ++c) {
        double s = b[c];
        const double* wc = w + c * dim;
        for (std::size_t j = 0; j < dim; ++j) s += wc[j] * double(x[j]);
        z[c] = s;
      }
      const double top = *std::max_element(z.begin(), z.end());
      double sum = 0;
      for (double& v : z) sum += (v = std::exp(v - top));
      const std::size_t y = labels[i];
      loss -= std::log(z[y] / sum);
      for (std::size_t c = 0; c < classes; ++c) {
        const double r = z[c] / sum - (c == y ? 1.0 : 0.0);
        double* gc = g.data() + c * dim;
        for (std::size_t j = 0; j < dim; ++j) gc[j] += r * double(x[j]);
        g[classes * dim + c] += r;
      }
    }
    part_loss[k] = loss;
  };
  if (pool != nullptr && chunks > 1) {
    pool->run(chunks, [&](std::size_t k, std::size_t) { run_chunk(k); });
  } else {
    for (std::size_t k = 0; k < chunks; ++k) run_chunk(k);
  }
  gradient.assign(params.size(), 0.0);
  double loss = 0;
  for (std::size_t k = 0; k < chunks; ++k) {  // chunk order: deterministic
    loss += part_loss[k];
    for (std::size_t p = 0; p < params.size(); ++p) gradient[p] += part_grad[k][p];
  }
  const double inv_n = 1.0 / double(n);
  loss *= inv_n;
  for (double& v : gradient) v *= inv_n;
  for (std::size_t p = 0; p < classes * dim; ++p) {
    loss += 0.5 * l2 * w[p] * w[p];
    gradient[p] += l2 * w[p];
  }
  return loss;
}

// Multinomial logistic regression on features [labels.size() x dim] with labels in
// 0..classes.size()-1; the head's labels are `classes`. See the top of this file.
inline LinearHead train_logistic_regression(std::span<const float> features, std::size_t dim,
                                            std::span<const std::size_t> labels, std::vector<std::string> classes,
                                            const LogisticRegressionOptions& options = {},
                                            LogisticRegressionReport* report = nullptr) {
  const std::size_t n = labels.size(), C = classes.size();
  require(C >= 2, "train_logistic_regression: need at least 2 classes");
  require(n > 0 && dim > 0 && features.size() == n * dim,
          "train_logistic_regression: " + std::to_string(features.size()) + " feature values for " + std::to_string(n) +
              " labels of dimension " + std::to_string(dim));
  require(options.l2 >= 0 && std::isfinite(options.l2), "train_logistic_regression: l2 must be finite and >= 0");
  for (std::size_t i = 0; i < n; ++i) {
    require(labels[i] < C, "train_logistic_regression: label " + std::to_string(labels[i]) + " of row " +
                               std::to_string(i) + " is outside the " + std::to_string(C) + " classes");
  }
  for (const float v : features) require(std::isfinite(v), "train_logistic_regression: a feature is not finite");

  const std::size_t P = C * (dim + 1);
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  auto max_abs = [](const std::vector<double>& a) {
    double m = 0;
    for (const double v : a) m = std::max(m, std::abs(v));
    return m;
  };
  std::vector<double> x(P, 0.0), g, x_new(P), g_new, dir(P);
  double f = logistic_objective(x, features, dim, labels, C, options.l2, g, options.pool);
  std::vector<std::vector<double>> s_hist, y_hist;
  std::vector<double> rho_hist;
  std::size_t it = 0;
  bool converged = max_abs(g) < options.tolerance;
  while (!converged && it < options.iterations) {
    // Two-loop recursion: dir = -H g, H the L-BFGS inverse-Hessian estimate.
    dir = g;
    const std::size_t m = s_hist.size();
    std::vector<double> alpha(m);
    for (std::size_t k = m; k-- > 0;) {
      alpha[k] = rho_hist[k] * dot(s_hist[k], dir);
      for (std::size_t p = 0; p < P; ++p) dir[p] -= alpha[k] * y_hist[k][p];
    }
    const double gamma = m == 0 ? 1.0 / std::max(1.0, max_abs(g))
                                : dot(s_hist[m - 1], y_hist[m - 1]) / dot(y_hist[m - 1], y_hist[m - 1]);
    for (double& v : dir) v *= gamma;
    for (std::size_t k = 0; k < m; ++k) {
      const double beta = rho_hist[k] * dot(y_hist[k], dir);
      for (std::size_t p = 0; p < P; ++p) dir[p] += (alpha[k] - beta) * s_hist[k][p];
    }
    for (double& v : dir) v = -v;
    double slope = dot(g, dir);
    if (!(slope < 0)) {  // not a descent direction (rounding): restart from steepest descent
      s_hist.clear();
      y_hist.clear();
      rho_hist.clear();
      for (std::size_t p = 0; p < P; ++p) dir[p] = -g[p] / std::max(1.0, max_abs(g));
      slope = dot(g, dir);
    }
    // Backtracking line search (Armijo); the L-BFGS step of 1 is accepted almost always.
    double step = 1.0, f_new = f;
    bool accepted = false;
    for (int tries = 0; tries < 40; ++tries) {
      for (std::size_t p = 0; p < P; ++p) x_new[p] = x[p] + step * dir[p];
      f_new = logistic_objective(x_new, features, dim, labels, C, options.l2, g_new, options.pool);
      if (std::isfinite(f_new) && f_new <= f + 1e-4 * step * slope) {
        accepted = true;
        break;
      }
      step *= 0.5;
    }
    ++it;
    if (!accepted) break;  // no more progress at double precision
    std::vector<double> s(P), y(P);
    for (std::size_t p = 0; p < P; ++p) {
      s[p] = x_new[p] - x[p];
      y[p] = g_new[p] - g[p];
    }
    const double sy = dot(s, y);
    if (sy > 1e-12 * std::sqrt(dot(s, s) * dot(y, y))) {  // keep only pairs of positive curvature
      if (s_hist.size() == options.history) {
        s_hist.erase(s_hist.begin());
        y_hist.erase(y_hist.begin());
        rho_hist.erase(rho_hist.begin());
      }
      s_hist.push_back(std::move(s));
      y_hist.push_back(std::move(y));
      rho_hist.push_back(1.0 / sy);
    }
    const double decrease = f - f_new;
    x.swap(x_new);
    g.swap(g_new);
    f = f_new;
    converged = max_abs(g) < options.tolerance;
    if (options.history == 0 || (!converged && decrease <= 1e-15 * std::max(1.0, std::abs(f)))) break;
  }

  LinearHead head;
  head.labels = std::move(classes);
  head.weight.resize(C * dim);
  head.bias.resize(C);
  for (std::size_t p = 0; p < C * dim; ++p) head.weight[p] = static_cast<float>(x[p]);
  for (std::size_t c = 0; c < C; ++c) head.bias[c] = static_cast<float>(x[C * dim + c]);
  if (report != nullptr) {
    report->loss = f;
    report->gradient_max = max_abs(g);
    report->iterations = it;
    report->converged = converged;
    report->train_accuracy = score_head(head, features, labels).accuracy();
  }
  return head;
}

}  // namespace stile
