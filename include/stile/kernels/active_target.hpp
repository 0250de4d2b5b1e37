#pragma once
// Which SIMD target stile's kernels run on. Light: defined in stile::compiled.

namespace stile {

// Name of the Highway target the kernels run on now ("AVX2", "NEON", ...): the best one the CPU
// supports among those compiled, or the one a test forced with hwy::SetSupportedTargetsForTest.
const char* active_target_name();

}  // namespace stile
