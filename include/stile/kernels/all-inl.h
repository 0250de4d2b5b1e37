// Every per-target kernel file of stile. targets.hpp compiles this once per Highway target.
// (No include guard: foreach_target includes it once per target; each file below toggles its own.)
#include "stile/kernels/activation-inl.h"
#include "stile/kernels/pack-inl.h"
#include "stile/kernels/fp16-inl.h"
#include "stile/kernels/dict_bytes-inl.h"
#include "stile/kernels/dict-inl.h"
#include "stile/kernels/gemm-inl.h"
#include "stile/kernels/int8_gemm-inl.h"
#include "stile/kernels/dict_int8-inl.h"
#include "stile/kernels/rowwise-inl.h"
#include "stile/kernels/attention-inl.h"
