// The int8 linear format of a store's shards (ops/sharded_layer.hpp: shards decoded to int8, the
// int8 GEMM on u8 activations quantized per row) against the default fp32 path (the shards
// dequantized inside the fp32 GEMM), on a store with heads (tools/train_heads):
//
//   accuracy (default): per bitwidth of the store, the whole model with every shard at it, over
//     SST-2 dev: the cosine of each sentence embedding through int8 to the same through fp32
//     (mean, min), and SST-2 dev accuracy of both with the head of the plan's shape. dev.tsv is
//     only read to report: nothing is fit to it.
//   --scales: what the column stacks' one scale per row costs (kernels/dict_int8_stack.hpp): per
//     bitwidth, the RMS error of W_o's and W_2's int8 weights (all shards of every layer, outliers
//     apart) with the common scale and with each shard's own, relative to the weights' RMS.
//   --time: one layer's compute (layer 0, all M shards) per bitwidth and sequence length, fp32 and
//     int8 alternating round by round: "made+run" includes making the layer (the int8 decode: the
//     engine makes it per request, into the buffers of the layer before), "run" the layer alone
//     (what the device profile's T_comp times).
//     Run it under /work/data/quiet.sh (or an otherwise idle machine).
//
//   eval_shard_int8 STORE [--heads FILE] [--sst2 DIR] [--limit N] [--bits LIST] [--scales] [--time]
//                   [--lengths LIST] [--threads N] [--rounds R]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "embed_texts.hpp"
#include "stile/calibrate/sst2.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/kernels/dict.hpp"
#include "stile/kernels/dict_int8_stack.hpp"
#include "stile/model/heads_file.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/ops/sharded_layer.hpp"

#ifndef STILE_SST2_DIR
#define STILE_SST2_DIR "../shared/data/sst2"
#endif

namespace fs = std::filesystem;

