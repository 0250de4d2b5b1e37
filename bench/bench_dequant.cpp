// The dictionary codec in the GEMM (kernels/dict-inl.h), single thread:
//   (a) panel decode throughput per bitwidth and lookup strategy, beside memcpy and the read of
//       fp32 packed weights;
//   (b) the fused dequant-GEMM (DictMatrix) against the fp32 GEMM on PackedF32 weights (what the
//       encoder runs today), BERT-base and MiniLM layer shapes, M = 32 and 128 tokens;
//   (c) fused against decode-then-GEMM (decode_to_packed, then the PackedF32 GEMM);
//   (d) the int8 path: decode_to_int8 (centroids rounded to int8, outliers exact in fp32) then the
//       int8 GEMM, against the fused fp32 dequant-GEMM and against the fp32 GEMM, and the error it adds.
// The weights are made on the spot: Gaussian random, quantized with stile's own quantizer.
//
//   bench_dequant [--quick] [--target NAME] [--part a|b|c|d] [--no-dot]
//     NAME: a Highway target this CPU has (e.g. SSE4), to compare the lookups on it.
//     --no-dot: the int8 GEMM without VNNI / AVX-VNNI / sdot (what an AVX2 CPU without them runs).
//     --outlier-ll X: the quantizer's outlier threshold (more outliers: the real model has ~0.5%).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/kernels/dict_int8.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/quant/dictionary.hpp"
#include "stile/quant/packed_layout.hpp"

namespace {

constexpr unsigned kBits[] = {2, 3, 4, 5, 6};
constexpr double kSigma = 0.04;  // about the spread of BERT's linear weights

// A quantized matrix and the storage its DictMatrix view points into.
struct Quantized {
  std::vector<std::uint8_t> packed;
  std::vector<float> centroids;
  stile::quant::QuantizedIndices q;
  stile::DictMatrix view;
};

// The quantizer's outlier threshold (--outlier-ll): its default keeps 0.04% of Gaussian weights
// as outliers, the real model's layers have 0.5-0.6% (docs/benchmarks/dictionary-gemm.md).
double g_outlier_ll = stile::quant::QuantizerOptions{}.outlier_log_likelihood;

Quantized quantize(const std::vector<float>& w, std::size_t rows, std::size_t cols, unsigned bits) {
  namespace quant = stile::quant;
  Quantized out;
  const std::span<const float> all(w);
  const quant::GaussianFit fit = quant::fit_gaussian(std::span<const std::span<const float>>(&all, 1));
  const quant::OutlierBounds bounds = quant::outlier_bounds(fit, g_outlier_ll);
  out.packed.resize(quant::packed_bytes(rows, cols, bits));
  if (bits == 32) {
    std::vector<float> slabs(out.packed.size() / sizeof(float));
    quant::pack_f32(rows, cols, w.data(), slabs.data());
    std::memcpy(out.packed.data(), slabs.data(), out.packed.size());
  } else {
    std::vector<float> inliers;
    for (float x : w) {
      if (!bounds.is_outlier(x)) inliers.push_back(x);
    }
    quant::QuantizerOptions opt;
    opt.refine = false;  // the dictionary's quality does not change the decode's speed
    out.centroids = quant::fit_dictionary(std::move(inliers), bits, opt).centroids;
    out.q = quant::index_matrix(w.data(), rows, cols, out.centroids, bounds);
    quant::pack_indices(rows, cols, bits, out.q.indices.data(), out.packed.data());
  }
  stile::DictMatrix& v = out.view;
  v.packed = out.packed.data();
  v.centroids = out.centroids.data();
  v.outlier_keys = out.q.outlier_keys.data();
  v.outlier_values = out.q.outlier_values.data();
  v.n_outliers = out.q.outlier_keys.size();
  v.n_rows = rows;
  v.n_cols = cols;
  v.bits = bits;
  return out;
}

std::vector<float> gaussian(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, static_cast<float>(kSigma));
  std::vector<float> w(n);
  for (float& x : w) x = dist(rng);
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string parts = "abcd";
  stile_cli::Parser cli("bench_dequant", "[options]",
                        "The dictionary codec in the GEMM, single thread: (a) panel decode throughput, (b) the fused "
                        "dequant-GEMM against the fp32 GEMM, (c) fused against decode-then-GEMM.");
  cli.toggle("--quick", "fewer rounds and batches", quick);
  cli.simd_target();
  cli.flag("--part", "LETTERS", "which parts to run, of a, b, c, d", parts);
  cli.flag("--outlier-ll", "X", "outlier threshold: log-likelihood under the Gaussian fit (default -4; -1.65 gives about 0.5%)",
           g_outlier_ll);
  cli.no_int8_dot();
  cli.example("bench_dequant --quick");
  cli.example("bench_dequant --part b --target AVX2", "the fused GEMM on the AVX2 code");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  const int rounds = quick ? 1 : 3, batches = quick ? 3 : 9;
  stile::ThreadPool pool(1);
  std::mt19937 rng(42);

