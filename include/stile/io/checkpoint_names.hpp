#pragma once
// The tensor names of an encoder family's Hugging Face checkpoint: one table every reader of a
// checkpoint's tensors takes its names from, so a family is added here once. A checkpoint saved
// from the bare model has no prefix; one saved from a model with a head (BertForMaskedLM,
// ElectraForPreTraining, ...) puts the encoder under its base_model_prefix ("bert.", "roberta.",
// ...), which is found by the word-embedding table's name.
//
//   family       prefix                    layer l
//   bert         bert.                     encoder.layer.l.attention.self.{query,key,value},
//   roberta      roberta., camembert.      attention.output.{dense,LayerNorm}, intermediate.dense,
//   electra      electra.                  output.{dense,LayerNorm}
//   distilbert   distilbert.               transformer.layer.l.attention.{q,k,v,out}_lin,
//                                          sa_layer_norm, ffn.lin1, ffn.lin2, output_layer_norm
//   mpnet        mpnet.                    encoder.layer.l.attention.attn.{q,k,v,o},
//                                          attention.LayerNorm, intermediate.dense,
//                                          output.{dense,LayerNorm}
//   modernbert   model.                    layers.l.attn.Wqkv (Q, K, V stacked), attn.Wo, attn_norm (none
//                                          in layer 0), mlp_norm, mlp.Wi (input and gate stacked),
//                                          mlp.Wo; embeddings.tok_embeddings, embeddings.norm and
//                                          final_norm; a bias only where the config says
//   deberta-v2   deberta.                  encoder.layer.l.attention.self.{query,key,value}_proj,
//                                          then BERT's names; encoder.rel_embeddings and
//                                          encoder.LayerNorm (norm_rel_ebd "layer_norm")
// Embeddings: embeddings.{word,position,token_type}_embeddings and embeddings.LayerNorm
// (DistilBERT, MPNet: no token types); ELECTRA also embeddings_project when embedding_size !=
// hidden_size; MPNet also encoder.relative_attention_bias (the table every layer shares).
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

#include "stile/core/file_error.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/safetensors.hpp"

namespace stile {

// The full names (prefix included) of one layer's tensors.
// A name is "" where the family has no such tensor (ModernBERT: its biases, layer 0's attention norm).
struct LayerTensorNames {
  std::string qkv_weight, qkv_bias;  // Q, K and V in one tensor (ModernBERT's Wqkv); then q_weight... are ""
  std::string q_weight, q_bias, k_weight, k_bias, v_weight, v_bias;
  std::string kv_weight;  // K and V stacked into one matrix, as errors name it
  std::string attn_out_weight, attn_out_bias, ln1_weight, ln1_bias;
  std::string ffn_in_weight, ffn_in_bias, ffn_out_weight, ffn_out_bias, ln2_weight, ln2_bias;
};

struct CheckpointNames {
  EncoderFamily family = EncoderFamily::kBert;
  EncoderConfig config;                    // the description the names are of
  std::string prefix;                      // "" or the base model's prefix, "bert." say
  std::string word, position, token_type;  // token_type: "" when the family has none
  std::string embed_ln_weight, embed_ln_bias;
  std::string project_weight, project_bias;  // "" unless ELECTRA projects its embeddings
  std::string relative_attention_bias;       // "" unless MPNet
  std::string final_ln_weight, final_ln_bias;  // "" unless ModernBERT (its final_norm)
  std::string rel_embeddings, rel_ln_weight, rel_ln_bias;  // "" unless DeBERTa-v2 (LayerNorm: if norm_rel_ebd)