namespace {

// L2-normalized mean-pooled embeddings of every sentence through `plan` in `linear`.
std::vector<std::vector<float>> embed(const stile::ShardedBert& bert, const std::vector<stile::Encoding>& dev,
                                      const stile::SubmodelPlan& plan, stile::LinearFormat linear,
                                      stile::ThreadPool& pool, const std::string& label) {
  constexpr std::size_t kBatch = 32;
  const std::size_t d = bert.config().hidden;
  stile::EncodeOptions options;
  options.pool = &pool;
  options.linear = linear;
  std::vector<std::vector<float>> out;
  std::vector<float> hidden;
  stile::ProgressBar bar(label);
  for (std::size_t b = 0; b < dev.size(); b += kBatch) {
    const std::span<const stile::Encoding> part = std::span(dev).subspan(b, std::min(kBatch, dev.size() - b));
    const std::vector<std::size_t> lengths = bert.encode(part, hidden, plan, options);
    std::size_t at = 0;
    for (const std::size_t s : lengths) {
      std::vector<float> e(d);
      stile::pool_tokens(std::span<const float>(hidden).subspan(at * d, s * d), s, d, stile::Pooling::kMean, e);
      stile::l2_normalize(e);
      out.push_back(std::move(e));
      at += s;
    }
    bar.update(b + part.size(), dev.size());
  }
  return out;
}

// Sum of squared errors of a decoded stack against its fp32 dequantization (outliers are exact
// either way) and sum of squared weights.
void stack_error(const stile::StackedDict& s, double& err2, double& ref2) {
  const stile::DictInt8Weights w = stile::decode_to_int8(s);
  std::vector<float> ref(s.rows() * s.cols());
  stile::dequantize(s, ref.data());
  const stile::Int8Matrix& v = w.int8.view;
  for (std::size_t n = 0; n < s.rows(); ++n) {
    for (std::size_t k = 0; k < s.cols(); ++k) {
      const double want = ref[n * s.cols() + k];
      const double got = double(v.scales[n]) * v.stored(n, k);
      if (v.stored(n, k) != 0 || std::abs(want) < 0.5 * double(v.scales[n])) err2 += (got - want) * (got - want);
      ref2 += want * want;
    }
  }
}

void scales_report(const stile::ShardStore& store, const std::vector<unsigned>& bits) {
  fmt::print("\nW_o and W_2 to int8, all {} shards of all {} layers: RMS error / RMS weight (outliers apart)\n",
             store.shards_per_layer(), store.num_layers());
  fmt::print("{:>5} | {:>22} | {:>22}\n", "bits", "common scale per row", "each shard its own");
  for (const unsigned b : bits) {
    if (b == 32) continue;
    double common_err = 0, common_ref = 0, own_err = 0, own_ref = 0;
    for (std::size_t l = 0; l < store.num_layers(); ++l) {
      std::vector<stile::ShardBuffer> buffers;
      std::vector<stile::DictMatrix> attn_out, ffn_out;
      for (std::size_t s = 0; s < store.shards_per_layer(); ++s) {
        buffers.push_back(store.read_shard(l, s, b));
        attn_out.push_back(buffers.back().view().matrix(stile::ShardMatrix::kAttnOut));
        ffn_out.push_back(buffers.back().view().matrix(stile::ShardMatrix::kFfnOut));
      }
      for (const auto* blocks : {&attn_out, &ffn_out}) {
        stack_error(stile::stack_cols(*blocks), common_err, common_ref);
        for (std::size_t i = 0; i < blocks->size(); ++i) {
          stack_error(stile::stack_cols(std::span(*blocks).subspan(i, 1)), own_err, own_ref);
        }
      }
    }
    fmt::print("{:>5} | {:>21.3f}% | {:>21.3f}%\n", b, 100 * std::sqrt(common_err / common_ref),
               100 * std::sqrt(own_err / own_ref));
  }
}

void time_report(const stile::ShardStore& store, const std::vector<unsigned>& bits,
                 const std::vector<std::size_t>& lengths, stile::ThreadPool& pool, std::size_t rounds) {
  const stile::EncoderConfig& c = store.config();
  const std::size_t M = store.shards_per_layer();
  const stile::LayerResident resident = store.read_resident(0);
  const stile::LayerResidentView rv = stile::resident_view(resident);
  stile::EncoderWorkspace ws;
  fmt::print("\nlayer 0, all {} shards, {} thread(s), machine: {}; stile target {}\n", M, pool.num_threads(),
             stile::bench::machine_description(), stile::active_target_name());
  fmt::print("median over {} alternating rounds (fp32, int8, fp32, ...) of batches of calls, ms per call\n", rounds);
  fmt::print("{:>5} {:>7} | {:>10} {:>10} {:>7} | {:>10} {:>10} {:>7}\n", "bits", "tokens", "fp32 run", "int8 run",
             "ratio", "fp32 m+r", "int8 m+r", "ratio");
  for (const unsigned b : bits) {
    std::vector<stile::ShardBuffer> buffers;
    std::vector<stile::ShardView> views;
    for (std::size_t s = 0; s < M; ++s) {
      buffers.push_back(store.read_shard(0, s, b));
      views.push_back(buffers.back().view());
    }
    const stile::ShardedLayer f32(store.shard_shape(), views, rv, {}, stile::LinearFormat::kF32, &pool);
    const stile::ShardedLayer i8(store.shard_shape(), views, rv, {}, stile::LinearFormat::kInt8, &pool);
    stile::ShardedLayer::Int8Buffers reuse;
    for (const std::size_t t : lengths) {
      std::vector<float> input(t * c.hidden), x;
      for (std::size_t i = 0; i < input.size(); ++i) input[i] = float(std::sin(0.37 * double(i)));
      const std::size_t offsets[2] = {0, t};
      auto run = [&](const stile::ShardedLayer& layer) {
        x = input;
        layer.run(c, x.data(), offsets, ws, pool);
      };
      auto made = [&](stile::LinearFormat f) {
        // As the engine's CPU layer makes it (ops/layer_compute.hpp): into the last one's buffers.
        const stile::ShardedLayer layer(store.shard_shape(), views, rv, {}, f, &pool, &reuse);
        x = input;
        layer.run(c, x.data(), offsets, ws, pool);
      };
      std::vector<double> r32, r8, m32, m8;
      for (std::size_t r = 0; r < rounds; ++r) {
        r32.push_back(stile::bench::median_seconds([&] { run(f32); }, 3, 0.05));
        r8.push_back(stile::bench::median_seconds([&] { run(i8); }, 3, 0.05));
        m32.push_back(stile::bench::median_seconds([&] { made(stile::LinearFormat::kF32); }, 3, 0.05));
        m8.push_back(stile::bench::median_seconds([&] { made(stile::LinearFormat::kInt8); }, 3, 0.05));
      }
      auto med = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
        return 1e3 * v[v.size() / 2];
      };
      const double a = med(r32), bb = med(r8), cc = med(m32), dd = med(m8);
      fmt::print("{:>5} {:>7} | {:>10.3f} {:>10.3f} {:>7.2f} | {:>10.3f} {:>10.3f} {:>7.2f}\n", b, t, a, bb, bb / a, cc,
                 dd, dd / cc);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  fs::path sst2_dir = STILE_SST2_DIR, heads_path;
  std::size_t threads = 0, limit = 0;
  std::size_t rounds = 5;
  bool scales = false, timing = false;
  std::vector<unsigned> bits;
  std::vector<std::size_t> lengths{16, 32, 64, 128, 256};
  stile_cli::Parser cli("eval_shard_int8", "STORE [options]",
                        "The store's shards through the int8 linear format against the fp32 dequantizing path: "
                        "SST-2 dev accuracy and embedding cosine, the column stacks' scale error, layer time.");
  cli.flag("--heads", "FILE", "heads file (default: STORE.heads.json)", heads_path);
  cli.flag("--sst2", "DIR", "the SST-2 directory with dev.tsv", sst2_dir);
  cli.flag("--limit", "N", "only the first N dev sentences (0: all)", limit);
  cli.flag("--bits", "LIST", "bitwidths (default: the store's)", [&](std::string_view v) {
    bits =
        stile_cli::parse_list(v, "--bits", [](std::string_view b) { return stile_cli::parse_bitwidth(b, "--bits"); });
  });
  cli.flag("--lengths", "LIST", "sequence lengths for --time", [&](std::string_view v) {
    lengths = stile_cli::parse_list(v, "--lengths",
                                    [](std::string_view l) { return stile_cli::parse_whole(l, "--lengths"); });
  });
  cli.toggle("--scales", "the column stacks' scale error instead of accuracy", scales);
  cli.toggle("--time", "layer compute time instead of accuracy", timing);
  cli.flag("--rounds", "R", "alternating rounds for --time", rounds).at_least(1);
  cli.threads(threads);
  cli.example("eval_shard_int8 minilm.stile --time --bits 4,6 --lengths 16,128");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.size() != 1) cli.fail("give one shard store");
  const fs::path store_path = positional[0];
  if (heads_path.empty()) heads_path = store_path.string() + ".heads.json";
  try {
    stile::ThreadPool pool(threads);
    const stile::ShardedBert bert = stile::ShardedBert::open(store_path);
    const stile::ShardStore& store = bert.store();
    if (bits.empty()) bits = store.bits();
    for (const unsigned b : bits)
      stile::require(store.has_bits(b), "eval_shard_int8: the store has no " + std::to_string(b) + "-bit shards");
    if (scales) {
      scales_report(store, bits);
      return 0;
    }
    if (timing) {
      time_report(store, bits, lengths, pool, rounds);
      return 0;
    }
    const stile::HeadsFile heads = stile::HeadsFile::load(heads_path);
    const stile::LabeledSentences dev_rows = stile::bench::read_dev(sst2_dir, limit);
    const stile::WordPieceTokenizer tokenizer(stile::Vocab::parse(store.read_vocab(), store.name()),
                                              stile::WordPieceOptions{.max_length = 256});
    std::vector<stile::Encoding> dev;
    for (const std::string& s : dev_rows.sentences) dev.push_back(tokenizer.encode(s));
    fmt::print("SST-2 dev, {} sentences; store {}; heads {}; stile target {}\n", dev.size(), store_path.string(),
               heads_path.string(), stile::active_target_name());
    fmt::print("{:>5} | {:>11} {:>10} | {:>9} {:>9} {:>8}\n", "bits", "cosine mean", "cosine min", "acc fp32",
               "acc int8", "diff pt");
    for (const unsigned b : bits) {
      const stile::SubmodelPlan plan = stile::SubmodelPlan::uniform(store.num_layers(), store.shards_per_layer(), b);
      std::string key;
      const stile::StoredHead* head = heads.find_for(plan, &key);
      stile::require(head != nullptr, heads_path.string() + ": no head for the whole model");
      const auto f32 = embed(bert, dev, plan, stile::LinearFormat::kF32, pool, fmt::format("{} bits fp32", b));
      const auto i8 = embed(bert, dev, plan, stile::LinearFormat::kInt8, pool, fmt::format("{} bits int8", b));
      double mean = 0, worst = std::numeric_limits<double>::infinity();
      std::size_t ok32 = 0, ok8 = 0;
      for (std::size_t i = 0; i < dev.size(); ++i) {
        const double cs = stile::cosine_similarity(f32[i], i8[i]);
        mean += cs / double(dev.size());
        worst = std::min(worst, cs);
        ok32 += head->head.predict(f32[i]) == dev_rows.labels[i];
        ok8 += head->head.predict(i8[i]) == dev_rows.labels[i];
      }
      const double a32 = 100.0 * double(ok32) / double(dev.size()), a8 = 100.0 * double(ok8) / double(dev.size());
      fmt::print("{:>5} | {:>11.5f} {:>10.5f} | {:>8.2f}% {:>8.2f}% {:>+8.2f}\n", b, mean, worst, a32, a8, a8 - a32);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "eval_shard_int8: {}\n", e.what());
    return 1;
  }
  return 0;
}
