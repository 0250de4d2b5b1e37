#pragma once
// The memory-frugal encoder layer (MCUBERT-style tiling): working memory linear in the sequence
// length, not quadratic, and independent of d_ff except through one tile.
//
//   attention: K and V of every token (one GEMM, [tokens x 2 d']); then, per sequence, per query
//              tile of t_q tokens: Q of the tile ([t_q x d']), for each head the fused attention
//              kernel (kernels/attention.hpp: scores, softmax and P V per block of queries; rows
//              complete, all s keys are there, so no running rescale); then the output
//              projection of the tile, bias and residual fused, written in place over the
//              tile's rows of x, and LayerNorm of those rows.
//              In place is safe: every later tile reads only K and V, which are already made,
//              so tiles may also run in parallel, a whole tile per thread (tiles_in_parallel).
//              The loop is tile-outer, head-inner so that the tile's Q and output projections are
//              one GEMM each over all its heads; each thread's attention kernel has a workspace
//              of its own (a block of scores and a panel of K and of V).
//   MLP:       per token tile of t_m tokens: FFN1 + GELU into [t_m x d_ff'], FFN2 + bias +
//              residual in place over the tile's rows, LayerNorm of those rows.
// Head split and merge are strides of the GEMMs (K_h, V_h, Q_h are column slices read in place,
// ctx_h is written over Q_h in the tile's Q/ctx buffer), never copies.
//
// Everything the layer allocates comes from an Arena, in the order tiled_layer_peak_bytes()
// counts, so the analytic peak is exact and the tests check it against the arena's own count.
// The untiled layer (ops/encoder_layer.hpp) holds [s x 3d], [s x d] and [s x d_ff] at once.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "stile/core/arena.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/ops/attention.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/layer_view.hpp"
#include "stile/ops/linear.hpp"