  // The names in `file` of a checkpoint of config `c`.
  static CheckpointNames of(const EncoderConfig& c, const SafetensorsFile& file) {
    CheckpointNames n;
    n.family = c.family;
    // The base model's prefix a checkpoint with a head puts the encoder under.
    static constexpr const char *kBert[] = {"bert."}, *kDistilBert[] = {"distilbert."},
                                *kRoberta[] = {"roberta.", "camembert.", "xlm_roberta."}, *kElectra[] = {"electra."},
                                *kMpnet[] = {"mpnet."}, *kModernBert[] = {"model."},
                                *kDeberta[] = {"deberta."};
    std::span<const char* const> prefixes = kBert;
    if (c.family == EncoderFamily::kDistilBert) prefixes = kDistilBert;
    if (c.family == EncoderFamily::kRoberta) prefixes = kRoberta;
    if (c.family == EncoderFamily::kElectra) prefixes = kElectra;
    if (c.family == EncoderFamily::kMpnet) prefixes = kMpnet;
    if (c.family == EncoderFamily::kModernBert) prefixes = kModernBert;
    if (c.family == EncoderFamily::kDebertaV2) prefixes = kDeberta;
    const bool modern = c.family == EncoderFamily::kModernBert;
    const std::string word = modern ? "embeddings.tok_embeddings.weight" : "embeddings.word_embeddings.weight";
    for (const char* p : prefixes) {
      if (file.find(std::string(p) + word) != nullptr) {
        n.prefix = p;
        break;
      }
    }
    n.config = c;
    const std::string e = n.prefix + "embeddings.";
    n.word = n.prefix + word;
    if (modern) {
      n.embed_ln_weight = e + "norm.weight";
      if (c.norm_bias) n.embed_ln_bias = e + "norm.bias";
      n.final_ln_weight = n.prefix + "final_norm.weight";
      if (c.norm_bias) n.final_ln_bias = n.prefix + "final_norm.bias";
      return n;
    }
    if (c.position_table) n.position = e + "position_embeddings.weight";
    if (c.type_vocab_size != 0) n.token_type = e + "token_type_embeddings.weight";
    n.embed_ln_weight = e + "LayerNorm.weight";
    n.embed_ln_bias = e + "LayerNorm.bias";
    if (c.family == EncoderFamily::kElectra && c.embedding_dim() != c.hidden) {
      n.project_weight = n.prefix + "embeddings_project.weight";
      n.project_bias = n.prefix + "embeddings_project.bias";
    }
    if (c.family == EncoderFamily::kMpnet) n.relative_attention_bias = n.prefix + "encoder.relative_attention_bias.weight";
    if (c.disentangled()) {
      n.rel_embeddings = n.prefix + "encoder.rel_embeddings.weight";
      if (c.norm_relative_embeddings) {
        n.rel_ln_weight = n.prefix + "encoder.LayerNorm.weight";
        n.rel_ln_bias = n.prefix + "encoder.LayerNorm.bias";
      }
    }
    return n;
  }

