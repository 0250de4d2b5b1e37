// xsimd_cpu_gate ARCH PROGRAM [ARGS...]: runs PROGRAM if this CPU supports the xsimd
// architecture named ARCH (xsimd's name for it: sse2, sse4.2, fma3+avx2, avx512bw, arm64+neon), else
// says so and exits 77, which ctest reports as a skip. Built with baseline flags, so it runs on
// any CPU of its family, unlike a test program compiled for AVX-512, whose static initializers
// may already use AVX-512 instructions before any check in it could run.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <xsimd/xsimd.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: xsimd_cpu_gate ARCH PROGRAM [ARGS...]\n");
    return 2;
  }
  const auto cpu = xsimd::available_architectures();
  const std::string arch = argv[1];
  bool known = true, ok = false;
  if (arch == "sse2") {
    ok = cpu.sse2;
  } else if (arch == "sse4.2") {
    ok = cpu.sse4_2;
  } else if (arch == "fma3+avx2") {
    ok = cpu.avx2 && cpu.fma3_avx2;
  } else if (arch == "avx512bw") {
    ok = cpu.avx512f && cpu.avx512cd && cpu.avx512dq && cpu.avx512bw;
  } else if (arch == "arm64+neon" || arch.empty()) {
    ok = true;
  } else {
    known = false;
  }
  if (!known) {
    std::fprintf(stderr, "xsimd_cpu_gate: unknown architecture '%s'\n", argv[1]);
    return 2;
  }
  if (!ok) {
    std::printf("skipped: this CPU does not support %s, the xsimd architecture of %s\n", argv[1], argv[2]);
    return 77;
  }
  execv(argv[2], argv + 2);
  std::perror("xsimd_cpu_gate: execv");
  return 2;
}
