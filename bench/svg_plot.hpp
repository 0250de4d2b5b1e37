#pragma once
// A small SVG line and scatter plot for the figures in docs/ (the GA's convergence, the Pareto
// front): no plotting library needed to regenerate them from a bench run.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include <fmt/core.h>

namespace stile::bench {

struct PlotSeries {
  std::string name, color;
  std::vector<double> x, y;
  bool points = false;  // markers instead of a line
};

inline std::string svg_plot(const std::string& title, const std::string& xlabel, const std::string& ylabel,
                            const std::vector<PlotSeries>& series, bool log_x = false) {
  constexpr double W = 720, H = 440, L = 80, R = 190, T = 40, B = 60;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto tx = [&](double x) { return log_x ? std::log10(std::max(x, 1e-12)) : x; };
  for (const auto& s : series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, tx(s.x[i])), x1 = std::max(x1, tx(s.x[i]));
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > y0)) y1 = y0 + 1;
  const double pad = 0.04 * (y1 - y0);
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return L + (tx(x) - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n",
      W, H, L, title);
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", L, H - B, W - R);
  s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", L, T, H - B);
  for (int k = 0; k <= 5; ++k) {
    const double yv = y0 + (y1 - y0) * k / 5, xv = x0 + (x1 - x0) * k / 5;
    const double xr = log_x ? std::pow(10.0, xv) : xv;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.4g}</text>\n", L - 6, py(yv) + 4, yv);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:.4g}</text>\n", L + (W - L - R) * k / 5,
                     H - B + 18, xr);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + (W - L - R) / 2, H - 18,
                   xlabel + (log_x ? " (log scale)" : ""));
  s += fmt::format("<text x=\"16\" y=\"{0}\" transform=\"rotate(-90 16 {0})\" text-anchor=\"middle\">{1}</text>\n",
                   T + (H - T - B) / 2, ylabel);
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& sr = series[k];
    if (sr.points) {
      for (std::size_t i = 0; i < sr.x.size(); ++i) {
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", px(sr.x[i]), py(sr.y[i]),
                         sr.color);
      }
    } else {
      std::string pts;
      for (std::size_t i = 0; i < sr.x.size(); ++i) pts += fmt::format("{:.1f},{:.1f} ", px(sr.x[i]), py(sr.y[i]));
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", sr.color, pts);
    }
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n", W - R + 12, T + 20 * k,
                     sr.color);
    s += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", W - R + 30, T + 20 * k + 11, sr.name);
  }
  return s + "</svg>\n";
}

}  // namespace stile::bench