  LayerTensorNames layer(std::size_t l) const {
    LayerTensorNames t;
    if (family == EncoderFamily::kModernBert) {
      const std::string p = prefix + "layers." + std::to_string(l) + ".";
      const auto bias = [](bool has, const std::string& name) { return has ? name : std::string(); };
      t.qkv_weight = p + "attn.Wqkv.weight", t.qkv_bias = bias(config.attention_bias, p + "attn.Wqkv.bias");
      t.kv_weight = p + "attn.Wqkv.weight[K, V]";
      t.attn_out_weight = p + "attn.Wo.weight", t.attn_out_bias = bias(config.attention_bias, p + "attn.Wo.bias");
      if (l != 0) {  // layer 0's attn_norm is an Identity in the reference
        t.ln1_weight = p + "attn_norm.weight", t.ln1_bias = bias(config.norm_bias, p + "attn_norm.bias");
      }
      t.ffn_in_weight = p + "mlp.Wi.weight", t.ffn_in_bias = bias(config.mlp_bias, p + "mlp.Wi.bias");
      t.ffn_out_weight = p + "mlp.Wo.weight", t.ffn_out_bias = bias(config.mlp_bias, p + "mlp.Wo.bias");
      t.ln2_weight = p + "mlp_norm.weight", t.ln2_bias = bias(config.norm_bias, p + "mlp_norm.bias");
      return t;
    }
    if (family == EncoderFamily::kDistilBert) {
      const std::string p = prefix + "transformer.layer." + std::to_string(l) + ".";
      t.q_weight = p + "attention.q_lin.weight", t.q_bias = p + "attention.q_lin.bias";
      t.k_weight = p + "attention.k_lin.weight", t.k_bias = p + "attention.k_lin.bias";
      t.v_weight = p + "attention.v_lin.weight", t.v_bias = p + "attention.v_lin.bias";
      t.kv_weight = p + "attention.k_lin/v_lin.weight";
      t.attn_out_weight = p + "attention.out_lin.weight", t.attn_out_bias = p + "attention.out_lin.bias";
      t.ln1_weight = p + "sa_layer_norm.weight", t.ln1_bias = p + "sa_layer_norm.bias";
      t.ffn_in_weight = p + "ffn.lin1.weight", t.ffn_in_bias = p + "ffn.lin1.bias";
      t.ffn_out_weight = p + "ffn.lin2.weight", t.ffn_out_bias = p + "ffn.lin2.bias";
      t.ln2_weight = p + "output_layer_norm.weight", t.ln2_bias = p + "output_layer_norm.bias";
      return t;
    }
    const std::string p = prefix + "encoder.layer." + std::to_string(l) + ".";
    if (family == EncoderFamily::kMpnet) {
      t.q_weight = p + "attention.attn.q.weight", t.q_bias = p + "attention.attn.q.bias";
      t.k_weight = p + "attention.attn.k.weight", t.k_bias = p + "attention.attn.k.bias";
      t.v_weight = p + "attention.attn.v.weight", t.v_bias = p + "attention.attn.v.bias";
      t.kv_weight = p + "attention.attn.k/v.weight";
      t.attn_out_weight = p + "attention.attn.o.weight", t.attn_out_bias = p + "attention.attn.o.bias";
      t.ln1_weight = p + "attention.LayerNorm.weight", t.ln1_bias = p + "attention.LayerNorm.bias";
    } else if (family == EncoderFamily::kDebertaV2) {
      t.q_weight = p + "attention.self.query_proj.weight", t.q_bias = p + "attention.self.query_proj.bias";
      t.k_weight = p + "attention.self.key_proj.weight", t.k_bias = p + "attention.self.key_proj.bias";
      t.v_weight = p + "attention.self.value_proj.weight", t.v_bias = p + "attention.self.value_proj.bias";
      t.kv_weight = p + "attention.self.key_proj/value_proj.weight";
      t.attn_out_weight = p + "attention.output.dense.weight", t.attn_out_bias = p + "attention.output.dense.bias";
      t.ln1_weight = p + "attention.output.LayerNorm.weight", t.ln1_bias = p + "attention.output.LayerNorm.bias";
    } else {
      t.q_weight = p + "attention.self.query.weight", t.q_bias = p + "attention.self.query.bias";
      t.k_weight = p + "attention.self.key.weight", t.k_bias = p + "attention.self.key.bias";
      t.v_weight = p + "attention.self.value.weight", t.v_bias = p + "attention.self.value.bias";
      t.kv_weight = p + "attention.self.key/value.weight";
      t.attn_out_weight = p + "attention.output.dense.weight", t.attn_out_bias = p + "attention.output.dense.bias";
      t.ln1_weight = p + "attention.output.LayerNorm.weight", t.ln1_bias = p + "attention.output.LayerNorm.bias";
    }
    t.ffn_in_weight = p + "intermediate.dense.weight", t.ffn_in_bias = p + "intermediate.dense.bias";
    t.ffn_out_weight = p + "output.dense.weight", t.ffn_out_bias = p + "output.dense.bias";
    t.ln2_weight = p + "output.LayerNorm.weight", t.ln2_bias = p + "output.LayerNorm.bias";
    return t;
  }
};

// model_dir's model.safetensors; when the directory has only a PyTorch pickle (pytorch_model.bin),
// an error saying that only safetensors is read.
inline std::filesystem::path safetensors_checkpoint(const std::filesystem::path& model_dir) {
  const std::filesystem::path file = model_dir / "model.safetensors";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec) && std::filesystem::exists(model_dir / "pytorch_model.bin", ec)) {
    fail_in_file((model_dir / "pytorch_model.bin").string(),
                 "only model.safetensors is read, not a PyTorch pickle (save the model with save_pretrained("
                 "safe_serialization=True), or convert it to safetensors)");
  }
  return file;
}

// A reader that runs BERT checkpoints only refuses another family by name ("what": the reader).
inline void require_bert_family(const EncoderConfig& c, std::string_view file, std::string_view what) {
  if (c.family != EncoderFamily::kBert) {
    fail_in_file(file, "model_type \"", c.model_type, "\" is not supported by ", what,
                 " (BERT only; the in-memory model, stile::BertModel, runs ", c.model_type, ")");
  }
}

}  // namespace stile
