#pragma once
// Which SIMD target stile's kernels run on. Light: defined in stile::compiled.
#include <string_view>

namespace stile {

// Name of the Highway target the kernels run on now ("AVX2", "NEON", ...): the best one the CPU
// supports among those compiled, or the one a test forced with hwy::SetSupportedTargetsForTest.
const char* active_target_name();

// Runs the kernels on the Highway target named `name` from now on, for the whole process (what
// the programs' --target and Python's set_simd_target do: e.g. "AVX2" on an AVX-512 CPU). Throws
// stile::Error listing the choices when the CPU lacks it or stile did not compile it.
void set_simd_target(std::string_view name);

}  // namespace stile
