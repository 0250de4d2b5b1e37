#pragma once
// `convert --checkpoint`: a float checkpoint directory of a BERT-shaped encoder (any family
// io/checkpoint_names.hpp names) -> a Hugging Face-style directory whose model.safetensors stores
// every encoder layer's GEMM weights (BERT's query, key, value, attention.output.dense,
// intermediate.dense, output.dense .weight; another family's equivalents) as F16, or as I8 with F32
// `_scale` and I32 `_zero_point` companions (docs/quantized_checkpoint.md); every other tensor (embeddings,
// biases, LayerNorms, anything else the file holds) is copied unchanged, and so is every other file
// of the directory (config.json, vocab.txt, tokenizer and sentence-transformers files), so that
// BertWeights::load and SentenceEncoder::load read the result as they read the source.
//
// The int8 values are quantized as the loader would quantize the fp32 weights on a target with
// 8-bit weights (quantize_int8, weight range 127), so that loading the result with an int8
// precision there is bit-identical to loading the source; for the same reason the per-tensor scheme
// quantizes K and V of a layer together (the loader stacks them into one GEMM), storing the shared
// scale and zero point in both. The stored query weight is the checkpoint's own (the loader applies
// 1/sqrt(head_dim) to its scales).
//
// OUT is built in a temporary sibling directory and renamed into place: it is either complete or
// absent. OUT must not exist.
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "stile/core/file_error.hpp"
#include "stile/core/half.hpp"
#include "stile/io/checkpoint_names.hpp"
#include "stile/io/encoder_config.hpp"
#include "stile/io/safetensors.hpp"
#include "stile/io/safetensors_writer.hpp"
#include "stile/model/stored_linear.hpp"
#include "stile/ops/precision.hpp"
#include "stile/quant/int8_weights.hpp"

namespace stile {

struct QuantizedCheckpointReport {
  std::size_t source_bytes = 0;  // the source's model.safetensors
  std::size_t file_bytes = 0;    // the written model.safetensors
  std::size_t converted = 0;     // GEMM weights stored as F16 or I8
};

namespace quantized_checkpoint_detail {

// Weight files of other frameworks, not copied: they would hold the unconverted weights.
inline bool is_other_weight_file(const std::string& name) {
  static const std::set<std::string> kSkipped = {
      "model.safetensors", "pytorch_model.bin", "tf_model.h5", "flax_model.msgpack", "rust_model.ot", "onnx",
      "openvino"};
  return kSkipped.contains(name);
}

template <class T>
std::vector<std::byte> le_bytes(const std::vector<T>& values) {
  static_assert(std::endian::native == std::endian::little, "the writer stores the machine's bytes");
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// W [rows x cols] quantized as one matrix and stored as parts.size() tensors of equal row counts
// (K and V sharing one per-tensor quantization), each an I8 tensor with its scales ([rows] or [1])
// and zero point.
inline void add_int8(std::vector<TensorToWrite>& out, const std::vector<std::string>& parts, const float* w,
                     std::size_t rows, std::size_t cols, Int8Scheme scheme) {
  // nr = 1: the packed layout is the row-major one, K padded to 4 (read back with stored()).
  const Int8Weights q = quantize_int8(w, rows, cols, cols, scheme, parts.front(), Int8Packing{1, 127});
  const std::size_t part_rows = rows / parts.size();
  for (std::size_t part = 0; part < parts.size(); ++part) {
    const std::size_t r0 = part * part_rows, r1 = r0 + part_rows;
    std::vector<std::int8_t> values(part_rows * cols);
    for (std::size_t n = r0; n < r1; ++n) {
      for (std::size_t k = 0; k < cols; ++k) values[(n - r0) * cols + k] = q.view.stored(n, k);
    }
    const std::vector<float> scales =
        scheme == Int8Scheme::kSymmetricPerChannel
            ? std::vector<float>(q.scales.begin() + std::ptrdiff_t(r0), q.scales.begin() + std::ptrdiff_t(r1))
            : std::vector<float>{q.scales[0]};
    const std::string& name = parts[part];
    out.push_back({name, DType::I8, {std::int64_t(part_rows), std::int64_t(cols)}, le_bytes(values)});
    out.push_back({concat(name, kInt8ScaleSuffix), DType::F32, {std::int64_t(scales.size())}, le_bytes(scales)});
    out.push_back({concat(name, kInt8ZeroPointSuffix), DType::I32, {1}, le_bytes(std::vector{q.zero_point})});
  }
}

inline void add_f16(std::vector<TensorToWrite>& out, const std::string& name, const std::vector<float>& w,
                    std::size_t rows, std::size_t cols) {
  std::vector<std::uint16_t> halves(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!(std::abs(w[i]) <= kHalfMax)) {
      throw Error(concat("stile: tensor '", name, "': weight [", i / cols, "][", i % cols, "] = ", float_text(w[i]),
                         " does not fit fp16"));
    }
    halves[i] = float_to_half(w[i]);
  }
  out.push_back({name, DType::F16, {std::int64_t(rows), std::int64_t(cols)}, le_bytes(halves)});
}

// The tensors of the converted file (everything but the converted weights copied as they are).
inline std::vector<TensorToWrite> converted_tensors(const SafetensorsFile& file, const EncoderConfig& c,
                                                    LinearFormat format, Int8Scheme scheme, std::size_t& converted) {
  if (c.family == EncoderFamily::kModernBert) {
    fail_in_file(file.path(), "model_type \"", c.model_type,
                 "\" is not supported by convert --checkpoint (its Q, K, V and its gated FFN's halves are stacked "
                 "in one tensor each; BertModel runs it from the float checkpoint)");
  }
  const CheckpointNames names = CheckpointNames::of(c, file);  // the family's (io/checkpoint_names.hpp)
  const std::size_t d = c.hidden, ff = c.intermediate;
  std::vector<TensorToWrite> out;
  std::set<std::string> done;
  auto dense = [&](const std::string& name, std::size_t rows, std::size_t cols) {
    const StoredLinear w = read_stored_linear(file, name, rows, cols);
    if (w.quantized) fail_in_file(file.path(), "tensor '", name, "' is already I8: convert from a float checkpoint");
    done.insert(name);
    ++converted;
    return w.dense;
  };
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    const LayerTensorNames n = names.layer(l);
    const std::string &q = n.q_weight, &k = n.k_weight, &v = n.v_weight;
    const struct {
      std::string name;
      std::size_t rows, cols;
    } others[] = {{n.attn_out_weight, d, d}, {n.ffn_in_weight, ff, d}, {n.ffn_out_weight, d, ff}};
    if (format == LinearFormat::kF16) {
      for (const std::string& name : {q, k, v}) add_f16(out, name, dense(name, d, d), d, d);
      for (const auto& o : others) add_f16(out, o.name, dense(o.name, o.rows, o.cols), o.rows, o.cols);
      continue;
    }
    const std::vector<float> wq = dense(q, d, d);
    add_int8(out, {q}, wq.data(), d, d, scheme);
    std::vector<float> kv = dense(k, d, d);
    const std::vector<float> wv = dense(v, d, d);
    kv.insert(kv.end(), wv.begin(), wv.end());
    if (scheme == Int8Scheme::kAsymmetricPerTensor) {
      add_int8(out, {k, v}, kv.data(), 2 * d, d, scheme);
    } else {
      add_int8(out, {k}, kv.data(), d, d, scheme);
      add_int8(out, {v}, kv.data() + d * d, d, d, scheme);
    }
    for (const auto& o : others) {
      const std::vector<float> w = dense(o.name, o.rows, o.cols);
      add_int8(out, {o.name}, w.data(), o.rows, o.cols, scheme);
    }
  }
  for (const TensorInfo& t : file.tensors()) {
    if (done.contains(t.name)) continue;
    const std::span<const std::byte> raw = file.bytes(t);
    out.push_back({t.name, t.dtype, t.shape, std::vector<std::byte>(raw.begin(), raw.end())});
  }
  return out;
}

}  // namespace quantized_checkpoint_detail

