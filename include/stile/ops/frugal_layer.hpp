#pragma once
// The budget-bound encoder (MCUBERT's tiny-memory setting): a whole request held in a working
// memory of a few hundred KiB, every byte of it counted.
//
// What the tiled layer (ops/tiled_layer.hpp) cannot shrink is the format of what lives across
// tiles: x [tokens x d] and K, V of every token, in fp32. Here they are int8 with one fp32 scale
// per row (symmetric, round to nearest), and everything else is a tile:
//
//   x:       int8 [tokens x d] + one scale per token row, between layers and across the layer.
//   layer:   K and V of every token, made at the layer's start from x, t tokens at a time
//            (dequantize t rows of x, one GEMM, requantize: K and V rows each get their own
//            scale); then per query tile of t tokens: dequantize the tile's rows of x (fp32
//            [t x d], kept for the residual), Q projection, and per head an online softmax over
//            key tiles of t_k keys (running max and sum per query row, no [t x s] score tile):
//            the K_h and V_h rows of the key tile dequantized into [t_k x head_dim] each,
//            scores [t x t_k] = Q_h K_h^T, rescale, P V_h into [t x head_dim], accumulated;
//            then the output projection + bias + residual in place over the tile, LayerNorm,
//            FFN1 + GELU into [t x d_ff], FFN2 + bias + residual, LayerNorm, and the tile's rows
//            requantized into x. In place is safe: later tiles read only K and V, made already.
//   GEMM:    FrugalGemmTiles, a KC x NC packed block of 4 KiB (the defaults' is 512 KiB), one
//            per GEMM configuration per thread that runs it (kernels/gemm-inl.h keeps it
//            thread_local): the only bytes outside the arena; frugal_gemm_block_bytes() counts them.
//
// Everything else comes from the caller's Arena in the order frugal_encoder_peak_bytes() counts,
// so the analytic peak is exact (tests/ops/test_frugal_layer.cpp checks it against the arena).
// Not built: the FFN in chunks of neurons (the FFN tile is t x d_ff; the chooser sizes t to the
// budget), and the int8 GEMM on the int8 activations (they are dequantized per tile).
//
// Heavy: this header instantiates the GEMM with its own tile shape (kernels/gemm_impl.hpp), so
// include it only in the translation unit that runs the frugal encoder.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include "stile/core/arena.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/gemm_impl.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/layer_view.hpp"

