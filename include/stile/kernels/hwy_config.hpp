#pragma once
// Highway settings stile relies on; included before any Highway header by stile's own headers.
//
// SVE targets are disabled: the micro-kernels keep register tiles in arrays of vectors, which
// sizeless SVE vector types do not allow, and the boards we target (Cortex-A53/A55/A72/A73/A76)
// are NEON-only. A host that includes Highway before stile must define HWY_DISABLED_TARGETS the
// same way (the check in targets.hpp says so at compile time).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif
#include <hwy/detect_targets.h>

#if HWY_TARGETS & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#error \
    "stile: SVE targets must be disabled: include stile before Highway, or define HWY_DISABLED_TARGETS to contain HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128"
#endif
