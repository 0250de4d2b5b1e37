#pragma once
// One attention head over a range of queries, fused: for each tile of MR queries (the GEMM's
// register tile), the scores against the sequence's keys, their softmax and P V, with the tile's
// scores kept in L1 and K and V packed once per call into the GEMM's NR-wide panels, both
// products run by the GEMM's micro-kernel (kernels/gemm-inl.h). Light: the per-target code
// (kernels/attention-inl.h) is compiled once, in stile::compiled (kernels/instantiate_kernels.hpp).
#include <cstddef>

namespace stile {

// Adds a family's position terms to rows [0, rows) of a tile of scores (row stride ld; row r is
// query first_query + r of the sequence), at keys [key_begin, key_end). The scores are not yet
// scaled: a term joins them divided by the attention's scale.
using AttentionScoreTerms = void (*)(const void* context, float* scores, std::size_t ld, std::size_t first_query,
                                     std::size_t rows, std::size_t key_begin, std::size_t key_end);
// A softmax of `rows` rows of `cols` scores in place (row stride ld), of scale * x: I-BERT's
// integer one in place of the fused fp32 softmax.
using AttentionSoftmax = void (*)(float* x, std::size_t rows, std::size_t cols, std::size_t ld, float scale);

struct AttentionRowsArgs {
  // Queries first_query .. first_query + rows - 1 of a sequence of `keys` tokens: Q_h row r at
  // q + r * ld_q; K_h and V_h of key j at k + j * ld_kv and v + j * ld_kv; head_dim floats each.
  const float* q = nullptr;
  std::size_t ld_q = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  std::size_t ld_kv = 0;
  std::size_t rows = 0, first_query = 0, keys = 0, head_dim = 0;
  float scale = 1.0f;  // of the scores in the softmax (1 when Q was pre-scaled)
  // ctx_h row r at ctx + r * ld_ctx (may alias q: a tile's queries are read before its context
  // is written, and no tile reads another's rows).
  float* ctx = nullptr;
  std::size_t ld_ctx = 0;
  // When not 0, query i attends to the keys j with |i - j| <= window only.
  std::size_t window = 0;
  AttentionScoreTerms terms = nullptr;  // null: no position terms
  const void* terms_context = nullptr;
  AttentionSoftmax softmax = nullptr;  // null: the fused fp32 softmax
  // Packs no whole head: K decoded one panel at a time, V read in place. A workspace of a block
  // of scores and two panels instead of also a head's K and V; slower from a few hundred keys.
  bool low_memory = false;
  // attention_workspace_floats(keys, head_dim, low_memory) floats, 64-byte aligned; null: a
  // buffer of the calling thread, kept between calls.
  float* workspace = nullptr;
};

// Runs one head (single-threaded: callers parallelize over heads and query ranges). Throws
// stile::Error on a bad argument.
void attention_rows(const AttentionRowsArgs& args);

// Floats of workspace attention_rows needs for a sequence of `keys` tokens on the target it runs
// on now: a block of scores, and a head's packed K and V (or, low_memory, a panel of each).
std::size_t attention_workspace_floats(std::size_t keys, std::size_t head_dim, bool low_memory = false);

}  // namespace stile