namespace stile {

// GEMM blocking for a budget of KiBs: one KC x NR micro-panel is the whole packed block (NC = NR),
// 4 KiB on every target, MR x NR within the target's registers (kernels/tiles.hpp's budgets):
// 32 x 32 floats on AVX-512, 64 x 16 on AVX2 and NEON, 128 x 8 on SSE4/SSSE3 and the scalar
// fallback (a 16-wide tile there would spill its accumulators, and costs minutes to compile).
struct FrugalGemmTiles {
  using Avx512 = TileShape<8, 32, 32, 96, 32>;
  using Wide = TileShape<6, 16, 64, 144, 16>;
  using Narrow = TileShape<6, 8, 128, 144, 8>;
  using Scalar = TileShape<4, 8, 128, 128, 8>;
  template <std::int64_t kTarget>
  using For = std::conditional_t<
      (kTarget & (HWY_AVX3 | HWY_AVX3_DL)) != 0, Avx512,
      std::conditional_t<kTarget == HWY_AVX2 || kTarget == HWY_NEON, Wide,
                         std::conditional_t<(kTarget & (HWY_SSE4 | HWY_SSSE3)) != 0, Narrow, Scalar>>>;
};
inline constexpr std::size_t kFrugalGemmBlockBytes = 4096;
template <class S>
inline constexpr bool kFrugalBlockFits = S::KC * S::NC * sizeof(float) == kFrugalGemmBlockBytes;
static_assert(kFrugalBlockFits<FrugalGemmTiles::Avx512> && kFrugalBlockFits<FrugalGemmTiles::Wide> &&
                  kFrugalBlockFits<FrugalGemmTiles::Narrow> && kFrugalBlockFits<FrugalGemmTiles::Scalar>,
              "every target's frugal packed block must be kFrugalGemmBlockBytes");

// Tile sizes: query rows per attention/FFN tile, keys per online-softmax step.
struct FrugalTiles {
  std::size_t query = 0;
  std::size_t keys = 0;
};

// What the request's memory depends on.
struct FrugalShape {
  std::size_t tokens = 0;      // rows of x (all sequences)
  std::size_t longest = 0;     // the longest sequence
  std::size_t hidden = 0;      // d
  std::size_t heads = 0;       // chosen heads
  std::size_t head_dim = 0;    // d' = heads x head_dim
  std::size_t ffn_width = 0;   // d_ff'
  std::size_t threads = 1;     // workers of the pool the GEMMs run on
  bool weights_in_place = false;  // PackedF32 weights: the GEMM reads them in place, packs nothing
};

namespace frugal_detail {
inline std::size_t f32(std::size_t n) { return Arena::round_up(n * sizeof(float)); }
inline std::size_t i8(std::size_t n) { return Arena::round_up(n); }
}  // namespace frugal_detail

// Bytes of x in int8 with its row scales: held from the embeddings to the last layer's output.
inline std::size_t frugal_activation_bytes(const FrugalShape& m) {
  return frugal_detail::i8(m.tokens * m.hidden) + frugal_detail::f32(m.tokens);
}

// Peak bytes one layer takes from the arena on top of x: K/V in int8 with a scale per K and per V
// row, then the larger of the K/V-making phase ([t x d] and [t x 2d'] fp32) and the tile phase
// (the tile's x rows, and the larger of attention's buffers and the FFN's [t x d_ff]).
inline std::size_t frugal_layer_peak_bytes(const FrugalShape& m, const FrugalTiles& t) {
  using frugal_detail::f32;
  using frugal_detail::i8;
  const std::size_t tq = std::min(t.query, m.longest), tk = std::min(t.keys, m.longest);
  const std::size_t da = m.heads * m.head_dim, hd = m.head_dim;
  const std::size_t kv = i8(m.tokens * 2 * da) + f32(m.tokens * 2);
  const std::size_t make_kv = f32(tq * m.hidden) + f32(tq * 2 * da);
  const std::size_t attention =
      f32(tq * da) + 2 * f32(tk * hd) + f32(tq * tk) + 2 * f32(tq * hd) + 2 * f32(tq);
  const std::size_t tile = f32(tq * m.hidden) + std::max(attention, f32(tq * m.ffn_width));
  return kv + std::max(make_kv, tile);
}

// Peak bytes the whole encoder takes from the arena: x, and the larger of one layer and the row
// scratch that embeddings are built in and outputs are read out through (d floats).
inline std::size_t frugal_encoder_peak_bytes(const FrugalShape& m, const FrugalTiles& t) {
  return frugal_activation_bytes(m) + std::max(frugal_layer_peak_bytes(m, t), frugal_detail::f32(m.hidden));
}

// The GEMMs' packed blocks outside the arena (thread_local in the GEMM driver, one per
// configuration a thread has run): Q/K/V (Bias), out/FFN2 (BiasResidual) and FFN1 (BiasGelu) on
// the layer's weights, on every thread of the pool, unless they are read in place (PackedF32);
// attention's scores (DenseF32) and P V (DenseF32Transposed) on the calling thread only (they are
// a few rows each: a pool dispatch would cost more than it shares). An upper bound: a thread that
// never ran a configuration has no block for it.
inline std::size_t frugal_gemm_block_bytes(const FrugalShape& m) {
  return ((m.weights_in_place ? 0 : 3 * m.threads) + 2) * kFrugalGemmBlockBytes;
}

// The request's whole working memory: the arena's peak and the GEMMs' blocks.
inline std::size_t frugal_working_bytes(const FrugalShape& m, const FrugalTiles& t) {
  return frugal_encoder_peak_bytes(m, t) + frugal_gemm_block_bytes(m);
}

// Symmetric int8 of one row: q = round(x / s), s = max|x| / 127 (1 for an all-zero row).
// A non-finite activation is an error: it would make the scale meaningless.
inline void quantize_row_int8(const float* x, std::size_t n, std::int8_t* q, float* scale) {
  float m = 0.0f, nonfinite = 0.0f;  // x * 0 is NaN exactly for NaN and infinities
  for (std::size_t i = 0; i < n; ++i) {
    m = std::max(m, std::fabs(x[i]));
    nonfinite += x[i] * 0.0f;
  }
  require(nonfinite == 0.0f, "frugal layer: a non-finite activation cannot be quantized to int8");
  const float s = m > 0.0f ? m / 127.0f : 1.0f, inv = 1.0f / s;
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
  }
  *scale = s;
}

