#include <cstdio>
#include <vector>

#include <stile/stile.hpp>
#include <stile/kernels/gemm_impl.hpp>  // the per-target GEMM, for a tile shape of your own

int main() {
  const std::size_t M = 16, N = 1536, K = 384;  // MiniLM's first FFN GEMM at 16 tokens
  std::vector<float> A(M * K, 0.5f), W(N * K, 0.01f), b(N, 0.1f), C(M * N);
  // C[M x N] = GELU(A[M x K] W^T + b), W stored [N x K] like a PyTorch Linear weight; register
  // tile 4 x 8, cache blocks KC 128, MC 64, NC 512 (stile::gemm without them: the library's own).
  stile::gemm<stile::TileShape<4, 8, 128, 64, 512>>(M, A.data(), K, stile::DenseF32(W.data(), N, K), C.data(), N,
                                                    stile::epilogue::BiasGelu{.bias = b.data()});
  std::printf("C[0][0] = %.4f\n", C[0]);  // GELU(384 * 0.5 * 0.01 + 0.1) = GELU(2.02)
}
