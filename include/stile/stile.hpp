#pragma once
// stile: header-only C++20 kernels for an elastic, memory-frugal BERT engine. One include.
#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/core/tile_shape.hpp"
#include "stile/kernels/codec.hpp"
#include "stile/kernels/epilogue.hpp"
#include "stile/kernels/gemm.hpp"
#include "stile/kernels/tiles.hpp"
#include "stile/kernels/activation.hpp"
#include "stile/io/bert_config.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/io/wordpiece.hpp"
