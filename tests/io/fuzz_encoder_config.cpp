// libFuzzer target for the config.json reader (io/encoder_config.hpp): every input must be refused
// with a stile::Error or give a description the model can be built from (dimensions positive,
// heads dividing the hidden size, a position past RoBERTa's and MPNet's offset, MPNet's 32 buckets,
// ModernBERT's window within its positions and its rotary bases, DeBERTa's relative span and
// buckets, the family's own fields set and the others not). Seeds: tests/io/fuzz_seeds_config/ (each family's config.json and
// all-MiniLM-L6-v2's).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "stile/core/error.hpp"
#include "stile/io/encoder_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  stile::EncoderConfig c;
  try {
    c = stile::parse_encoder_config(text, "fuzz/config.json");
  } catch (const stile::Error&) {
    return 0;
  }
  using stile::EncoderFamily;
  const bool ok = c.hidden > 0 && c.num_layers > 0 && c.num_heads > 0 && c.intermediate > 0 && c.vocab_size > 0 &&
                  c.hidden % c.num_heads == 0 && c.max_positions() >= 1 && c.embedding_dim() > 0 &&
                  c.layer_norm_eps > 0.0f && c.hidden_act == "gelu" &&
                  (c.family == EncoderFamily::kRoberta || c.family == EncoderFamily::kMpnet) ==
                      (c.position_offset > 0) &&
                  (c.family == EncoderFamily::kDebertaV2 ||
                   (c.family == EncoderFamily::kDistilBert || c.family == EncoderFamily::kMpnet ||
                    c.family == EncoderFamily::kModernBert) == (c.type_vocab_size == 0)) &&
                  (c.family == EncoderFamily::kElectra || c.embedding_size == 0) &&
                  (c.family == EncoderFamily::kMpnet ? c.relative_attention_buckets >= 32
                                                     : c.relative_attention_buckets == 0);
  const bool modern = c.family == EncoderFamily::kModernBert;
  const bool layer_ok =
      modern ? c.pre_norm && c.gated_ffn && !c.position_table && c.local_layers.size() == c.num_layers &&
                   c.local_attention > 0 && c.local_attention <= c.max_position_embeddings &&
                   c.rope_theta_global > 0.0f && c.rope_theta_local > 0.0f && c.head_dim() % 2 == 0 &&
                   c.layer_norm_eps > 0.0f && c.layer_norm_eps < 1.0f
             : !c.pre_norm && !c.gated_ffn && c.local_layers.empty() && !c.rotary() && c.norm_bias &&
                   c.attention_bias && c.mlp_bias &&
                   (c.family == EncoderFamily::kDebertaV2
                        ? c.relative_span > 0 && c.max_relative_positions > 0 &&
                              (c.position_buckets == 0 || c.max_relative_positions > c.position_buckets / 2 + 1)
                        : c.position_table && c.relative_span == 0 && !c.c2p && !c.p2c);
  if (!ok || !layer_ok) __builtin_trap();
  return 0;
}
