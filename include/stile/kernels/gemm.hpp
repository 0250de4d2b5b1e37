#pragma once
// The GEMM of stile: C[M x N] = epilogue(A[M x K] * W^T), W an N x K weight matrix in any codec
// (codec.hpp), the epilogue fused into the micro-kernel (epilogue.hpp), the register and cache
// blocking a compile-time TileShape per Highway target (tiles.hpp), multithreaded on a
// ThreadPool. The best target the CPU supports is picked at run time.
//
// This header is light: it declares the per-target drivers (detail::run_gemm, detail::panel_width)
// and validates the call; their definitions (every Highway target of every micro-kernel) live in
// kernels/gemm_impl.hpp. The configurations the library itself uses (DefaultTiles x every codec x
// every epilogue, kernels/gemm_instances.hpp) are compiled once, in the stile::compiled library
// (kernels/instantiate_kernels.hpp); a host that calls gemm with its own tile shape includes
// <stile/kernels/gemm_impl.hpp> in the translation unit that does (undefined detail::run_gemm<...>
// at link time means it did not).
//
//   stile::gemm(M, A, lda, stile::DenseF32(W, N, K), C, ldc);                      // C = A W^T
//   stile::gemm(M, A, lda, w, C, ldc, stile::epilogue::BiasGelu{.bias = b});        // FFN1
//   stile::gemm(M, A, lda, w, X, ldx, stile::epilogue::BiasResidual{b, X, ldx});    // in place
//   stile::gemm<stile::TileShape<4, 8, 128, 64, 512>>(...);                         // own tiles
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "stile/core/aligned_buffer.hpp"

#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm_args.hpp"
#include "stile/kernels/tiles.hpp"

