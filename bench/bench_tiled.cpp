// bench_tiled: the memory-frugal (tiled) encoder layer against the untiled one, and the latency of
// n x m submodels, on layers assembled from shards (the engine's path: the GEMMs decode the
// quantized shards panel by panel).
//
//   bench_tiled [--store minilm.stile] [--bits 4] [--threads N] [--parts abc] [--json out.json]
//
// The working-memory budget is a property of the board, not of the request: one budget B per model,
// a third of the untiled layer's peak at s = 512 (K and V of every token alone are near a quarter),
// and the chooser's tiles for B at every s.
// (a) peak working memory of one layer vs sequence length 64..512, tiled (the arena's measured
//     peak) vs untiled (the workspace it grew, plus the attention kernel's workspace per thread);
// (b) latency of the whole encoder tiled vs untiled at s = 128 and 512 with those tiles, and at
//     s = 128 under a tight budget (a third of the untiled peak at s = 128), where tiles are small;
// (c) latency of every n x m submodel (first n layers, m shards each) at s = 128: the table the
//     compute planner reads;
// (d) MCUBERT's tiny-memory headline at s = 512: the smallest budget the tile chooser can meet
//     (tiles of one token), the whole encoder run with its tiles, and the request's whole working
//     memory: the hidden state x [s x d] fp32, the arena's measured peak (K and V of every token,
//     the query, score and FFN tiles), the GEMM's decode panels (its per-thread packed B block,
//     KC x NC floats, as allocated; KC x NR of it touched when the rows fit one MC block) and a
//     word row's reconstruction scratch (u: at most d floats); latency tiled vs untiled. Also for
//     the BERT-tiny shape (2 layers, d 128, 2 heads, d_ff 512; Gaussian weights made on the spot).
// (e) the budget-bound encoder (ops/frugal_layer.hpp: x, K and V in int8, online softmax, 4 KiB GEMM
//     blocks) at s = 512: BERT-tiny with the whole working memory under 256 KiB, the other models
//     at the smallest budget its chooser meets; whole working memory (the arena's measured peak,
//     which holds x, K/V, every tile and the input/output row scratch, plus the GEMMs' packed
//     blocks), latency against the untiled and the tiled encoder (part d's tiles), and the
//     output's cosine to the fp32 untiled encoder on the same weights (mean and worst row). For
//     BERT-tiny the inputs are its embeddings rebuilt inside the arena from a low-rank table
//     (TinyLowRankEmbeddings below), so the budget covers the embedding reconstruction too.
// MiniLM uses the real all-MiniLM-L6-v2 weights from a shard store (made by tools/convert);
// the BERT-base shape (12 layers, d 768, 12 heads, d_ff 3072) uses Gaussian weights made on the
// spot and quantized in memory, which the output says.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <span>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_timer.hpp"
#include "cli.hpp"
#include "stile/core/arena.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/active_target.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sharded_bert.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/ops/frugal_layer.hpp"
#include "stile/ops/tiled_layer.hpp"
#include "stile/quant/lowrank_table.hpp"

namespace {

// The shards of every layer of a model, at one bitwidth, in memory, with their views.
struct ModelShards {
  std::string name;
  stile::EncoderConfig config;
  stile::ShardShape shape;
  std::vector<std::vector<stile::EncodedShard>> encoded;     // [layer][shard]
  std::vector<std::vector<stile::ShardView>> views;          // [layer][shard]
  std::vector<std::array<std::vector<float>, 6>> resident;   // [layer]
  std::vector<std::unique_ptr<stile::ShardedLayer>> layers;  // all shards of each layer

