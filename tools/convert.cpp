// convert: a Hugging Face BERT checkpoint directory ->
//   * (default) a stile shard store (docs/format.md): every layer cut into M shards
//     (docs/shards.md), each shard quantized at every requested bitwidth with outlier-aware
//     dictionary quantization;
//   * (--checkpoint fp16|int8) a quantized Hugging Face-style checkpoint directory whose GEMM
//     weights are stored as F16 or I8 + scales (docs/quantized_checkpoint.md), for BertWeights::load.
//
//   convert ~/.cache/stile/all-MiniLM-L6-v2 minilm.stile
//   convert --shards 6 --bits 2,4,6,32 MODEL_DIR out.stile
//   convert --checkpoint int8 --int8-scheme per-channel MODEL_DIR minilm-int8/
//   convert --embeddings lowrank --embedding-budget 0.25 MODEL_DIR out.stile   (docs/format.md,
//       "Low-rank word embeddings": token frequencies counted on --embedding-corpus)
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
#include "stile/model/checkpoint_head.hpp"
#include "stile/model/quantized_checkpoint.hpp"
#include "stile/calibrate/lowrank_search.hpp"
#include "stile/calibrate/token_counts.hpp"
#include "stile/quant/lowrank_factorize.hpp"
#include "stile/store/shard_converter.hpp"
#include "stile/text/wordpiece.hpp"

