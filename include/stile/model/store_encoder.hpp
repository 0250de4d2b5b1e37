#pragma once
// What every store-backed encoder shares (ShardedBert, the layer-wise evaluator, the engine): the
// resident parameters read once from the store (the embedding tables other than the word
// embeddings, and each layer's biases and LayerNorms), a batch of encodings checked and packed
// into one row range per sequence, and the embedding layer's output once the word rows are in
// place (word + position + token type, then the embedding LayerNorm). Where the word rows come
// from is the caller's business: the store's own reader, or the engine's cached reads.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/kernels/rowwise.hpp"
#include "stile/model/embeddings.hpp"
#include "stile/ops/formatted_ops.hpp"
#include "stile/ops/sharded_layer.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

// The real tokens of a batch of sequences, packed one sequence after the other.
struct TokenBatch {
  std::vector<std::size_t> lengths;
  std::vector<std::size_t> offsets{0};  // sequences + 1 row offsets
  std::vector<std::int32_t> ids;        // [tokens]

  std::size_t tokens() const noexcept { return offsets.back(); }
};

// Checks each sequence against the model (attention mask, positions, ids, types) and packs its
// real tokens. `empty_is_error`: a sequence without tokens throws "<who>: sequence i has no tokens".
inline TokenBatch pack_tokens(std::span<const Encoding> batch, const EncoderConfig& c, bool empty_is_error = false,
                              std::string_view who = "encode") {
  TokenBatch out;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::size_t len = checked_sequence_length(batch[i], i, c.max_position_embeddings);
    if (empty_is_error) require(len > 0, std::string(who) + ": sequence " + std::to_string(i) + " has no tokens");
    check_token_ids(batch[i], len, c);
    out.lengths.push_back(len);
    out.offsets.push_back(out.offsets.back() + len);
    out.ids.insert(out.ids.end(), batch[i].input_ids.begin(),
                   batch[i].input_ids.begin() + static_cast<std::ptrdiff_t>(len));
  }
  return out;
}

class StoreResidents {
 public:
  explicit StoreResidents(const ShardStore& store) : embeddings_(store.read_embeddings()) {
    for (std::size_t l = 0; l < store.num_layers(); ++l) layers_.push_back(store.read_resident(l));
  }

  const EmbeddingResident& embeddings() const noexcept { return embeddings_; }
  LayerResidentView layer(std::size_t l) const { return resident_view(layers_.at(l)); }

  // The embedding layer's output in place: hidden ([packed.tokens() x hidden]) holds the word rows
  // of `packed`'s tokens; adds each token's position and type rows, then the embedding LayerNorm
  // (in format `norm`).
  void embed(std::span<const Encoding> batch, const TokenBatch& packed, const EncoderConfig& c, float* hidden,
             NormFormat norm = NormFormat::kF32) const {
    const std::size_t d = c.hidden;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      add_position_and_type(batch[i], packed.lengths[i], c, embeddings_.position.data(), embeddings_.token_type.data(),
                            hidden + packed.offsets[i] * d);
    }
    if (packed.tokens() == 0) return;
    layer_norm_rows(norm, hidden, packed.tokens(), d, d, embeddings_.ln_gamma.data(), embeddings_.ln_beta.data(),
                    c.layer_norm_eps);
  }

  // Bytes held: every resident float.
  std::size_t bytes() const noexcept {
    std::size_t floats = embeddings_.position.size() + embeddings_.token_type.size() + embeddings_.ln_gamma.size() +
                         embeddings_.ln_beta.size();
    for (const LayerResident& r : layers_) {
      floats += r.attn_out_bias.size() + r.ln1_gamma.size() + r.ln1_beta.size() + r.ffn_out_bias.size() +
                r.ln2_gamma.size() + r.ln2_beta.size();
    }
    return floats * sizeof(float);
  }

 private:
  EmbeddingResident embeddings_;
  std::vector<LayerResident> layers_;
};

// The embedding layer's output for `packed` into hidden ([tokens x hidden], resized), the word rows
// read by the store's own reader (ShardedBert and the layer-wise evaluator; the engine reads its
// rows through its backend and cache instead, pipeline/word_rows.hpp).
inline void embed_from_store(const ShardStore& store, const StoreResidents& residents, std::span<const Encoding> batch,
                             const TokenBatch& packed, std::vector<float>& hidden) {
  hidden.assign(packed.tokens() * store.config().hidden, 0.0f);
  if (packed.tokens() == 0) return;
  store.read_word_rows(packed.ids, hidden.data());
  residents.embed(batch, packed, store.config(), hidden.data());
}

}  // namespace stile