// Converts model_dir's checkpoint into out_dir (see above). `format`: kF16 or kInt8 (`scheme`
// applies to kInt8). Errors name the file (and the tensor) at fault; nothing is left behind.
inline QuantizedCheckpointReport write_quantized_checkpoint(const std::filesystem::path& model_dir,
                                                            std::filesystem::path out_dir, LinearFormat format,
                                                            Int8Scheme scheme) {
  namespace fs = std::filesystem;
  using namespace quantized_checkpoint_detail;
  require(format == LinearFormat::kF16 || format == LinearFormat::kInt8,
          "write_quantized_checkpoint: the format must be fp16 or int8");
  if (!out_dir.has_filename()) out_dir = out_dir.parent_path();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out_dir, ec))) {
    fail_in_file(out_dir.string(), "already exists (the output directory must be new)");
  }
  const EncoderConfig config = read_encoder_config((model_dir / "config.json").string());
  const SafetensorsFile source = SafetensorsFile::open(safetensors_checkpoint(model_dir).string());

  const fs::path tmp = out_dir.parent_path() / concat(".", out_dir.filename().string(), ".tmp-", ::getpid());
  struct Cleanup {
    fs::path path;
    bool armed = true;
    ~Cleanup() {
      std::error_code ignored;
      if (armed) fs::remove_all(path, ignored);
    }
  } cleanup{tmp};
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec) {
    fail_in_file(tmp.string(), "cannot create the temporary output directory: ", ec.message());
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (is_other_weight_file(name)) continue;
    fs::copy(entry.path(), tmp / name, fs::copy_options::recursive, ec);
    if (ec) fail_in_file(entry.path().string(), "cannot copy to ", (tmp / name).string(), ": ", ec.message());
  }
  QuantizedCheckpointReport report;
  std::vector<TensorToWrite> tensors;
  try {
    tensors = converted_tensors(source, config, format, scheme, report.converted);
  } catch (const Error& e) {
    const std::string_view what = e.what();
    if (what.starts_with(concat("stile: ", source.path(), ": "))) throw;
    fail_in_file(source.path(), without_prefix(what));
  }
  std::map<std::string, std::string> metadata = source.metadata();
  metadata["format"] = "pt";
  metadata["stile.linear_format"] = format == LinearFormat::kF16                 ? "fp16"
                                    : scheme == Int8Scheme::kAsymmetricPerTensor ? "int8-per-tensor"
                                                                                 : "int8-per-channel";
  const std::vector<std::byte> bytes = safetensors_bytes(std::move(tensors), metadata);
  write_file_bytes((tmp / "model.safetensors").string(), bytes);
  report.source_bytes = fs::file_size(source.path());
  report.file_bytes = bytes.size();
  fs::rename(tmp, out_dir, ec);
  if (ec) fail_in_file(out_dir.string(), "cannot rename ", tmp.string(), " into place: ", ec.message());
  cleanup.armed = false;
  return report;
}

}  // namespace stile