  stile::LayerResidentView resident_view(std::size_t l) const {
    const auto& r = resident[l];
    return {r[0].data(), r[1].data(), r[2].data(), r[3].data(), r[4].data(), r[5].data()};
  }
  void finish() {
    for (std::size_t l = 0; l < views.size(); ++l) {
      layers.push_back(std::make_unique<stile::ShardedLayer>(shape, views[l], resident_view(l)));
    }
  }
};

// Gaussian weights (std 0.04, like a trained BERT's) quantized at `bits`: for shapes we have no
// checkpoint of. Said so in the output.
ModelShards random_model(std::string name, std::size_t layers, std::size_t d, std::size_t heads, std::size_t ff,
                         unsigned bits) {
  ModelShards m;
  m.name = std::move(name);
  m.config.hidden = d;
  m.config.num_layers = layers;
  m.config.num_heads = heads;
  m.config.intermediate = ff;
  m.config.layer_norm_eps = 1e-12f;
  m.shape = stile::ShardShape::of(m.config, heads);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 0.04f);
  const stile::quant::GaussianFit gauss{0.0, 0.04 * 0.04};
  const stile::quant::OutlierBounds bounds = stile::quant::outlier_bounds(gauss, -4.0);
  for (std::size_t l = 0; l < layers; ++l) {
    m.encoded.emplace_back();
    m.views.emplace_back();
    for (std::size_t s = 0; s < heads; ++s) {
      stile::converter_detail::ShardWeights sw;
      for (std::size_t k = 0; k < stile::kShardMatrices; ++k) {
        const auto which = static_cast<stile::ShardMatrix>(k);
        sw.matrices[k].resize(m.shape.rows(which) * m.shape.cols(which));
        for (float& x : sw.matrices[k]) x = g(rng);
      }
      sw.biases.assign(m.shape.bias_floats(), 0.01f);
      m.encoded[l].push_back(stile::encode_shard(sw, m.shape, bits, bounds, stile::quant::QuantizerOptions{}));
    }
    for (auto& e : m.encoded[l]) {
      m.views[l].push_back(
          stile::ShardView::parse(e.bytes.span(), m.shape, bits, e.dictionary, e.outliers, m.name + " shard"));
    }
    std::array<std::vector<float>, 6> r;
    for (std::size_t k = 0; k < 6; ++k) r[k].assign(d, k == 1 || k == 4 ? 1.0f : 0.0f);
    m.resident.push_back(std::move(r));
  }
  m.finish();
  return m;
}

// Every shard of every layer of a store at `bits`, read into memory.
struct StoreModel : ModelShards {
  std::vector<std::vector<stile::ShardBuffer>> buffers;
};

std::unique_ptr<StoreModel> store_model(const std::string& path, unsigned bits) {
  auto m = std::make_unique<StoreModel>();
  const stile::ShardStore store = stile::ShardStore::open(path);
  m->name = "all-MiniLM-L6-v2";
  m->config = store.config();
  m->shape = store.shard_shape();
  for (std::size_t l = 0; l < m->config.num_layers; ++l) {
    m->buffers.emplace_back();
    m->views.emplace_back();
    for (std::size_t s = 0; s < store.shards_per_layer(); ++s) m->buffers[l].push_back(store.read_shard(l, s, bits));
    for (const auto& b : m->buffers[l]) m->views[l].push_back(b.view());
    const stile::LayerResident r = store.read_resident(l);
    m->resident.push_back({r.attn_out_bias, r.ln1_gamma, r.ln1_beta, r.ffn_out_bias, r.ln2_gamma, r.ln2_beta});
  }
  m->finish();
  return m;
}

std::vector<float> inputs(std::size_t tokens, std::size_t d) {
  std::vector<float> x(tokens * d);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);
  return x;
}

// BERT-tiny's embeddings as a low-rank store holds them (issue 21's table, made on the spot, not
// factorized from a trained table: only its sizes matter here): the 512 most frequent tokens full
// (fp32 rows), the other 30010 at rank 32 with int8 U rows, V resident; position and token-type
// rows and the embedding LayerNorm resident. A request's token t is rebuilt as the engine does:
// its coded U row read into a 4 KiB block (O_DIRECT's unit), decoded, times V, plus its position
// and type rows, LayerNorm, all in the d-float row the frugal encoder hands out.
struct TinyLowRankEmbeddings {
  static constexpr std::size_t kVocab = 30522, kFull = 512, kRank = 32, kReadBlock = 4096;
  static constexpr stile::quant::WordRowCodec kCodec = stile::quant::WordRowCodec::kInt8;
  std::size_t d;
  std::vector<float> full, v, position, type, gamma, beta;
  std::vector<std::byte> coded;  // (kVocab - kFull) coded U rows: what reads return
  std::vector<std::int32_t> ids;  // the request's tokens

