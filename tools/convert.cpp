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

#include "cli.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/store/shard_converter.hpp"

namespace {

std::string human_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  stile::ConvertOptions options;
  stile_cli::Parser cli("convert", "[options] [MODEL_DIR] OUT",
                        "Converts the BERT checkpoint in MODEL_DIR (config.json, model.safetensors, vocab.txt; "
                        "default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2) into the shard store OUT. "
                        "OUT is written to a temporary file and renamed, so it is either complete or untouched.");
  cli.flag("--shards", "M",
           "shards per layer (default: one per attention head); must divide the heads and the FFN width",
           options.shards)
      .at_least(1);
  cli.bits("--bits", "LIST", "bitwidths to store, from 2,3,4,5,6,32 (default: all of them)", options.bits);
  cli.flag("--outlier-threshold", "T",
           "weights whose log-likelihood under the layer's Gaussian is below T are kept exactly as outliers",
           options.quantizer.outlier_log_likelihood);
  cli.toggle("--no-refine", "skip the k-means refinement of the equal-population dictionaries",
             [&] { options.quantizer.refine = false; });
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.empty() || positional.size() > 2) cli.fail("give the output path (and optionally MODEL_DIR first)");
  const std::filesystem::path model_dir = positional.size() == 2 ? positional[0] : stile::default_model_dir().string();
  const std::filesystem::path out = positional.back();

  try {
    stile::ProgressBar bar("converting");
    options.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    const stile::ConvertReport r = stile::convert_checkpoint(model_dir, out, options);

    fmt::print("{}: {} layers x {} shards, file {}\n", out.string(), r.outlier_fraction.size(), r.shards,
               human_bytes(double(r.file_bytes)));
    fmt::print("\n{:>5} {:>12} {:>14} {:>13} {:>16} {:>15}\n", "bits", "shards size", "mean |w - q|", "rel. RMSE",
               "L1 equal-pop.", "L1 refined");
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
