#pragma once
// The offline converter: a Hugging Face BERT checkpoint directory (config.json, model.safetensors,
// vocab.txt) -> a shard store (store/shard_store.hpp) holding every layer's M shards at every
// requested bitwidth, quantized with quant/dictionary.hpp. One layer is in memory at a time.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/aligned_buffer.hpp"
#include "stile/core/error.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/store/shard_store.hpp"
#include "stile/store/shard_writer.hpp"
#include "stile/store/shard_layout.hpp"
#include "stile/quant/dictionary.hpp"
#include "stile/quant/lowrank_table.hpp"
#include "stile/quant/packed_layout.hpp"

namespace stile {

struct ConvertOptions {
  std::size_t shards = 0;                         // M; 0 = one shard per attention head
  std::vector<unsigned> bits{2, 3, 4, 5, 6, 32};  // the versions of every shard
  quant::QuantizerOptions quantizer;
  // Called after each shard of each layer: (shards done, shards in all).
  std::function<void(std::size_t, std::size_t)> progress;
  // When set, the word embeddings are stored as the clustered low-rank table this returns for the
  // checkpoint's table ([rows x d] fp32) (format version 2; quant/lowrank_factorize.hpp makes
  // one; tools/convert --embeddings lowrank). Unset: the dense table.
  std::function<quant::LowRankWordTable(std::span<const float> table, std::size_t rows, std::size_t d)> word_table;
};

// What the converter measured, for its summary table.
struct ConvertReport {
  struct BitsStats {
    std::size_t bytes = 0;          // all shard versions at these bits, as stored (with padding)
    double mean_abs_error = 0.0;    // mean |w - decoded w| over every quantized weight
    double relative_rmse = 0.0;     // sqrt(mean (w - decoded w)^2) / std of the weights
    double l1_before_refine = 0.0;  // mean |w - decoded w| of the non-outliers, before refinement
    double l1_after_refine = 0.0;   // ... after (equal to before when refinement is off)
  };
  std::size_t shards = 0;
  std::vector<double> outlier_fraction;  // per layer
  std::map<unsigned, BitsStats> bits;
  std::uintmax_t file_bytes = 0;
  // The word table as stored, and the dense fp32 table's bytes for comparison.
  std::size_t word_table_bytes = 0, word_table_params = 0, dense_word_table_bytes = 0;
  bool word_table_lowrank = false;
};

namespace converter_detail {

inline std::string read_text(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_in_file(path.string(), "cannot open the ", what);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_in_file(path.string(), "cannot read the ", what);
  return text;
}

// Rows [r0, r0 + n) of a row-major [rows x cols] matrix.
inline std::vector<float> row_slice(const std::vector<float>& w, std::size_t cols, std::size_t r0, std::size_t n) {
  return {w.begin() + static_cast<std::ptrdiff_t>(r0 * cols), w.begin() + static_cast<std::ptrdiff_t>((r0 + n) * cols)};
}

// Columns [c0, c0 + n) of a row-major [rows x cols] matrix.
inline std::vector<float> col_slice(const std::vector<float>& w, std::size_t rows, std::size_t cols, std::size_t c0,
                                    std::size_t n) {
  std::vector<float> out(rows * n);
  for (std::size_t r = 0; r < rows; ++r)
    std::copy_n(w.begin() + static_cast<std::ptrdiff_t>(r * cols + c0), n,
                out.begin() + static_cast<std::ptrdiff_t>(r * n));
  return out;
}

// One shard's weights before quantization: its six matrices (row-major) and its biases.
struct ShardWeights {
  std::array<std::vector<float>, kShardMatrices> matrices;
  std::vector<float> biases;  // Q, K, V slices, then the FFN1 slice
};

}  // namespace converter_detail

// Serializes one shard version. Returns its bytes (64-byte aligned) with its dictionary and
// outlier counts, and adds its error to `stats`.
struct EncodedShard {
  unsigned bits = 32;
  AlignedBuffer<std::byte> bytes;
  std::vector<float> dictionary;
  std::array<std::uint32_t, kShardMatrices> outliers{};
};

inline EncodedShard encode_shard(const converter_detail::ShardWeights& sw, const ShardShape& shape, unsigned bits,
                                 const quant::OutlierBounds& bounds, const quant::QuantizerOptions& options,
                                 ConvertReport::BitsStats* stats = nullptr, double* abs_sum = nullptr,
                                 double* sq_sum = nullptr) {
  EncodedShard out;
  out.bits = bits;
  std::array<quant::QuantizedIndices, kShardMatrices> q;
  if (bits != 32) {
    std::vector<float> inliers;
    inliers.reserve(shape.weights());
    for (const auto& m : sw.matrices) {
      for (float w : m) {
        if (!bounds.is_outlier(w)) inliers.push_back(w);
      }
    }
    const quant::DictionaryFit fit = quant::fit_dictionary(std::move(inliers), bits, options);
    out.dictionary = fit.centroids;
    if (stats != nullptr) {
      stats->l1_before_refine += fit.l1_before_refine;  // summed here, averaged by the caller
      stats->l1_after_refine += fit.l1;
    }
    for (std::size_t m = 0; m < kShardMatrices; ++m) {
      const auto which = static_cast<ShardMatrix>(m);
      q[m] = quant::index_matrix(sw.matrices[m].data(), shape.rows(which), shape.cols(which), out.dictionary, bounds);
      out.outliers[m] = static_cast<std::uint32_t>(q[m].outlier_keys.size());
    }
  }
  const ShardVersionLayout layout = shard_version_layout(shape, bits, out.outliers);
  out.bytes.resize(layout.total);
  out.bytes.zero();
  std::byte* base = out.bytes.data();
  for (std::size_t m = 0; m < kShardMatrices; ++m) {
    const auto which = static_cast<ShardMatrix>(m);
    const std::size_t rows = shape.rows(which), cols = shape.cols(which);
    if (bits == 32) {
      quant::pack_f32(rows, cols, sw.matrices[m].data(), reinterpret_cast<float*>(base + layout.packed[m].offset));
      continue;
    }
    quant::pack_indices(rows, cols, bits, q[m].indices.data(),
                        reinterpret_cast<std::uint8_t*>(base + layout.packed[m].offset));
    std::memcpy(base + layout.outlier_keys[m].offset, q[m].outlier_keys.data(), layout.outlier_keys[m].size);
    std::memcpy(base + layout.outlier_values[m].offset, q[m].outlier_values.data(), layout.outlier_values[m].size);
    if (abs_sum != nullptr) {  // the error of the decoded weights: centroid, or exact for outliers
      for (std::size_t i = 0; i < rows * cols; ++i) {
        const float w = sw.matrices[m][i];
        const double e = bounds.is_outlier(w) ? 0.0 : double(w) - double(out.dictionary[q[m].indices[i]]);
        *abs_sum += std::abs(e);
        *sq_sum += e * e;
      }
    }
  }
  std::memcpy(base + layout.biases.offset, sw.biases.data(), layout.biases.size);
  return out;
}

// Converts model_dir into the shard store at out_path (written to a temporary file, then renamed).
inline ConvertReport convert_checkpoint(const std::filesystem::path& model_dir, const std::filesystem::path& out_path,
                                        const ConvertOptions& options) {
  using namespace converter_detail;
  const std::filesystem::path config_path = model_dir / "config.json";
  const std::string config_text = read_text(config_path, "model config");
  const EncoderConfig c = parse_encoder_config(config_text, config_path.string());
  // The store's embeddings and layer cut are BERT's (positions from 0, token types, hidden-wide).
  require_bert_family(c, config_path.string(), "convert (the shard store)");
  const std::string vocab_text = read_text(model_dir / "vocab.txt", "vocabulary");
  const SafetensorsFile file = SafetensorsFile::open(safetensors_checkpoint(model_dir).string());
  const std::size_t M = options.shards == 0 ? c.num_heads : options.shards;
  const ShardShape shape = ShardShape::of(c, M);
  std::vector<unsigned> bits = options.bits;
  std::sort(bits.begin(), bits.end());
  bits.erase(std::unique(bits.begin(), bits.end()), bits.end());
  require(!bits.empty(), "convert: no bitwidths requested");
  for (unsigned b : bits) quant::require_supported_bits(b);

  const std::string prefix = file.find("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const std::size_t d = c.hidden, ff = c.intermediate;
  auto load = [&](const std::string& name, std::size_t rows, std::size_t cols) {
    const std::string full = prefix + name;
    const TensorInfo& t = file.tensor(full);
    const std::vector<std::int64_t> want = cols == 0
                                               ? std::vector<std::int64_t>{std::int64_t(rows)}
                                               : std::vector<std::int64_t>{std::int64_t(rows), std::int64_t(cols)};
    if (t.shape != want) fail_in_file(file.path(), "tensor '", full, "' has the wrong shape for config.json");
    std::vector<float> v = file.to_f32(full);
    for (float x : v) {
      if (!std::isfinite(x)) fail_in_file(file.path(), "tensor '", full, "' holds a value that is not finite");
    }
    return v;
  };

  const nlohmann::json quantizer = {{"method", "gaussian-outliers+equal-population-dictionary"},
                                    {"outlier_log_likelihood", options.quantizer.outlier_log_likelihood},
                                    {"refine", options.quantizer.refine}};
  ShardStoreWriter writer(out_path, config_text, M, bits, quantizer);
  writer.add_vocab(vocab_text);
  ConvertReport report;
  {
    const std::vector<float> word = load("embeddings.word_embeddings.weight", c.vocab_size, d);
    const std::vector<float> position = load("embeddings.position_embeddings.weight", c.max_position_embeddings, d);
    const std::vector<float> token_type = load("embeddings.token_type_embeddings.weight", c.type_vocab_size, d);
    const std::vector<float> ln_gamma = load("embeddings.LayerNorm.weight", d, 0);
    const std::vector<float> ln_beta = load("embeddings.LayerNorm.bias", d, 0);
    report.dense_word_table_bytes = word.size() * sizeof(float);
    if (options.word_table) {
      const quant::LowRankWordTable table = options.word_table(word, c.vocab_size, d);
      writer.add_embeddings(table, position, token_type, ln_gamma, ln_beta);
      report.word_table_bytes = table.bytes();
      report.word_table_params = table.params();
      report.word_table_lowrank = true;
    } else {
      writer.add_embeddings(word, position, token_type, ln_gamma, ln_beta);
      report.word_table_bytes = report.dense_word_table_bytes;
      report.word_table_params = word.size();
    }
  }
  report.shards = M;
  std::map<unsigned, double> abs_sum, sq_sum;
  double total_weights = 0.0, var_sum = 0.0;
  const std::size_t total_shards = c.num_layers * M;
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const std::vector<float> wq = load(p + "attention.self.query.weight", d, d);
    const std::vector<float> wk = load(p + "attention.self.key.weight", d, d);
    const std::vector<float> wv = load(p + "attention.self.value.weight", d, d);
    const std::vector<float> bq = load(p + "attention.self.query.bias", d, 0);
    const std::vector<float> bk = load(p + "attention.self.key.bias", d, 0);
    const std::vector<float> bv = load(p + "attention.self.value.bias", d, 0);
    const std::vector<float> wo = load(p + "attention.output.dense.weight", d, d);
    const std::vector<float> w1 = load(p + "intermediate.dense.weight", ff, d);
    const std::vector<float> b1 = load(p + "intermediate.dense.bias", ff, 0);
    const std::vector<float> w2 = load(p + "output.dense.weight", d, ff);
    const std::array<std::vector<float>, 6> resident = {
        load(p + "attention.output.dense.bias", d, 0),     load(p + "attention.output.LayerNorm.weight", d, 0),
        load(p + "attention.output.LayerNorm.bias", d, 0), load(p + "output.dense.bias", d, 0),
        load(p + "output.LayerNorm.weight", d, 0),         load(p + "output.LayerNorm.bias", d, 0)};

    // The Gaussian of the whole layer's shard weights decides what is an outlier in every shard.
    const std::array<std::span<const float>, 6> parts = {wq, wk, wv, wo, w1, w2};
    const quant::GaussianFit gauss = quant::fit_gaussian(parts);
    const quant::OutlierBounds bounds = quant::outlier_bounds(gauss, options.quantizer.outlier_log_likelihood);
    std::size_t outliers = 0, weights = 0;
    for (auto part : parts) {
      for (float w : part) outliers += bounds.is_outlier(w);
      weights += part.size();
    }
    report.outlier_fraction.push_back(double(outliers) / double(weights));
    total_weights += double(weights);
    var_sum += gauss.variance * double(weights);

    const std::size_t a = shape.attn_rows, f = shape.ffn_rows;
    std::vector<std::vector<ShardStoreWriter::Version>> shards(M);
    for (std::size_t s = 0; s < M; ++s) {
      ShardWeights sw;
      sw.matrices[0] = row_slice(wq, d, s * a, a);
      sw.matrices[1] = row_slice(wk, d, s * a, a);
      sw.matrices[2] = row_slice(wv, d, s * a, a);
      sw.matrices[3] = col_slice(wo, d, d, s * a, a);
      sw.matrices[4] = row_slice(w1, d, s * f, f);
      sw.matrices[5] = col_slice(w2, d, ff, s * f, f);
      for (const auto* b : {&bq, &bk, &bv})
        sw.biases.insert(sw.biases.end(), b->begin() + std::ptrdiff_t(s * a), b->begin() + std::ptrdiff_t((s + 1) * a));
      sw.biases.insert(sw.biases.end(), b1.begin() + std::ptrdiff_t(s * f), b1.begin() + std::ptrdiff_t((s + 1) * f));
      for (unsigned b : bits) {
        ConvertReport::BitsStats& st = report.bits[b];
        EncodedShard e = encode_shard(sw, shape, b, bounds, options.quantizer, &st, &abs_sum[b], &sq_sum[b]);
        st.bytes += (e.bytes.size() + kShardStoreAlign - 1) / kShardStoreAlign * kShardStoreAlign;
        shards[s].push_back(ShardStoreWriter::Version{b, std::move(e.bytes), std::move(e.dictionary), e.outliers});
      }
      if (options.progress) options.progress(l * M + s + 1, total_shards);
    }
    nlohmann::json stats = {{"gaussian_mean", gauss.mean},
                            {"gaussian_std", std::sqrt(gauss.variance)},
                            {"outliers", outliers},
                            {"weights", weights}};
    writer.add_layer(resident, shards, stats);
  }
  writer.finish();

  const double shard_count = double(total_shards);
  for (auto& [b, st] : report.bits) {
    st.l1_before_refine /= shard_count;
    st.l1_after_refine /= shard_count;
    if (b != 32) {
      st.mean_abs_error = abs_sum[b] / total_weights;
      st.relative_rmse = std::sqrt(sq_sum[b] / total_weights) / std::sqrt(var_sum / total_weights);
    }
  }
  report.file_bytes = std::filesystem::file_size(out_path);
  return report;
}

}  // namespace stile