  TinyLowRankEmbeddings(std::size_t hidden, std::size_t tokens) : d(hidden) {
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const auto fill = [&](std::vector<float>& x, std::size_t n, float scale) {
      x.resize(n);
      for (float& e : x) e = scale * g(rng);
    };
    fill(full, kFull * d, 0.05f);
    fill(v, kRank * d, 0.05f);
    fill(position, tokens * d, 0.02f);
    fill(type, d, 0.02f);
    fill(gamma, d, 0.1f);
    for (float& e : gamma) e += 1.0f;
    fill(beta, d, 0.02f);
    const std::size_t row_bytes = stile::quant::word_row_bytes(kCodec, kRank);
    coded.resize((kVocab - kFull) * row_bytes);
    std::vector<float> u(kRank);
    for (std::size_t r = 0; r < kVocab - kFull; ++r) {
      for (float& e : u) e = g(rng);
      stile::quant::encode_word_row(kCodec, u, std::span(coded).subspan(r * row_bytes, row_bytes));
    }
    std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(kVocab - 1));
    ids.resize(tokens);
    for (auto& id : ids) id = token(rng);
  }
  // Arena bytes the rebuild takes besides the encoder's row: the read block and the decoded u.
  static std::size_t scratch_bytes() {
    return stile::Arena::round_up(kReadBlock) + stile::Arena::round_up(kRank * sizeof(float));
  }
  void rebuild(std::size_t t, std::span<float> row, std::span<std::byte> read_block, std::span<float> u) const {
    const auto id = static_cast<std::size_t>(ids[t]);
    if (id < kFull) {
      std::copy_n(&full[id * d], d, row.data());
    } else {
      const std::size_t row_bytes = stile::quant::word_row_bytes(kCodec, kRank);
      std::copy_n(&coded[(id - kFull) * row_bytes], row_bytes, read_block.data());  // the read
      stile::quant::decode_word_row(kCodec, read_block.first(row_bytes), u);
      stile::quant::reconstruct_word_row(u, v.data(), d, row.data());
    }
    double mean = 0, var = 0;
    for (std::size_t j = 0; j < d; ++j) mean += row[j] += position[t * d + j] + type[j];
    mean /= double(d);
    for (std::size_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
    const double inv = 1.0 / std::sqrt(var / double(d) + 1e-12);
    for (std::size_t j = 0; j < d; ++j) row[j] = float((row[j] - mean) * inv) * gamma[j] + beta[j];
  }
};

// The encoder over the first n layers with the first m shards of each.
struct Runner {
  const ModelShards& model;
  stile::ThreadPool& pool;