namespace {

std::string human_bytes(double bytes) {
  if (bytes >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.1f} KiB", bytes / 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  stile::ConvertOptions options;
  std::string checkpoint, int8_scheme, embeddings = "full", embedding_codec = "int8";
  double embedding_budget = 0.25;
  std::vector<std::size_t> embedding_clusters{512, 4096, 12288};
  std::filesystem::path embedding_corpus = STILE_SST2_DIR "/train.tsv";
  std::size_t embedding_calibration = 500;
  stile_cli::Parser cli(
      "convert", "[options] [MODEL_DIR] OUT   |   convert --checkpoint fp16|int8 [--int8-scheme S] [MODEL_DIR] OUT_DIR",
      "Two modes. By default, converts the BERT checkpoint in MODEL_DIR (config.json, model.safetensors, vocab.txt; "
      "default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2) into the shard store OUT (options --shards, "
      "--bits, --outlier-threshold, --no-refine). With --checkpoint, writes instead a quantized checkpoint: the "
      "directory OUT_DIR, a copy of MODEL_DIR whose model.safetensors stores each encoder layer's GEMM weights as "
      "F16 or as I8 with scales (docs/quantized_checkpoint.md), which stile loads with no conversion at load (options "
      "--checkpoint, --int8-scheme). OUT is written to a temporary file (OUT_DIR to a temporary directory) and "
      "renamed, so it is either complete or untouched.");
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
  cli.flag("--checkpoint", "FORMAT",
           "quantized-checkpoint mode: store the GEMM weights as fp16 or int8 in a new checkpoint directory",
           checkpoint)
      .one_of({"fp16", "int8"});
  cli.flag("--int8-scheme", "S",
           "quantized-checkpoint mode, int8: per-channel (symmetric, default) or per-tensor (asymmetric)", int8_scheme)
      .one_of({"per-channel", "per-tensor"});
  cli.flag("--embeddings", "KIND",
           "the word-embedding table: full (fp32 rows) or lowrank (clustered low-rank, format version 2)", embeddings)
      .one_of({"full", "lowrank"});
  cli.flag("--embedding-budget", "F",
           "lowrank: the stored table's bytes at most F times the dense fp32 table's (ranks searched under it)",
           embedding_budget)
      .range(1e-6, 1.0);
  cli.flag("--embedding-codec", "C", "lowrank: how U rows are stored, int8 (a scale per row) or f32",
           embedding_codec)
      .one_of({"int8", "f32"});
  cli.flag("--embedding-clusters", "LIST",
           "lowrank: cluster boundaries in frequency order (cluster 0, the first tokens, stays full)",
           embedding_clusters);
  cli.flag("--embedding-corpus", "TSV",
           "lowrank: the GLUE TSV (SST-2 train.tsv) whose token counts order the clusters, and whose seeded "
           "calibration rows pick the token weighting",
           embedding_corpus);
  cli.flag("--embedding-calibration", "N",
           "lowrank: calibration sentences the search compares sentence embeddings on (0: no search, weights = "
           "token counts)",
           embedding_calibration);
  cli.example("convert minilm.stile", "the default model: every layer x 12 shards x 2..6 and 32 bits");
  cli.example("convert --embeddings lowrank --embedding-budget 0.25 minilm_lr.stile", "the word table 4x smaller");
  cli.example("convert --checkpoint int8 ~/.cache/stile/all-MiniLM-L6-v2 minilm-int8", "a quantized model directory");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (!int8_scheme.empty() && checkpoint != "int8") cli.fail("--int8-scheme needs --checkpoint int8");
  if (positional.empty() || positional.size() > 2) cli.fail("give the output path (and optionally MODEL_DIR first)");
  const std::filesystem::path model_dir = positional.size() == 2 ? positional[0] : stile::default_model_dir().string();
  const std::filesystem::path out = positional.back();

  if (!checkpoint.empty()) {
    try {
      const stile::LinearFormat format = checkpoint == "fp16" ? stile::LinearFormat::kF16 : stile::LinearFormat::kInt8;
      const stile::Int8Scheme scheme = int8_scheme == "per-tensor" ? stile::Int8Scheme::kAsymmetricPerTensor
                                                                   : stile::Int8Scheme::kSymmetricPerChannel;
      const stile::QuantizedCheckpointReport r = stile::write_quantized_checkpoint(model_dir, out, format, scheme);
      fmt::print("{}: {} GEMM weights as {}{}; model.safetensors {} (source {})\n", out.string(), r.converted,
                 checkpoint,
                 checkpoint == "int8" ? fmt::format(" ({})", int8_scheme.empty() ? "per-channel" : int8_scheme) : "",
                 human_bytes(double(r.file_bytes)), human_bytes(double(r.source_bytes)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "convert: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  try {
    if (embeddings == "lowrank") {
      stile::quant::LowRankOptions lr;
      lr.budget = embedding_budget;
      lr.cluster_ends = embedding_clusters;
      lr.codec = *stile::quant::parse_word_row_codec(embedding_codec);
      options.word_table = [&, lr](std::span<const float> table, std::size_t rows, std::size_t d) {
        if (embedding_calibration == 0) {
          const stile::WordPieceTokenizer tokenizer = stile::WordPieceTokenizer::load(model_dir / "vocab.txt");
          const std::vector<double> counts = stile::token_counts(tokenizer, rows, embedding_corpus);
          return stile::quant::factorize_word_table(table, rows, d, counts, lr);
        }
        // The search against sentence-embedding fidelity (calibrate/lowrank_search.hpp) on the
        // calibration rows of the corpus's seeded split, with the model's own tokenizer.
        const stile::SentenceEncoder dense = stile::SentenceEncoder::load(model_dir);
        const stile::LowRankCorpus corpus =
            stile::split_lowrank_corpus(stile::read_glue_tsv(embedding_corpus), embedding_calibration);
        const std::vector<double> counts = stile::token_counts(dense.tokenizer(), rows, corpus.counted);
        const std::vector<std::string>& calibration = corpus.calibration;
        stile::LowRankSearchResult found = stile::search_lowrank_table(dense, model_dir, counts, calibration, lr);
        for (const auto& [p, cosine] : found.tried) {
          fmt::print("embedding search: weight power {}: mean cosine {:.6f} on {} calibration sentences{}\n", p,
                     cosine, calibration.size(), p == found.weight_power ? " (kept)" : "");
        }
        return std::move(found.table);
      };
    }
    stile::ProgressBar bar("converting");
    options.progress = [&](std::size_t done, std::size_t total) { bar.update(done, total); };
    const stile::ConvertReport r = stile::convert_checkpoint(model_dir, out, options);
    if (stile::save_head_sidecar(model_dir, out)) {
      fmt::print("{}: the checkpoint's sequence-classification head (read by run)\n", stile::head_path_for(out).string());
    }

    fmt::print("{}: {} layers x {} shards, file {}\n", out.string(), r.outlier_fraction.size(), r.shards,
               human_bytes(double(r.file_bytes)));
    fmt::print("word embeddings: {}, {} parameters, {} ({:.2f}x fewer bytes than the dense {})\n",
               r.word_table_lowrank ? "clustered low-rank" : "full", r.word_table_params,
               human_bytes(double(r.word_table_bytes)), double(r.dense_word_table_bytes) / double(r.word_table_bytes),
               human_bytes(double(r.dense_word_table_bytes)));
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