inline void dequantize_row_int8(const std::int8_t* q, std::size_t n, float scale, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>(q[i]);
}

// x of a request in int8, rows packed as the layer's seq_offsets say.
struct FrugalActivations {
  std::span<std::int8_t> q;  // [tokens x d]
  std::span<float> scale;    // [tokens]
  std::size_t d = 0;
};

// Runs one layer over x in place. W: a GEMM codec (PackedF32, StackedDict, ...), not a
// LinearView (the int8 GEMM has buffers of its own). The arena must have room for
// frugal_layer_peak_bytes() on top of what it holds.
template <class W>
void frugal_encoder_layer(const LayerView<W>& w, const EncoderConfig& c, FrugalActivations& x,
                          std::span<const std::size_t> seq_offsets, const FrugalTiles& tiles, Arena& arena,
                          ThreadPool& pool) {
  static_assert(WeightMatrix<W>, "frugal layer: the weights must be one GEMM codec");
  require(tiles.query > 0 && tiles.keys > 0, "frugal layer: tile sizes must be positive");
  require(w.positions.empty() && !w.pre_norm && !w.gated_ffn,
          "frugal layer: runs BERT's layer only (no position term, pre-LayerNorm or gated FFN: encoder_layer runs those)");
  require(!seq_offsets.empty() && seq_offsets.front() == 0, "frugal layer: seq_offsets must start at 0");
  const std::size_t tokens = seq_offsets.back();
  const std::size_t d = c.hidden, da = w.attn_width(), ff = w.ffn_width(), hd = w.head_dim;
  require(x.d == d && x.q.size() == tokens * d && x.scale.size() == tokens,
          "frugal layer: x is not [tokens x hidden] with a scale per row");
  if (tokens == 0) return;
  std::size_t longest = 0;
  for (std::size_t i = 0; i + 1 < seq_offsets.size(); ++i) {
    require(seq_offsets[i + 1] >= seq_offsets[i], "frugal layer: seq_offsets must not decrease");
    longest = std::max(longest, seq_offsets[i + 1] - seq_offsets[i]);
  }
  const std::size_t tq = std::min(tiles.query, longest), tk = std::min(tiles.keys, longest);
  using Tiles = FrugalGemmTiles;
  ThreadPool& serial = single_thread_pool();  // attention's small GEMMs, on the calling thread

  ArenaScope layer(arena);
  const std::span<std::int8_t> kvq = layer.take<std::int8_t>(tokens * 2 * da);
  const std::span<float> kvs = layer.take<float>(tokens * 2);  // K scale, V scale per token
  {  // K and V of every token, t rows of x at a time.
    ArenaScope scope(arena);
    const std::span<float> xt = scope.take<float>(tq * d);
    const std::span<float> kvt = scope.take<float>(tq * 2 * da);
    for (std::size_t r0 = 0; r0 < tokens; r0 += tq) {
      const std::size_t rows = std::min(tq, tokens - r0);
      for (std::size_t r = 0; r < rows; ++r) dequantize_row_int8(&x.q[(r0 + r) * d], d, x.scale[r0 + r], &xt[r * d]);
      gemm<Tiles>(rows, xt.data(), d, w.kv, kvt.data(), 2 * da, epilogue::Bias{.bias = w.kv_bias}, &pool);
      for (std::size_t r = 0; r < rows; ++r) {
        std::int8_t* out = &kvq[(r0 + r) * 2 * da];
        quantize_row_int8(&kvt[r * 2 * da], da, out, &kvs[(r0 + r) * 2]);
        quantize_row_int8(&kvt[r * 2 * da + da], da, out + da, &kvs[(r0 + r) * 2 + 1]);
      }
    }
  }

  ArenaScope tile_scope(arena);
  const std::span<float> xt = tile_scope.take<float>(tq * d);
  for (std::size_t seq = 0; seq + 1 < seq_offsets.size(); ++seq) {
    const std::size_t begin = seq_offsets[seq], s = seq_offsets[seq + 1] - begin;
    for (std::size_t r0 = 0; r0 < s; r0 += tq) {
      const std::size_t rows = std::min(tq, s - r0), row0 = begin + r0;
      for (std::size_t r = 0; r < rows; ++r) dequantize_row_int8(&x.q[(row0 + r) * d], d, x.scale[row0 + r], &xt[r * d]);
      {  // Attention of the tile.
        ArenaScope scope(arena);
        const std::span<float> q = scope.take<float>(tq * da);
        const std::span<float> kf = scope.take<float>(tk * hd), vf = scope.take<float>(tk * hd);
        const std::span<float> sc = scope.take<float>(tq * tk);
        const std::span<float> pv = scope.take<float>(tq * hd), acc = scope.take<float>(tq * hd);
        const std::span<float> mx = scope.take<float>(tq), sum = scope.take<float>(tq);
        gemm<Tiles>(rows, xt.data(), d, w.q, q.data(), da, epilogue::Bias{.bias = w.q_bias}, &pool);
        for (std::size_t h = 0; h < w.heads; ++h) {
          std::fill_n(mx.data(), rows, -std::numeric_limits<float>::infinity());
          std::fill_n(sum.data(), rows, 0.0f);
          std::fill_n(acc.data(), rows * hd, 0.0f);
          for (std::size_t k0 = 0; k0 < s; k0 += tk) {
            const std::size_t keys = std::min(tk, s - k0);
            for (std::size_t j = 0; j < keys; ++j) {
              const std::size_t t = begin + k0 + j;
              dequantize_row_int8(&kvq[t * 2 * da + h * hd], hd, kvs[t * 2], &kf[j * hd]);
              dequantize_row_int8(&kvq[t * 2 * da + da + h * hd], hd, kvs[t * 2 + 1], &vf[j * hd]);
            }
            gemm<Tiles>(rows, q.data() + h * hd, da, DenseF32(kf.data(), keys, hd), sc.data(), tk, epilogue::None{},
                        &serial);
            // Online softmax: rescale what was summed under the old running max.
            for (std::size_t i = 0; i < rows; ++i) {
              float* p = &sc[i * tk];
              float m_new = mx[i];
              for (std::size_t j = 0; j < keys; ++j) m_new = std::max(m_new, p[j] * w.attn_scale);
              const float alpha = std::exp(mx[i] - m_new);  // exp(-inf) = 0 on the first key tile
              float part = 0.0f;
              for (std::size_t j = 0; j < keys; ++j) {
                p[j] = std::exp(p[j] * w.attn_scale - m_new);
                part += p[j];
              }
              sum[i] = sum[i] * alpha + part;
              mx[i] = m_new;
              for (std::size_t e = 0; e < hd; ++e) acc[i * hd + e] *= alpha;
            }
            gemm<Tiles>(rows, sc.data(), tk, DenseF32Transposed(vf.data(), hd, keys, hd), pv.data(), hd,
                        epilogue::None{}, &serial);
            for (std::size_t i = 0; i < rows * hd; ++i) acc[i] += pv[i];
          }
          // ctx_h over Q_h: the head's queries are consumed.
          for (std::size_t i = 0; i < rows; ++i) {
            const float inv = 1.0f / sum[i];
            for (std::size_t e = 0; e < hd; ++e) q[i * da + h * hd + e] = acc[i * hd + e] * inv;
          }
        }
        gemm<Tiles>(rows, q.data(), da, w.attn_out, xt.data(), d, epilogue::BiasResidual{w.attn_out_bias, xt.data(), d},
                    &pool);
      }
      layer_norm_rows(w.ops.layer_norm, xt.data(), rows, d, d, w.ln1_gamma, w.ln1_beta, c.layer_norm_eps);
      {  // FFN of the tile.
        ArenaScope scope(arena);
        const std::span<float> hidden = scope.take<float>(tq * ff);
        if (w.ops.gelu == GeluFormat::kExact) {
          gemm<Tiles>(rows, xt.data(), d, w.ffn_in, hidden.data(), ff, epilogue::BiasGelu{.bias = w.ffn_in_bias},
                      &pool);
        } else {
          gemm<Tiles>(rows, xt.data(), d, w.ffn_in, hidden.data(), ff, epilogue::Bias{.bias = w.ffn_in_bias}, &pool);
          gelu_inplace(w.ops.gelu, hidden.data(), rows * ff);
        }
        gemm<Tiles>(rows, hidden.data(), ff, w.ffn_out, xt.data(), d,
                    epilogue::BiasResidual{w.ffn_out_bias, xt.data(), d}, &pool);
      }
      layer_norm_rows(w.ops.layer_norm, xt.data(), rows, d, d, w.ln2_gamma, w.ln2_beta, c.layer_norm_eps);
      for (std::size_t r = 0; r < rows; ++r) quantize_row_int8(&xt[r * d], d, &x.q[(row0 + r) * d], &x.scale[row0 + r]);
    }
  }
}

