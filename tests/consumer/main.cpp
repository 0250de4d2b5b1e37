// Instantiates a GEMM with the host's own tile shape in the host's own translation unit and
// checks it against a naive loop, and reads its own executable through the default read backend
// (io_uring when the installed package found liburing: this links it), and opens the first OpenCL
// device when the package found OpenCL (the optional backends' targets link). Exit code 0 on success.
#include <stile/stile.hpp>
#include <stile/dist/mpi_communicator.hpp>
#include <stile/hetero/opencl_device.hpp>
#include <stile/plan/lp_partition.hpp>
// The host's own tile shape is instantiated here, in the host's translation unit: the GEMM's
// per-target drivers come with gemm_impl.hpp (the library's own configurations are compiled once
// in stile::kernels, which find_package(stile) builds).
#include <stile/kernels/gemm_impl.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  using HostTiles = stile::TileShape<4, 8, 64, 32, 128>;
  const std::size_t M = 13, N = 45, K = 150;
  std::vector<float> A(M * K), W(N * K), bias(N), C(M * N);
  for (std::size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.37f * float(i));
  for (std::size_t i = 0; i < W.size(); ++i) W[i] = std::cos(0.11f * float(i));
  for (std::size_t i = 0; i < N; ++i) bias[i] = 0.01f * float(i);
  stile::ThreadPool pool(2);
  stile::gemm<HostTiles>(M, A.data(), K, stile::DenseF32(W.data(), N, K), C.data(), N,
                         stile::epilogue::Bias{.bias = bias.data()}, &pool);
  double worst = 0;
  for (std::size_t m = 0; m < M; ++m) {
    for (std::size_t n = 0; n < N; ++n) {
      double ref = bias[n];
      for (std::size_t k = 0; k < K; ++k) ref += double(A[m * K + k]) * W[n * K + k];
      worst = std::fmax(worst, std::fabs(ref - C[m * N + n]) / (1.0 + std::fabs(ref)));
    }
  }
  std::printf("consumer: %zux%zux%zu GEMM on %s, worst relative error %.3g\n", M, N, K, stile::active_target_name(),
              worst);
  if (argc < 1) return 1;
  std::string note;
  auto reader = stile::open_read_backend(argv[0], {}, &note);
  stile::AlignedBuffer<std::byte, 4096> block(4096);
  const stile::ReadRequest request{0, block.span()};
  std::size_t got = 0;
  reader->read({&request, 1}, {&got, 1});
  const bool elf = got == 4096 && block[1] == std::byte{'E'} && block[2] == std::byte{'L'};
  std::printf("consumer: read its first %zu bytes with %s%s%s\n", got, reader->describe().c_str(),
              note.empty() ? "" : "; ", note.c_str());
  std::printf("consumer: MPI %s, CLP %s, OpenCL %s\n", stile::mpi_available() ? "found" : "absent",
              stile::lp_partition_available() ? "found" : "absent", stile::opencl_available() ? "found" : "absent");
  bool device_ok = true;
  if (stile::opencl_available()) {
    try {
      auto device = stile::OpenClDevice::open(0, stile::LinearFormat::kF32, "opencl:0");
      std::printf("consumer: opened %s\n", device->name().c_str());
    } catch (const stile::Error& e) {
      device_ok = false;
      std::printf("consumer: %s\n", e.what());
    }
  }
  return worst <= 1e-5 && elf && device_ok ? 0 : 1;
}