  fmt::print("machine: {}\nstile target: {} (panel width NR = {})\n", stile::bench::machine_description(),
             stile::active_target_name(), stile::gemm_panel_width());
  fmt::print(
      "weights: made on the spot, Gaussian random N(0, {}^2), quantized by stile::quant (equal-population\n"
      "dictionary without refinement, outliers at log-likelihood < -4); single thread\n",
      kSigma);
  fmt::print("times: best of {} alternating rounds, each the median of {} batches\n\n", rounds, batches);

  // (a) Decode throughput: all KC x NR panels of a 3072 x 768 matrix, in GEMM order, into one
  // L1-resident panel buffer.
  if (parts.find('a') != std::string::npos) {
    const std::size_t N = 3072, K = 768;
    const double out_bytes = double(N) * double(K) * sizeof(float);
    const std::vector<float> w = gaussian(N * K, rng);
    fmt::print("(a) panel decode, {} x {}: GB/s of fp32 written into the L1 panel buffer (what the GEMM reads)\n", N,
               K);
    fmt::print("{:>9} {:>10} | {:>8} {:>8} {:>8} {:>8}   (auto: what the GEMM uses)\n", "bits", "outliers", "tree",
               "gather", "bytes", "auto");
    std::vector<Quantized> qs;
    for (const unsigned bits : kBits) qs.push_back(quantize(w, N, K, bits));
    qs.push_back(quantize(w, N, K, 32));
    for (const Quantized& q : qs) {
      double t[4] = {1e30, 1e30, 1e30, 1e30};
      const stile::DictLookup lookups[4] = {stile::DictLookup::kTree, stile::DictLookup::kGather,
                                            stile::DictLookup::kBytes, stile::DictLookup::kAuto};
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < 4; ++i) {
          t[i] = std::min(t[i], stile::bench::median_seconds(
                                    [&] { stile::detail::decode_panels_in_gemm_order(q.view, lookups[i]); }, batches));
        }
      }
      const bool fp32 = q.view.bits == 32;
      // (bytes below 4 bits, or on a target whose panels it does not take, is the automatic choice.)
      fmt::print("{:>9} {:>9.3f}% | {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f}\n", q.view.bits,
                 100.0 * double(q.view.n_outliers) / double(N * K), out_bytes / t[0] * 1e-9,
                 fp32 ? 0.0 : out_bytes / t[1] * 1e-9, out_bytes / t[2] * 1e-9, out_bytes / t[3] * 1e-9);
    }
    // Beside it: memcpy of the same fp32 bytes, and a read of them as PackedF32 (xor of the bits:
    // the GEMM on PackedF32 streams its panels from memory once per call, like this).
    std::vector<float> src(N * K, 1.0f), dst(N * K);
    double t_copy = 1e30, t_read = 1e30;
    std::uint32_t sink = 0;
    for (int r = 0; r < rounds; ++r) {
      t_copy = std::min(t_copy, stile::bench::median_seconds(
                                    [&] { std::memcpy(dst.data(), src.data(), src.size() * sizeof(float)); }, batches));
      t_read = std::min(t_read, stile::bench::median_seconds(
                                    [&] {
                                      std::uint32_t x = 0;
                                      const auto* u = reinterpret_cast<const std::uint32_t*>(dst.data());
                                      for (std::size_t i = 0; i < dst.size(); ++i) x ^= u[i];
                                      sink ^= x;
                                    },
                                    batches));
    }
    fmt::print("{:>9}   memcpy of the fp32 matrix: {:.1f} GB/s written; PackedF32 read: {:.1f} GB/s{}\n\n", "fp32",
               out_bytes / t_copy * 1e-9, out_bytes / t_read * 1e-9, sink == 12345 ? " " : "");
  }

  struct Shape {
    const char* model;
    std::size_t N, K;
  };
  const Shape shapes[] = {{"MiniLM", 1152, 384}, {"MiniLM", 384, 384}, {"MiniLM", 1536, 384}, {"MiniLM", 384, 1536},
                          {"BERT", 2304, 768},   {"BERT", 768, 768},   {"BERT", 3072, 768},   {"BERT", 768, 3072}};
  const std::size_t ms[] = {32, 128};

  // The layers of (b) and (c): fp32 packed, and quantized at every bitwidth.
  struct Layer {
    Shape s;
    stile::PackedWeights packed;
    std::vector<Quantized> q;
    std::vector<float> A[2];
    std::vector<float> C[2];
  };
  std::vector<Layer> layers;
  if (parts.find_first_of("bcd") != std::string::npos) {
    for (const Shape& s : shapes) {
      Layer& l = layers.emplace_back();
      l.s = s;
      const std::vector<float> w = gaussian(s.N * s.K, rng);
      l.packed = stile::pack_weights(stile::DenseF32(w.data(), s.N, s.K));
      for (const unsigned bits : kBits) l.q.push_back(quantize(w, s.N, s.K, bits));
      for (std::size_t mi = 0; mi < 2; ++mi) {
        l.A[mi] = gaussian(ms[mi] * s.K, rng);
        l.C[mi].resize(ms[mi] * s.N);
      }
    }
  }
  const auto gemm_time = [&](Layer& l, std::size_t mi, const auto& w) {
    return stile::bench::median_seconds(
        [&] { stile::gemm(ms[mi], l.A[mi].data(), l.s.K, w, l.C[mi].data(), l.s.N, stile::epilogue::None{}, &pool); },
        batches);
  };

  // (b) Fused dequant-GEMM against the fp32 GEMM on PackedF32.
  if (parts.find('b') != std::string::npos) {
    fmt::print("(b) fused dequant-GEMM (DictMatrix) vs fp32 GEMM on PackedF32: microseconds, and ratio dict / fp32\n");
    fmt::print("{:>6} {:>5} {:>5} {:>4} | {:>8} |", "model", "N", "K", "M", "fp32");
    for (const unsigned bits : kBits) fmt::print(" {:>8} {:>5}", fmt::format("k={}", bits), "ratio");
    fmt::print("\n");
    double worst[5] = {}, sum_log[5] = {};
    int count = 0;
    for (Layer& l : layers) {
      for (std::size_t mi = 0; mi < 2; ++mi) {
        double t_fp32 = 1e30, t_dict[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
        for (int r = 0; r < rounds; ++r) {
          t_fp32 = std::min(t_fp32, gemm_time(l, mi, l.packed.view));
          for (std::size_t b = 0; b < 5; ++b) t_dict[b] = std::min(t_dict[b], gemm_time(l, mi, l.q[b].view));
        }
        fmt::print("{:>6} {:>5} {:>5} {:>4} | {:>8.1f} |", l.s.model, l.s.N, l.s.K, ms[mi], t_fp32 * 1e6);
        for (std::size_t b = 0; b < 5; ++b) {
          const double ratio = t_dict[b] / t_fp32;
          worst[b] = std::max(worst[b], ratio);
          sum_log[b] += std::log(ratio);
          fmt::print(" {:>8.1f} {:>5.2f}", t_dict[b] * 1e6, ratio);
        }
        ++count;
        fmt::print("\n");
      }
    }
    fmt::print("{:>30} |", "ratio: geometric mean");
    for (std::size_t b = 0; b < 5; ++b) fmt::print(" {:>8} {:>5.2f}", "", std::exp(sum_log[b] / count));
    fmt::print("\n{:>30} |", "worst");
    for (std::size_t b = 0; b < 5; ++b) fmt::print(" {:>8} {:>5.2f}", "", worst[b]);
    fmt::print("\n(goal: at most 1.10)\n\n");
  }

  // (c) Fused against decode-then-GEMM: decode_to_packed (allocation and page faults of the new
  // fp32 copy included, as a caller pays them), then the PackedF32 GEMM.
  if (parts.find('c') != std::string::npos) {
    fmt::print(
        "(c) fused vs decode-then-GEMM: microseconds; decode = decode_to_packed (into a fresh fp32 copy),\n"
        "    gemm = the GEMM on the PackedF32 weights it makes\n");
    fmt::print("{:>6} {:>5} {:>5} {:>4} | {:>8} |", "model", "N", "K", "bits", "decode");
    for (const std::size_t M : ms) fmt::print(" {:>9} {:>9} {:>9}", fmt::format("gemm M={}", M), "dec+gemm", "fused");
    fmt::print("\n");
    for (Layer& l : layers) {
      double t_gemm[2] = {1e30, 1e30}, t_decode[5], t_fused[5][2];
      std::fill(t_decode, t_decode + 5, 1e30);
      std::fill(&t_fused[0][0], &t_fused[0][0] + 10, 1e30);
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t mi = 0; mi < 2; ++mi) t_gemm[mi] = std::min(t_gemm[mi], gemm_time(l, mi, l.packed.view));
        for (std::size_t b = 0; b < 5; ++b) {
          t_decode[b] = std::min(t_decode[b], stile::bench::median_seconds(
                                                  [&] {
                                                    const stile::PackedWeights p = stile::decode_to_packed(l.q[b].view);
                                                    if (p.view.data == nullptr) fmt::print("!");
                                                  },
                                                  batches));
          for (std::size_t mi = 0; mi < 2; ++mi)
            t_fused[b][mi] = std::min(t_fused[b][mi], gemm_time(l, mi, l.q[b].view));
        }
      }
      for (std::size_t b = 0; b < 5; ++b) {
        fmt::print("{:>6} {:>5} {:>5} {:>4} | {:>8.1f} |", l.s.model, l.s.N, l.s.K, kBits[b], t_decode[b] * 1e6);
        for (std::size_t mi = 0; mi < 2; ++mi) {
          fmt::print(" {:>9.1f} {:>9.1f} {:>9.1f}", t_gemm[mi] * 1e6, (t_decode[b] + t_gemm[mi]) * 1e6,
                     t_fused[b][mi] * 1e6);
        }
        fmt::print("\n");
      }
    }
  }
  // (d) The int8 path: decode_to_int8 then the int8 GEMM (outliers added in fp32), against the
  // fused fp32 dequant-GEMM; "int8 only": the GEMM on weights decoded once beforehand.
  if (parts.find('d') != std::string::npos) {
    const stile::Int8Packing packing = stile::int8_packing();
    fmt::print(
        "(d) int8 path: microseconds of the fused fp32 dequant-GEMM, of decode_to_int8 + gemm_dict_int8, and of\n"
        "    gemm_dict_int8 alone (weights decoded beforehand); ratios to fused. int8 weights: +-{} ({}), panel {}\n",
        packing.weight_max, packing.weight_max == 127 ? "dot product" : "7 bits, no dot product", packing.nr);
    fmt::print("    outliers: {:.3f}% of the weights (threshold: log-likelihood < {})\n",
               100.0 * double(layers[0].q[0].view.n_outliers) / double(layers[0].s.N * layers[0].s.K), g_outlier_ll);
    fmt::print("{:>6} {:>5} {:>5} {:>4} |", "model", "N", "K", "M");
    for (const unsigned bits : kBits) fmt::print(" {:>7} {:>5} {:>5}", fmt::format("k={}", bits), "dec+", "only");
    fmt::print("\n");
    // sum_log[b][2] / worst_fp32[b]: decode_to_int8 + int8 GEMM against the fp32 GEMM on PackedF32
    // (issue 23's measure, with the int8 path as the decoder).
    double sum_log[5][3] = {}, worst_fp32[5] = {}, werr[5] = {}, cerr[5] = {};
    int count = 0;
    for (Layer& l : layers) {
      std::vector<stile::DictInt8Weights> w8;
      for (std::size_t b = 0; b < 5; ++b) w8.push_back(stile::decode_to_int8(l.q[b].view));
      for (std::size_t mi = 0; mi < 2; ++mi) {
        double t_fused[5], t_dec[5], t_only[5], t_fp32 = 1e30;
        std::fill(t_fused, t_fused + 5, 1e30);
        std::fill(t_dec, t_dec + 5, 1e30);
        std::fill(t_only, t_only + 5, 1e30);
        const std::size_t M = ms[mi];
        for (int r = 0; r < rounds; ++r) {
          t_fp32 = std::min(t_fp32, gemm_time(l, mi, l.packed.view));
          for (std::size_t b = 0; b < 5; ++b) {
            t_fused[b] = std::min(t_fused[b], gemm_time(l, mi, l.q[b].view));
            t_dec[b] = std::min(t_dec[b], stile::bench::median_seconds(
                                              [&] {
                                                const stile::DictInt8Weights d = stile::decode_to_int8(l.q[b].view);
                                                stile::gemm_dict_int8(M, l.A[mi].data(), l.s.K, d, l.C[mi].data(),
                                                                      l.s.N, &pool);
                                              },
                                              batches));
            t_only[b] = std::min(t_only[b], stile::bench::median_seconds(
                                                [&] {
                                                  stile::gemm_dict_int8(M, l.A[mi].data(), l.s.K, w8[b],
                                                                        l.C[mi].data(), l.s.N, &pool);
                                                },
                                                batches));
          }
        }
        fmt::print("{:>6} {:>5} {:>5} {:>4} |", l.s.model, l.s.N, l.s.K, M);
        for (std::size_t b = 0; b < 5; ++b) {
          fmt::print(" {:>7.1f} {:>5.2f} {:>5.2f}", t_fused[b] * 1e6, t_dec[b] / t_fused[b], t_only[b] / t_fused[b]);
          sum_log[b][0] += std::log(t_dec[b] / t_fused[b]);
          sum_log[b][1] += std::log(t_only[b] / t_fused[b]);
          sum_log[b][2] += std::log(t_dec[b] / t_fp32);
          worst_fp32[b] = std::max(worst_fp32[b], t_dec[b] / t_fp32);
        }
        fmt::print("\n");
        ++count;
        if (mi == 1) continue;
        // The error the int8 path adds, at M = 32: weights (s q against the centroid or outlier)
        // and outputs (against the fused fp32 GEMM's), each as RMS error / RMS value.
        for (std::size_t b = 0; b < 5; ++b) {
          std::vector<float> dense(l.s.N * l.s.K), ref(M * l.s.N), got(M * l.s.N);
          stile::dequantize(l.q[b].view, dense.data());
          const stile::DictInt8Weights& d = w8[b];
          double e2 = 0, v2 = 0;
          for (std::size_t n = 0; n < l.s.N; ++n) {
            for (std::size_t k = 0; k < l.s.K; ++k) {
              double x = d.scale * d.int8.view.stored(n, k);
              const double truth = dense[n * l.s.K + k];
              e2 += (x - truth) * (x - truth);
              v2 += truth * truth;
            }
          }
          for (std::size_t i = 0; i < d.outlier_v.size(); ++i) {  // outliers are exact: undo their stored 0
            const double t = d.outlier_v[i];
            e2 -= t * t;
          }
          werr[b] = std::max(werr[b], std::sqrt(std::max(e2, 0.0) / v2));
          stile::gemm(M, l.A[mi].data(), l.s.K, l.q[b].view, ref.data(), l.s.N, stile::epilogue::None{}, &pool);
          stile::gemm_dict_int8(M, l.A[mi].data(), l.s.K, d, got.data(), l.s.N, &pool);
          e2 = v2 = 0;
          for (std::size_t i = 0; i < ref.size(); ++i) {
            e2 += double(got[i] - ref[i]) * double(got[i] - ref[i]);
            v2 += double(ref[i]) * double(ref[i]);
          }
          cerr[b] = std::max(cerr[b], std::sqrt(e2 / v2));
        }
      }
    }
    fmt::print("{:>23} |", "geometric mean");
    for (std::size_t b = 0; b < 5; ++b) {
      fmt::print(" {:>7} {:>5.2f} {:>5.2f}", "", std::exp(sum_log[b][0] / count), std::exp(sum_log[b][1] / count));
    }
    fmt::print("\n{:>23} |", "dec+ / fp32 GEMM: mean");
    for (std::size_t b = 0; b < 5; ++b) fmt::print(" {:>19.2f}", std::exp(sum_log[b][2] / count));
    fmt::print("\n{:>23} |", "worst");
    for (std::size_t b = 0; b < 5; ++b) fmt::print(" {:>19.2f}", worst_fp32[b]);
    fmt::print("\n{:>23} |", "weight error (worst)");
    for (std::size_t b = 0; b < 5; ++b) fmt::print(" {:>19.2e}", werr[b]);
    fmt::print("\n{:>23} |", "output error (worst)");
    for (std::size_t b = 0; b < 5; ++b) fmt::print(" {:>19.2e}", cerr[b]);
    fmt::print(
        "\n(dec+ / fp32 GEMM: decode_to_int8 on every call + the int8 GEMM, against the fp32 GEMM on PackedF32 in\n"
        " the same rounds, geometric mean and worst over the 16 shapes;\n"
        " errors: RMS error / RMS value, against the dictionary weights and the fused fp32 GEMM's output, M = 32;\n"
        " the output error includes the activations' u8 quantization)\n");
  }
  return 0;
}
