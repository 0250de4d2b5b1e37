// The number-format float wrappers (kernels/number_formats.hpp: the int8 and integer LayerNorms,
// the integer and erf-approximation GELUs, the integer softmax) against their fp32 counterparts
// (layer_norm_rows, softmax_rows, gelu_inplace), on BERT shapes, as the library instantiates
// them (the wrappers on each xsimd architecture the library was compiled for and this CPU runs,
// best first; the fp32 kernels on the CPU's best Highway target). Every call starts from the same
// input (the kernels work in place): the copy is timed alone and subtracted. Median of 9 batches;
// single thread.
//
//   bench_number_formats [--quick]
#include <cstring>
#include <memory>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/kernels/activation.hpp"
#include "stile/kernels/number_formats.hpp"
#include "stile/kernels/rowwise.hpp"

namespace {

struct Case {
  std::string name;
  std::vector<float> input;
  std::function<void(float*)> fp32, wrapper;
  std::string wrapper_name;
};

std::vector<float> normal(std::size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  stile_cli::Parser cli("bench_number_formats", "[--quick]",
                        "number-format wrappers (int8 / integer LayerNorm, integer / erf-approx GELU, integer softmax) "
                        "against the fp32 kernels on BERT shapes");
  cli.toggle("--quick", "fewer batches", quick);
  cli.example("bench_number_formats --quick");
  cli.parse(argc, argv);
  const int batches = quick ? 5 : 9;

  std::mt19937 rng(1234);
  std::vector<Case> cases;
  // 16 rows: a short request, where the per-call set-up counts.
  for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{256, 384}, {256, 768}, {16, 384}}) {
    auto gamma = std::make_shared<std::vector<float>>(normal(cols, 0.1f, rng));
    for (auto& g : *gamma) g += 1.0f;
    auto beta = std::make_shared<std::vector<float>>(normal(cols, 0.05f, rng));
    std::vector<float> in = normal(rows * cols, 1.5f, rng);
    for (std::size_t r = 0; r < rows; ++r) in[r * cols + (r * 7) % cols] = 12.0f;  // BERT-like outlier dims
    const std::string shape = fmt::format("LayerNorm {}x{}", rows, cols);
    auto fp32 = [=](float* x) { stile::layer_norm_rows(x, rows, cols, cols, gamma->data(), beta->data(), 1e-12f); };
    cases.push_back(
        {shape, in, fp32,
         [=](float* x) { stile::layer_norm_int8_rows(x, rows, cols, cols, gamma->data(), beta->data(), 1e-12f); },
         "layer_norm_int8_rows"});
    cases.push_back(
        {shape, in, fp32,
         [=](float* x) { stile::layer_norm_integer_rows(x, rows, cols, cols, gamma->data(), beta->data(), 1e-12f); },
         "layer_norm_integer_rows"});
  }
  struct SoftmaxShape {
    std::size_t heads, rows, cols;
  };
  for (const SoftmaxShape s : {SoftmaxShape{12, 256, 256}, SoftmaxShape{12, 16, 16}}) {
    const std::size_t rows = s.heads * s.rows;
    const float scale = 0.17677669f;  // 1 / sqrt(32), MiniLM's head size
    const std::string shape = fmt::format("softmax {}x{}x{}", s.heads, s.rows, s.cols);
    cases.push_back({shape, normal(rows * s.cols, 12.0f, rng),
                     [=](float* x) { stile::softmax_rows(x, rows, s.cols, s.cols, scale); },
                     [=](float* x) { stile::softmax_integer_rows(x, rows, s.cols, s.cols, scale); },
                     "softmax_integer_rows"});
  }
  {
    const std::size_t n = 256 * 1536;
    const std::string shape = "GELU 256x1536";
    auto fp32 = [=](float* x) { stile::gelu_inplace(x, n); };
    const std::vector<float> in = normal(n, 2.0f, rng);
    cases.push_back({shape, in, fp32, [=](float* x) { stile::gelu_integer_inplace(x, n); }, "gelu_integer_inplace"});
    cases.push_back(
        {shape, in, fp32, [=](float* x) { stile::gelu_erf_approx_inplace(x, n); }, "gelu_erf_approx_inplace"});
  }

  fmt::print("machine: {}; 1 thread; median of {} batches, microseconds per call, input copy subtracted\n",
             stile::bench::machine_description(), batches);
  const std::vector<std::string> archs = stile::number_formats_archs();
  fmt::print("{:<22} {:<26} {:>10} {:>12} {:>12} {:>7}\n", "shape", "wrapper", "fp32 us", "xsimd arch", "wrapper us",
             "ratio");
  for (const Case& c : cases) {
    std::vector<float> work(c.input.size());
    auto copy = [&] { std::memcpy(work.data(), c.input.data(), c.input.size() * sizeof(float)); };
    const double t_copy = stile::bench::median_seconds(copy, batches);
    // One kernel on a fresh copy of the input, the copy's time subtracted.
    auto seconds = [&](const std::function<void(float*)>& kernel) {
      return stile::bench::median_seconds(
                 [&] {
                   copy();
                   kernel(work.data());
                 },
                 batches) -
             t_copy;
    };
    const double t_fp32 = seconds(c.fp32);
    for (const std::string& arch : archs) {
      stile::set_number_formats_arch(arch);
      const double t_wrap = seconds(c.wrapper);
      fmt::print("{:<22} {:<26} {:>10.1f} {:>12} {:>12.1f} {:>7.2f}\n", c.name, c.wrapper_name, t_fp32 * 1e6, arch,
                 t_wrap * 1e6, t_wrap / t_fp32);
    }
    stile::set_number_formats_arch("");
  }
  return 0;
}
