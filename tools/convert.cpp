// convert: a Hugging Face BERT checkpoint directory -> a stile shard store (docs/format.md):
// every layer cut into M shards (docs/shards.md), each shard quantized at every requested
// bitwidth with outlier-aware dictionary quantization.
//
//   convert ~/.cache/stile/all-MiniLM-L6-v2 minilm.stile
//   convert --shards 6 --bits 2,4,6,32 MODEL_DIR out.stile
//
// Exit status: 0 ok, 1 runtime error (bad checkpoint, unwritable output), 2 usage error.
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "stile/core/progress_bar.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/store/shard_converter.hpp"

namespace {

constexpr const char* kUsage = R"(usage: convert [options] [MODEL_DIR] OUT

Converts the BERT checkpoint in MODEL_DIR (config.json, model.safetensors, vocab.txt; default:
$STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2) into the shard store OUT. OUT is written
to a temporary file and renamed, so it is either complete or untouched.

options:
  --shards M            shards per layer (default: one per attention head); must divide the heads
                        and the FFN width
  --bits LIST           bitwidths to store, from 2,3,4,5,6,32 (default: all of them)
  --outlier-threshold T weights whose log-likelihood under the layer's Gaussian is below T are
                        kept exactly as outliers (default: -4)
  --no-refine           skip the k-means refinement of the equal-population dictionaries
  --help                print this help
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "convert: %s\n\n%s", message.c_str(), kUsage);
  std::exit(2);
}

std::size_t parse_count(std::string_view text, const char* what) {
  std::size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(std::string(text), &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != text.size() || text.empty()) usage_error(fmt::format("{} must be a number, got '{}'", what, text));
  return static_cast<std::size_t>(value);
}

std::vector<unsigned> parse_bits(std::string_view list) {
  std::vector<unsigned> bits;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    const auto b = static_cast<unsigned>(parse_count(item, "--bits"));
    if (!stile::quant::is_supported_bits(b)) usage_error(fmt::format("--bits: {} is not one of 2,3,4,5,6,32", b));
    bits.push_back(b);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  if (bits.empty()) usage_error("--bits needs at least one bitwidth");
  return bits;
}

std::string human_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  stile::ConvertOptions options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage_error(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--shards") {
      options.shards = parse_count(value(), "--shards");
      if (options.shards == 0) usage_error("--shards must be positive");
    } else if (arg == "--bits") {
      options.bits = parse_bits(value());
    } else if (arg == "--outlier-threshold") {
      const std::string text(value());
      try {
        std::size_t pos = 0;
        options.quantizer.outlier_log_likelihood = std::stod(text, &pos);
        if (pos != text.size()) throw std::invalid_argument(text);
      } catch (const std::exception&) {
        usage_error("--outlier-threshold must be a number, got '" + text + "'");
      }
    } else if (arg == "--no-refine") {
      options.quantizer.refine = false;
    } else if (arg.starts_with("-")) {
      usage_error(fmt::format("unknown option '{}'", arg));
    } else {
      positional.emplace_back(arg);
    }
  }
  if (positional.empty() || positional.size() > 2) usage_error("give the output path (and optionally MODEL_DIR first)");
  const std::filesystem::path model_dir = positional.size() == 2 ? positional[0] : stile::default_model_dir().string();
  const std::filesystem::path out = positional.back();

  try {
    stile::ProgressBar bar("converting");
    options.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    const stile::ConvertReport r = stile::convert_checkpoint(model_dir, out, options);

    fmt::print("{}: {} layers x {} shards, file {}\n", out.string(), r.outlier_fraction.size(), r.shards,
               human_bytes(double(r.file_bytes)));
    fmt::print("\n{:>5} {:>12} {:>14} {:>13} {:>16} {:>15}\n", "bits", "shards size", "mean |w - q|",
               "rel. RMSE", "L1 equal-pop.", "L1 refined");
    for (const auto& [bits, st] : r.bits) {
      if (bits == 32) {
        fmt::print("{:>5} {:>12} {:>14} {:>13} {:>16} {:>15}\n", bits, human_bytes(double(st.bytes)), "0 (exact)", "0",
                   "-", "-");
      } else {
        fmt::print("{:>5} {:>12} {:>14.3e} {:>13.4f} {:>16.3e} {:>15.3e}\n", bits, human_bytes(double(st.bytes)),
                   st.mean_abs_error, st.relative_rmse, st.l1_before_refine, st.l1_after_refine);
      }
    }
    fmt::print("\n{:>5} {:>17}\n", "layer", "outlier fraction");
    for (std::size_t l = 0; l < r.outlier_fraction.size(); ++l) {
      fmt::print("{:>5} {:>16.3f}%\n", l, 100.0 * r.outlier_fraction[l]);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert: %s\n", e.what());
    return 1;
  }
  return 0;
}