namespace stile {

// How the attention phase shares its query tiles among the threads. When the longest sequence has
// at least one tile per thread, each thread runs whole tiles on its own (Q projection, every head,
// output projection, LayerNorm): one dispatch for the phase, and a Q/ctx tile per thread. Else
// the tiles run one after another with the heads of a tile in parallel: fewer buffers, but three
// dispatches per tile (Q GEMM, heads, output GEMM), each a barrier.
inline bool tiles_in_parallel(std::size_t longest, std::size_t query_tile, std::size_t threads) {
  return threads > 1 && (longest + query_tile - 1) / query_tile >= threads;
}

// Peak bytes the tiled layer takes from its arena: the attention phase (K and V of all tokens; a
// Q/ctx tile per thread or one in all, as tiles_in_parallel says; an attention workspace per
// thread) or the MLP phase (one FFN1 tile), whichever is larger. Tiles longer than the longest
// sequence (or than all tokens) are clamped as the layer clamps them.
inline std::size_t tiled_layer_peak_bytes(const LayerMemoryShape& m, const LayerTiles& t) {
  auto f32 = [](std::size_t count) { return Arena::round_up(count * sizeof(float)); };
  const std::size_t tq = std::min(t.query, m.longest), tm = std::min(t.tokens, m.tokens);
  const std::size_t qc_tiles = tiles_in_parallel(m.longest, tq, m.threads) ? m.threads : 1;
  const std::size_t attention = f32(m.tokens * 2 * m.attn_width) + f32(qc_tiles * tq * m.attn_width) +
                                m.threads * f32(attention_workspace_floats(m.longest, m.head_dim, true));
  const std::size_t mlp = f32(tm * m.ffn_width);
  return std::max(attention, mlp);
}

// Runs the layer over x [tokens x d] (packed sequences, offsets seq_offsets) in place.
template <class W>
void tiled_encoder_layer(const LayerView<W>& w, const EncoderConfig& c, float* x,
                         std::span<const std::size_t> seq_offsets, const LayerTiles& tiles, Arena& arena,
                         ThreadPool& pool) {
  require(tiles.query > 0 && tiles.tokens > 0, "tiled layer: tile sizes must be positive");
  require(
      w.positions.empty() && !w.pre_norm && !w.gated_ffn,
      "tiled layer: runs BERT's layer only (no position term, pre-LayerNorm or gated FFN: encoder_layer runs those)");
  const std::size_t tokens = seq_offsets.back();
  if (tokens == 0) return;
  const std::size_t d = c.hidden, da = w.attn_width(), ff = w.ffn_width(), hd = w.head_dim;
  std::size_t longest = 0;
  for (std::size_t i = 0; i + 1 < seq_offsets.size(); ++i)
    longest = std::max(longest, seq_offsets[i + 1] - seq_offsets[i]);
  const std::size_t tq = std::min(tiles.query, longest), tm = std::min(tiles.tokens, tokens);
  const std::size_t threads = pool.num_threads();
  arena.reserve(arena.used_bytes() + tiled_layer_peak_bytes({tokens, longest, da, ff, threads, hd}, tiles));

  {  // Attention.
    const bool parallel_tiles = tiles_in_parallel(longest, tq, threads);
    ArenaScope scope(arena);
    const std::span<float> kv = scope.take<float>(tokens * 2 * da);
    const std::span<float> qc_tiles = scope.take<float>((parallel_tiles ? threads : 1) * tq * da);
    // Each worker's attention workspace (the kernel's low-memory mode: no packed copy of a head's
    // K and V), 64-byte aligned as the kernel wants it.
    const std::size_t workspace_stride =
        Arena::round_up(attention_workspace_floats(longest, hd, true) * sizeof(float)) / sizeof(float);
    const std::span<float> workspaces = scope.take<float>(threads * workspace_stride);
    linear(tokens, x, d, w.kv, kv.data(), 2 * da, epilogue::Bias{.bias = w.kv_bias}, &pool);
    ThreadPool& serial = single_thread_pool();

    // Head h of the query tile of `rows` tokens from r0 of a sequence of s tokens starting at
    // `begin`, in this worker's workspace. ctx_h overwrites Q_h in the tile's Q/ctx buffer (the
    // kernel reads a tile's queries before it writes their context; heads own disjoint columns).
    auto head = [&](std::size_t h, std::size_t worker, std::size_t begin, std::size_t s, std::size_t r0,
                    std::size_t rows, float* qc) {
      const float* k = kv.data() + begin * 2 * da + h * hd;
      attention_head(qc + h * hd, da, k, k + da, 2 * da, rows, s, hd, w.attn_scale, qc + h * hd, da, w.ops.softmax, {},
                     h, r0, workspaces.data() + worker * workspace_stride);
    };
    // The whole tile: Q projection, every head, output projection with bias and residual in place
    // over the tile's rows of x (later tiles read only K and V), LayerNorm of those rows.
    auto tile = [&](std::size_t begin, std::size_t s, std::size_t r0, std::size_t worker, ThreadPool& inner) {
      const std::size_t rows = std::min(tq, s - r0);
      float* xt = x + (begin + r0) * d;
      float* qc = qc_tiles.data() + (parallel_tiles ? worker : 0) * tq * da;
      linear(rows, xt, d, w.q, qc, da, epilogue::Bias{.bias = w.q_bias}, &inner);
      if (parallel_tiles) {
        for (std::size_t h = 0; h < w.heads; ++h) head(h, worker, begin, s, r0, rows, qc);
      } else {
        inner.run(w.heads, [&](std::size_t h, std::size_t hw) { head(h, hw, begin, s, r0, rows, qc); });
      }
      linear(rows, qc, da, w.attn_out, xt, d, epilogue::BiasResidual{w.attn_out_bias, xt, d}, &inner);
      layer_norm_rows(w.ops.layer_norm, xt, rows, d, d, w.ln1_gamma, w.ln1_beta, c.layer_norm_eps);
    };

    // Query tiles are numbered sequence by sequence; tile i of the batch is found by walking the
    // offsets (no per-call list: the layer allocates nothing outside its arena).
    auto run_tile = [&](std::size_t i, std::size_t worker, ThreadPool& inner) {
      for (std::size_t seq = 0; seq + 1 < seq_offsets.size(); ++seq) {
        const std::size_t begin = seq_offsets[seq], s = seq_offsets[seq + 1] - begin, n = (s + tq - 1) / tq;
        if (i < n) return tile(begin, s, i * tq, worker, inner);
        i -= n;
      }
    };
    std::size_t num_tiles = 0;
    for (std::size_t seq = 0; seq + 1 < seq_offsets.size(); ++seq) {
      num_tiles += (seq_offsets[seq + 1] - seq_offsets[seq] + tq - 1) / tq;
    }
    if (parallel_tiles) {
      pool.run(num_tiles, [&](std::size_t i, std::size_t worker) { run_tile(i, worker, serial); });
    } else {
      for (std::size_t i = 0; i < num_tiles; ++i) run_tile(i, 0, pool);
    }
  }

  {  // MLP.
    ArenaScope scope(arena);
    const std::span<float> hidden = scope.take<float>(tm * ff);
    for (std::size_t r0 = 0; r0 < tokens; r0 += tm) {
      const std::size_t rows = std::min(tm, tokens - r0);
      float* xt = x + r0 * d;
      if (w.ops.gelu == GeluFormat::kExact) {
        linear(rows, xt, d, w.ffn_in, hidden.data(), ff, epilogue::BiasGelu{.bias = w.ffn_in_bias}, &pool);
      } else if (w.ops.gelu == GeluFormat::kErfApprox) {
        linear(rows, xt, d, w.ffn_in, hidden.data(), ff, epilogue::BiasGeluErfApprox{.bias = w.ffn_in_bias}, &pool);
      } else {
        linear(rows, xt, d, w.ffn_in, hidden.data(), ff, epilogue::Bias{.bias = w.ffn_in_bias}, &pool);
        gelu_inplace(w.ops.gelu, hidden.data(), rows * ff);
      }
      linear(rows, hidden.data(), ff, w.ffn_out, xt, d, epilogue::BiasResidual{w.ffn_out_bias, xt, d}, &pool);
      layer_norm_rows(w.ops.layer_norm, xt, rows, d, d, w.ln2_gamma, w.ln2_beta, c.layer_norm_eps, &pool);
    }
  }
}

// Tile sizes the chooser may pick, a compile-time list (ascending).
template <std::size_t... kSizes>
struct TileSizes {
  static constexpr std::size_t kValues[] = {kSizes...};
};
using DefaultTileSizes = TileSizes<1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024>;

// The largest tiles whose peak working memory fits `budget_bytes`: the query tile bounds the
// attention phase, the token tile the MLP phase, so each is the largest that fits on its own.
// Tiles at or above the sequence length are the untiled computation in the tiled layer's memory.
// Throws when not even the smallest tiles fit (K and V of all tokens are the floor).
template <class Sizes = DefaultTileSizes>
LayerTiles choose_layer_tiles(std::size_t budget_bytes, const LayerMemoryShape& m) {
  LayerTiles best;
  for (const std::size_t t : Sizes::kValues) {
    const std::size_t attention = tiled_layer_peak_bytes(m, {t, 1});
    const std::size_t mlp = tiled_layer_peak_bytes(m, {1, t});
    if (attention <= budget_bytes && t > best.query) best.query = t;
    if (mlp <= budget_bytes && t > best.tokens) best.tokens = t;
  }
  if (best.query == 0 || best.tokens == 0) {
    const std::size_t smallest = Sizes::kValues[0];
    throw Error("tile chooser: a working-memory budget of " + std::to_string(budget_bytes) +
                " bytes is below the layer's minimum of " +
                std::to_string(tiled_layer_peak_bytes(m, {smallest, smallest})) + " bytes for " +
                std::to_string(m.tokens) + " tokens");
  }
  return best;
}

}  // namespace stile