// The whole encoder under one arena: embed_row(token, std::span<float> row) writes token's input
// row (the embeddings, however rebuilt) into a d-float scratch, which is quantized into x; the
// layers run; emit_row(token, std::span<const float> row) receives each output row dequantized.
// The arena is reserved to exactly frugal_encoder_peak_bytes() on top of what it holds.
template <class W, class EmbedRow, class EmitRow>
void frugal_encoder(std::span<const LayerView<W>> layers, const EncoderConfig& c, std::span<const std::size_t> seq_offsets,
                    const FrugalTiles& tiles, EmbedRow&& embed_row, EmitRow&& emit_row, Arena& arena,
                    ThreadPool& pool) {
  require(!seq_offsets.empty() && seq_offsets.front() == 0, "frugal encoder: seq_offsets must start at 0");
  require(!layers.empty(), "frugal encoder: no layers");
  const std::size_t tokens = seq_offsets.back(), d = c.hidden;
  std::size_t longest = 0;
  for (std::size_t i = 0; i + 1 < seq_offsets.size(); ++i) {
    longest = std::max(longest, seq_offsets[i + 1] - seq_offsets[i]);
  }
  FrugalShape shape{tokens, longest, d, layers[0].heads, layers[0].head_dim, layers[0].ffn_width(),
                    pool.num_threads(), std::is_same_v<W, PackedF32>};
  for (const auto& l : layers) {
    require(l.heads == shape.heads && l.head_dim == shape.head_dim && l.ffn_width() == shape.ffn_width,
            "frugal encoder: every layer must have the first layer's heads and FFN width (the arena is sized once)");
  }
  arena.reserve(arena.used_bytes() + frugal_encoder_peak_bytes(shape, tiles));
  ArenaScope scope(arena);
  FrugalActivations x{scope.take<std::int8_t>(tokens * d), scope.take<float>(tokens), d};
  {
    ArenaScope rows(arena);
    const std::span<float> row = rows.take<float>(d);
    for (std::size_t t = 0; t < tokens; ++t) {
      embed_row(t, row);
      quantize_row_int8(row.data(), d, &x.q[t * d], &x.scale[t]);
    }
  }
  for (const auto& l : layers) frugal_encoder_layer(l, c, x, seq_offsets, tiles, arena, pool);
  ArenaScope rows(arena);
  const std::span<float> row = rows.take<float>(d);
  for (std::size_t t = 0; t < tokens; ++t) {
    dequantize_row_int8(&x.q[t * d], d, x.scale[t], row.data());
    emit_row(t, std::span<const float>(row));
  }
}

// Tile sizes the chooser tries, ascending.
inline constexpr std::size_t kFrugalTileSizes[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};

// The largest query tile, then the largest key tile, whose whole working memory
// (frugal_working_bytes: arena and GEMM blocks) fits `budget_bytes`. Throws, naming the
// smallest whole working memory, when even tiles of one token do not fit (the floor: x, K and V
// in int8).
inline FrugalTiles choose_frugal_tiles(std::size_t budget_bytes, const FrugalShape& m) {
  FrugalTiles best;
  for (const std::size_t tq : kFrugalTileSizes) {
    for (const std::size_t tk : kFrugalTileSizes) {
      if (frugal_working_bytes(m, {tq, tk}) > budget_bytes) continue;
      if (tq > best.query || (tq == best.query && tk > best.keys)) best = {tq, tk};
    }
  }
  if (best.query == 0) {
    throw Error("frugal tile chooser: a working-memory budget of " + std::to_string(budget_bytes) +
                " bytes is below the minimum of " + std::to_string(frugal_working_bytes(m, {1, 1})) + " bytes for " +
                std::to_string(m.tokens) + " tokens");
  }
  return best;
}

}  // namespace stile