namespace stile {

template <class TilesT, class WeightsT, class EpiT>
struct GemmConfig {
  using Tiles = TilePolicy<TilesT>;
  using Weights = WeightsT;
  using Epi = EpiT;
};

namespace detail {

// Defined in kernels/gemm_impl.hpp: runs the GEMM on the best target of the CPU.
template <class Cfg>
void run_gemm(const GemmArgs<typename Cfg::Weights, typename Cfg::Epi>& args);
// Defined in kernels/gemm_impl.hpp: NR of Tiles on the target the GEMM runs on now.
template <class Tiles>
std::size_t panel_width();

inline bool ranges_overlap(const float* a, std::size_t a_len, const float* b, std::size_t b_len) {
  return a < b + b_len && b < a + a_len;
}

// The checks every GEMM entry point makes (`who` names it in the messages): strides, null
// pointers, the epilogue's pointers, and the overlap rules (the residual may be C itself with C's
// stride and no activation; no other overlap with C). @pre M > 0 and N > 0.
template <class Epi>
void check_gemm_call(const char* who, std::size_t M, const float* A, std::size_t lda, std::size_t K, std::size_t N,
                     const float* C, std::size_t ldc, const Epi& epi) {
  // Messages are built only on failure: the attention heads call small GEMMs by the hundred.
  const auto check = [who](bool ok, auto&& message) {
    if (!ok) throw Error(std::string(who) + ": " + message());
  };
  check(K > 0, [] { return std::string("K (W.cols()) must be positive"); });
  check(A != nullptr && C != nullptr, [] { return std::string("A and C must not be null"); });
  check(lda >= K, [&] { return "lda (" + std::to_string(lda) + ") < K (" + std::to_string(K) + ")"; });
  check(ldc >= N, [&] { return "ldc (" + std::to_string(ldc) + ") < N (" + std::to_string(N) + ")"; });
  const std::size_t c_len = (M - 1) * ldc + N;
  check(!ranges_overlap(A, (M - 1) * lda + K, C, c_len), [] { return std::string("A overlaps C"); });
  if constexpr (Epi::has_bias) check(epi.bias != nullptr, [] { return std::string("the epilogue needs a bias"); });
  if constexpr (Epi::has_residual) {
    check(epi.residual != nullptr, [] { return std::string("the epilogue needs a residual"); });
    check(epi.residual_ld >= N, [] { return std::string("residual_ld < N"); });
    if (epi.residual == C) {
      check(epi.residual_ld == ldc, [] { return std::string("an in-place residual must have C's row stride"); });
      check(Epi::activation == Activation::kNone,
            [] { return std::string("an in-place residual cannot follow an activation"); });
    } else {
      check(!ranges_overlap(epi.residual, (M - 1) * epi.residual_ld + N, C, c_len),
            [] { return std::string("the residual overlaps C without being C"); });
    }
  }
}

}  // namespace detail

// NR of the tile shape the GEMM uses on the target it runs on now: the panel width that
// PackedF32 weights must be packed with.
template <class Tiles = DefaultTiles>
std::size_t gemm_panel_width() {
  return detail::panel_width<TilePolicy<Tiles>>();
}

// Owns fp32 weights packed for the GEMM (see PackedF32).
struct PackedWeights {
  AlignedBuffer<float> storage;
  PackedF32 view;
  std::size_t bytes() const noexcept { return storage.size() * sizeof(float); }
};

// The panel layout of PackedF32 (and PackedF16) for panel width nr, in `storage` (resized to
// whole panels, padding zeroed): storage[(n / nr) * K * nr + k * nr + n % nr] = convert(W[n][k], n, k).
template <class T, class Convert>
void pack_panels(const DenseF32& w, std::size_t nr, AlignedBuffer<T>& storage, const Convert& convert) {
  const std::size_t panels = (w.rows() + nr - 1) / nr, K = w.cols();
  storage.resize(panels * K * nr);
  storage.zero();
  for (std::size_t n = 0; n < w.rows(); ++n) {
    const float* row = w.data + n * w.ld;
    T* panel = storage.data() + (n / nr) * K * nr + n % nr;
    for (std::size_t k = 0; k < K; ++k) panel[k * nr] = convert(row[k], n, k);
  }
}

// Packs W [rows x cols] (row stride ld) once, for the panel width of the current target.
template <class Tiles = DefaultTiles>
PackedWeights pack_weights(const DenseF32& w) {
  const std::size_t nr = gemm_panel_width<Tiles>(), K = w.cols();
  PackedWeights out;
  pack_panels(w, nr, out.storage, [](float x, std::size_t, std::size_t) { return x; });
  out.view = PackedF32{out.storage.data(), w.rows(), K, nr};
  return out;
}

// C = epilogue(A * W^T). A: M x K (row stride lda >= K); W: N x K (W.rows() = N, W.cols() = K);
// C: M x N (row stride ldc >= N). The residual of the epilogue may be C itself (same stride),
// for an in-place residual add, but not with an activation. Other overlaps between C and the
// inputs are errors. Threads: `pool` (the default pool if null).
template <class Tiles = DefaultTiles, WeightMatrix Weights, class Epi = epilogue::None>
void gemm(std::size_t M, const float* A, std::size_t lda, const Weights& W, float* C, std::size_t ldc,
          const Epi& epi = {}, ThreadPool* pool = nullptr) {
  static_assert(is_epilogue_v<Epi>, "the epilogue must be a stile::Epilogue<...>");
  static_assert(Epi::activation != Activation::kGeluErfApprox,
                "gemm: the erf-approximated GELU is fused into gemm_int8 only (ops/linear.hpp applies it after a "
                "Bias GEMM for the other formats)");
  const std::size_t N = W.rows(), K = W.cols();
  if (M == 0 || N == 0) return;
  detail::check_gemm_call("gemm", M, A, lda, K, N, C, ldc, epi);
  if constexpr (requires { validate_weights(W); }) validate_weights(W);  // codecs that check their fields
  if constexpr (std::is_same_v<Weights, PackedF32> || std::is_same_v<Weights, PackedF16>) {
    require(W.nr == gemm_panel_width<Tiles>(),
            "gemm: weights packed for panel width " + std::to_string(W.nr) + ", but the GEMM runs with " +
                std::to_string(gemm_panel_width<Tiles>()) +
                " on this target (pack them with pack_weights or pack_weights_f16 after choosing the target)");
  }
  GemmArgs<Weights, Epi> args;
  args.M = M;
  args.A = A;
  args.lda = lda;
  args.W = &W;
  args.C = C;
  args.ldc = ldc;
  args.epi = epi;
  args.pool = pool != nullptr ? pool : &default_thread_pool();
  detail::run_gemm<GemmConfig<Tiles, Weights, Epi>>(args);
}

}  // namespace stile

#include "stile/kernels/gemm_instances.hpp"  // the configurations compiled once, in stile::compiled