  double seconds(std::size_t s, std::size_t n, std::size_t m, const stile::LayerTiles* tiles) const {
    const std::vector<float> x0 = inputs(s, model.config.hidden);
    std::vector<float> x = x0;
    const std::vector<std::size_t> offsets = {0, s};
    std::vector<std::unique_ptr<stile::ShardedLayer>> partial;
    for (std::size_t l = 0; l < n; ++l) {
      partial.push_back(std::make_unique<stile::ShardedLayer>(
          model.shape, std::span<const stile::ShardView>(model.views[l]).first(m), model.resident_view(l)));
    }
    stile::EncoderWorkspace ws;
    stile::Arena arena;
    return stile::bench::median_seconds(
        [&] {
          x = x0;
          for (const auto& layer : partial) {
            if (tiles == nullptr) {
              layer->run(model.config, x.data(), offsets, ws, pool);
            } else {
              layer->run(model.config, x.data(), offsets, *tiles, arena, pool);
            }
          }
        },
        5, 0.05);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string store_path, json_path, parts = "abcde", which = "minilm,base,tiny";
  unsigned bits = 4;
  std::size_t threads = 0;
  stile_cli::Parser cli("bench_tiled", "[options]",
                        "The tiled encoder layer against the untiled one (a: peak memory, b: latency), and the latency "
                        "of every n x m submodel (c), on layers assembled from shards.");
  cli.flag("--store", "FILE", "a shard store of MiniLM (default: Gaussian weights of its shape, made on the spot)",
           store_path);
  cli.bits("--bits", "B", "the shards' bitwidth", bits);
  cli.threads(threads, "compute threads (default: $STILE_NUM_THREADS, else one per core)");
  cli.flag("--parts", "LETTERS", "which parts to run, of a, b, c, d, e", parts);
  cli.flag("--json", "FILE", "write the results as JSON", json_path);
  cli.flag("--models", "LIST", "which models to run, of minilm, base, tiny (comma-separated)", which);
  cli.example("bench_tiled --store minilm.stile --parts a", "working memory, untiled against tiled");
  cli.example("bench_tiled --parts e --models tiny", "BERT-tiny at 512 tokens under 256 KB");
  if (!cli.parse(argc, argv).empty()) cli.fail("takes no positional arguments");
  stile::ThreadPool pool(threads == 0 ? stile::default_thread_pool().num_threads() : threads);
  fmt::print("machine: {}\nstile target: {}, {} threads, shards at {} bits\n", stile::bench::machine_description(),
             stile::active_target_name(), pool.num_threads(), bits);
  nlohmann::json out;
  std::vector<std::unique_ptr<ModelShards>> models;
  const auto wanted = [&](std::string_view name) { return which.find(name) != std::string::npos; };
  if (!wanted("minilm")) {
  } else if (!store_path.empty()) {
    models.push_back(store_model(store_path, bits));
  } else {
    fmt::print("(no --store: the MiniLM shape runs on Gaussian weights made on the spot)\n");
    models.push_back(
        std::make_unique<ModelShards>(random_model("MiniLM shape (random weights)", 6, 384, 12, 1536, bits)));
  }
  if (wanted("base")) {
    models.push_back(
        std::make_unique<ModelShards>(random_model("BERT-base shape (random weights)", 12, 768, 12, 3072, bits)));
  }
  if (wanted("tiny")) {
    models.push_back(
        std::make_unique<ModelShards>(random_model("BERT-tiny shape (random weights)", 2, 128, 2, 512, bits)));
  }

  for (const auto& mp : models) {
    const ModelShards& m = *mp;
    const Runner run{m, pool};
    const std::size_t d = m.config.hidden, ff = m.config.intermediate;
    fmt::print("\n== {}: {} layers, d {}, {} heads, d_ff {}\n", m.name, m.config.num_layers, d, m.config.num_heads, ff);
    auto memory_shape = [&](std::size_t s) { return stile::LayerMemoryShape{s, s, d, ff, pool.num_threads(), m.config.head_dim()}; };
    const std::size_t budget = stile::untiled_layer_peak_bytes(memory_shape(512)) / 3;
    nlohmann::json mem = nlohmann::json::array(), lat = nlohmann::json::array();
    if (parts.find('a') != std::string::npos) {
      fmt::print(
          "(a) peak working memory of one layer (KiB), budget B = {:.1f} KiB\n{:>6} {:>12} {:>14} {:>12} {:>8} "
          "{:>10}\n",
          budget / 1024.0, "s", "untiled", "tiled (meas.)", "analytic", "ratio", "tiles");
      for (const std::size_t s : {64, 128, 256, 384, 512}) {
        const stile::LayerMemoryShape shape = memory_shape(s);
        const std::size_t untiled = stile::untiled_layer_peak_bytes(shape);
        const stile::LayerTiles tiles = stile::choose_layer_tiles(budget, shape);
        std::vector<float> x = inputs(s, d);
        const std::vector<std::size_t> offsets = {0, s};
        stile::EncoderWorkspace ws;
        m.layers[0]->run(m.config, x.data(), offsets, ws, pool);
        const std::size_t untiled_grown =
            sizeof(float) * (ws.qkv.size() + ws.ctx.size() + ws.ffn.size() +
                             pool.num_threads() * stile::attention_workspace_floats(s, m.config.head_dim()));
        if (untiled_grown != untiled) {
          fmt::print(stderr, "bench_tiled: untiled workspace {} B != untiled_layer_peak_bytes {} B\n", untiled_grown,
                     untiled);
          return 1;
        }
        stile::Arena arena;
        m.layers[0]->run(m.config, x.data(), offsets, tiles, arena, pool);
        const std::size_t analytic = stile::tiled_layer_peak_bytes(shape, tiles);
        fmt::print("{:>6} {:>12.1f} {:>14.1f} {:>12.1f} {:>7.2f}x {:>5}x{:<4}\n", s, untiled / 1024.0,
                   arena.peak_bytes() / 1024.0, analytic / 1024.0, double(untiled) / double(arena.peak_bytes()),
                   tiles.query, tiles.tokens);
        mem.push_back({{"s", s},
                       {"untiled_bytes", untiled},
                       {"tiled_bytes", arena.peak_bytes()},
                       {"analytic_bytes", analytic},
                       {"tiles", {tiles.query, tiles.tokens}}});
      }
    }
    if (parts.find('b') != std::string::npos) {
      fmt::print(
          "(b) latency of the whole encoder, tiled (chooser's tiles for the budget) vs untiled\n"
          "{:>6} {:>12} {:>12} {:>12} {:>8} {:>10}\n",
          "s", "budget KiB", "untiled ms", "tiled ms", "ratio", "tiles");
      const std::size_t tight_128 = stile::untiled_layer_peak_bytes(memory_shape(128)) / 3;
      for (const auto& [s, b] : {std::pair{std::size_t{128}, budget}, {512, budget}, {128, tight_128}}) {
        const stile::LayerTiles tiles = stile::choose_layer_tiles(b, memory_shape(s));
        const std::size_t n = m.config.num_layers, all = m.config.num_heads;
        // Alternate the two, best of five rounds each, so a slow spell of the machine hits both.
        double untiled = 1e30, tiled = 1e30;
        for (int round = 0; round < 5; ++round) {
          untiled = std::min(untiled, run.seconds(s, n, all, nullptr));
          tiled = std::min(tiled, run.seconds(s, n, all, &tiles));
        }
        fmt::print("{:>6} {:>12.1f} {:>12.2f} {:>12.2f} {:>7.3f}x {:>5}x{:<4}\n", s, b / 1024.0, untiled * 1e3,
                   tiled * 1e3, tiled / untiled, tiles.query, tiles.tokens);
        lat.push_back({{"s", s},
                       {"budget_bytes", b},
                       {"untiled_ms", untiled * 1e3},
                       {"tiled_ms", tiled * 1e3},
                       {"tiles", {tiles.query, tiles.tokens}}});
      }
    }
    out[m.name] = {{"memory", mem}, {"latency", lat}};
    if (parts.find('d') != std::string::npos) {
      const std::size_t s = 512;
      const stile::LayerMemoryShape shape = memory_shape(s);
      const std::size_t floor = stile::tiled_layer_peak_bytes(shape, {1, 1});  // tiles of one token
      const stile::LayerTiles tiles = stile::choose_layer_tiles(floor, shape);
      std::vector<float> x = inputs(s, d);
      const std::vector<std::size_t> offsets = {0, s};
      stile::Arena arena;
      for (const auto& layer : m.layers) layer->run(m.config, x.data(), offsets, tiles, arena, pool);
      // The GEMM driver's packed block per thread, as tiles.hpp sets it for AVX-512 (the bench
      // machine's target; AVX2 and NEON: KC 256, NR 16: twice the block).
      constexpr std::size_t kc = 128, nc = 1024, nr = 32;
      const std::size_t x_bytes = s * d * sizeof(float), panels = pool.num_threads() * kc * nc * sizeof(float),
                        touched = pool.num_threads() * kc * nr * sizeof(float), row = d * sizeof(float);
      const std::size_t whole = x_bytes + arena.peak_bytes() + panels + row;
      double untiled = 1e30, tiled = 1e30;
      const std::size_t n = m.config.num_layers, all = m.config.num_heads;
      for (int round = 0; round < 5; ++round) {
        untiled = std::min(untiled, run.seconds(s, n, all, nullptr));
        tiled = std::min(tiled, run.seconds(s, n, all, &tiles));
      }
      fmt::print(
          "(d) s = {}: smallest budget the chooser meets {:.1f} KiB (tiles {}x{}); working memory (KiB): x {:.1f} + "
          "arena peak {:.1f} + decode panels {:.1f} ({:.1f} touched) + row rebuild {:.1f} = {:.1f} ({:.1f} "
          "without the panels' untouched part); untiled layer peak {:.1f}\n"
          "    latency of the encoder: untiled {:.2f} ms, tiled {:.2f} ms ({:.3f}x)\n",
          s, floor / 1024.0, tiles.query, tiles.tokens, x_bytes / 1024.0, arena.peak_bytes() / 1024.0,
          panels / 1024.0, touched / 1024.0, row / 1024.0, whole / 1024.0,
          (whole - panels + touched) / 1024.0, stile::untiled_layer_peak_bytes(shape) / 1024.0, untiled * 1e3,
          tiled * 1e3, tiled / untiled);
      out[m.name]["headline_s512"] = {{"floor_budget_bytes", floor},
                                      {"tiles", {tiles.query, tiles.tokens}},
                                      {"x_bytes", x_bytes},
                                      {"arena_peak_bytes", arena.peak_bytes()},
                                      {"panel_bytes", panels},
                                      {"panel_touched_bytes", touched},
                                      {"row_rebuild_bytes", row},
                                      {"whole_bytes", whole},
                                      {"untiled_layer_peak_bytes", stile::untiled_layer_peak_bytes(shape)},
                                      {"untiled_ms", untiled * 1e3},
                                      {"tiled_ms", tiled * 1e3}};
    }
    // BERT-tiny under 256 KiB; MiniLM at the chooser's floor (query tiles of one token: one
    // timed run, it is slow) and at the floor + 32 KiB. Not BERT-base (not asked; its floor run
    // would take minutes).
    const bool tiny = d == 128;
    if (parts.find('e') != std::string::npos && d != 768) {
      const std::size_t s = 512, heads = m.config.num_heads, hd = d / heads;
      const stile::FrugalShape shape{s, s, d, heads, hd, ff, pool.num_threads(), false};
      const std::size_t floor = stile::frugal_working_bytes(shape, {1, 1});
      // BERT-tiny: the embeddings rebuilt from a low-rank table inside the budget; the other models:
      // Gaussian rows (their own tables are covered by the rest of the measurements).
      const TinyLowRankEmbeddings emb(d, s);
      std::vector<float> x0 = inputs(s, d);
      if (tiny) {
        std::vector<std::byte> block(TinyLowRankEmbeddings::kReadBlock);
        std::vector<float> u(TinyLowRankEmbeddings::kRank);
        for (std::size_t t = 0; t < s; ++t) emb.rebuild(t, std::span(&x0[t * d], d), block, u);
      }
      const std::vector<std::size_t> offsets = {0, s};
      std::vector<stile::LayerView<stile::StackedDict>> views;
      for (const auto& layer : m.layers) views.push_back(layer->view());
      std::vector<float> want = x0;
      stile::EncoderWorkspace ws;
      for (const auto& layer : m.layers) layer->run(m.config, want.data(), offsets, ws, pool);
      const stile::LayerMemoryShape lshape = memory_shape(s);
      const stile::LayerTiles ttiles = stile::choose_layer_tiles(stile::tiled_layer_peak_bytes(lshape, {1, 1}), lshape);
      const std::size_t n = m.config.num_layers;
      nlohmann::json rows = nlohmann::json::array();
      using Case = std::pair<std::size_t, int>;  // budget (KiB = 1024 bytes), timed rounds
      const std::vector<Case> cases =
          tiny ? std::vector<Case>{{std::size_t{256} * 1024, 5}} : std::vector<Case>{{floor, 1}, {floor + 32 * 1024, 5}};
      for (const auto& [frugal_budget, rounds] : cases) {
        // The chooser gets what the budget leaves after the embedding rebuild's scratch.
        const std::size_t embed_scratch = tiny ? TinyLowRankEmbeddings::scratch_bytes() : 0;
        const stile::FrugalTiles tiles = stile::choose_frugal_tiles(frugal_budget - embed_scratch, shape);
        std::vector<float> got(s * d);
        stile::Arena arena(embed_scratch + stile::frugal_encoder_peak_bytes(shape, tiles));
        auto frugal = [&] {
          stile::ArenaScope scope(arena);
          std::span<std::byte> block;
          std::span<float> u;
          if (tiny) {
            block = scope.take<std::byte>(TinyLowRankEmbeddings::kReadBlock);
            u = scope.take<float>(TinyLowRankEmbeddings::kRank);
          }
          stile::frugal_encoder<stile::StackedDict>(
              views, m.config, offsets, tiles,
              [&](std::size_t t, std::span<float> row) {
                if (tiny) {
                  emb.rebuild(t, row, block, u);
                } else {
                  std::copy_n(&x0[t * d], d, row.data());
                }
              },
              [&](std::size_t t, std::span<const float> row) { std::copy(row.begin(), row.end(), &got[t * d]); },
              arena, pool);
        };
        frugal();
        const std::size_t peak = arena.peak_bytes(),
                          analytic = embed_scratch + stile::frugal_encoder_peak_bytes(shape, tiles);
        if (peak != analytic) {
          fmt::print(stderr, "bench_tiled: frugal arena peak {} B != frugal_encoder_peak_bytes {} B\n", peak, analytic);
          return 1;
        }
        double mean_cos = 0.0, worst_cos = 1.0;
        for (std::size_t t = 0; t < s; ++t) {
          const double cs = stile::cosine_similarity(std::span<const float>(&want[t * d], d),
                                                     std::span<const float>(&got[t * d], d));
          mean_cos += cs / double(s);
          worst_cos = std::min(worst_cos, cs);
        }
        double untiled = 1e30, tiled = 1e30, fru = 1e30;
        for (int round = 0; round < rounds; ++round) {
          untiled = std::min(untiled, run.seconds(s, n, heads, nullptr));
          tiled = std::min(tiled, run.seconds(s, n, heads, &ttiles));
          if (rounds == 1) {
            const auto t0 = std::chrono::steady_clock::now();
            frugal();
            fru = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          } else {
            fru = std::min(fru, stile::bench::median_seconds(frugal, 3, 0.05));
          }
        }
        const std::size_t blocks = stile::frugal_gemm_block_bytes(shape), whole = peak + blocks;
        const std::size_t kv_bytes = s * 2 * d + stile::Arena::round_up(s * 2 * sizeof(float));
        fmt::print(
            "(e) s = {}, frugal encoder, budget {:.1f} KiB ({}), tiles {}x{} (query x keys), {} threads\n"
            "    whole working memory {:.1f} KiB = arena peak {:.1f} (analytic {:.1f}; x int8 {:.1f}, K/V int8 {:.1f}) "
            "+ GEMM blocks {:.1f}\n    cosine to the fp32 untiled encoder: mean {:.5f}, worst row {:.5f}\n"
            "    latency ({}): untiled {:.2f} ms, tiled {:.2f} ms (tiles {}x{}), frugal {:.2f} ms ({:.2f}x untiled, "
            "{:.2f}x tiled)\n",
            s, frugal_budget / 1024.0,
            tiny ? "target 256 KiB" : (frugal_budget == floor ? "the floor: the smallest the chooser meets" : "floor + 32 KiB"),
            tiles.query, tiles.keys, pool.num_threads(), whole / 1024.0, peak / 1024.0, analytic / 1024.0,
            stile::frugal_activation_bytes(shape) / 1024.0, kv_bytes / 1024.0, blocks / 1024.0, mean_cos, worst_cos,
            rounds == 1 ? "one run each" : "best of 5 alternating rounds", untiled * 1e3, tiled * 1e3, ttiles.query,
            ttiles.tokens, fru * 1e3, fru / untiled, fru / tiled);
        if (tiny) {
          fmt::print("    the inputs: embeddings rebuilt inside the arena from a low-rank table made on the spot (512 "
                     "tokens full, the rest rank {} int8 U rows; {:.1f} KiB of it: the {} B read block and the decoded u)\n",
                     TinyLowRankEmbeddings::kRank, embed_scratch / 1024.0, TinyLowRankEmbeddings::kReadBlock);
        }
        std::fflush(stdout);
        rows.push_back({{"budget_bytes", frugal_budget},
                        {"embedding_rebuild_bytes", embed_scratch},
                        {"floor_bytes", floor},
                        {"tiles", {tiles.query, tiles.keys}},
                        {"arena_peak_bytes", peak},
                        {"gemm_block_bytes", blocks},
                        {"whole_bytes", whole},
                        {"cosine_mean", mean_cos},
                        {"cosine_worst", worst_cos},
                        {"untiled_ms", untiled * 1e3},
                        {"tiled_ms", tiled * 1e3},
                        {"frugal_ms", fru * 1e3}});
      }
      out[m.name]["frugal_s512"] = rows;
    }
    if (&m != models.front().get() || !wanted("minilm") || parts.find('c') == std::string::npos) continue;
    // (c) The n x m grid (MiniLM only: it is the model the planner runs here).
    const std::size_t s = 128;
    fmt::print(
        "(c) latency (ms) of n x m submodels at s = {}, untiled, first m shards of each of the first n layers\n{:>4}",
        s, "n\\m");
    for (std::size_t mm = 1; mm <= m.config.num_heads; ++mm) fmt::print(" {:>6}", mm);
    fmt::print("\n");
    nlohmann::json grid = nlohmann::json::array();
    for (std::size_t n = 1; n <= m.config.num_layers; ++n) {
      fmt::print("{:>4}", n);
      std::vector<double> row;
      for (std::size_t mm = 1; mm <= m.config.num_heads; ++mm) {
        const double ms = run.seconds(s, n, mm, nullptr) * 1e3;
        row.push_back(ms);
        fmt::print(" {:>6.2f}", ms);
        std::fflush(stdout);
      }
      fmt::print("\n");
      grid.push_back(row);
    }
    out[m.name]["grid_s128_ms"] = grid;
  }
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr || std::fputs(out.dump(1).c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_tiled: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}
