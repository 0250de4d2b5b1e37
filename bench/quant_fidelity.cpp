// quant_fidelity: how close the quantized shard store's sentence embeddings are to the fp32
// model's, at uniform bitwidths. For every sentence of SST-2 dev, the embedding (mean pooling,
// L2 normalization: the all-MiniLM-L6-v2 pipeline) of the full model with every shard at k bits
// is compared with the fp32 SentenceEncoder's by cosine similarity.
//
//   quant_fidelity STORE [MODEL_DIR] [--sst2 PATH] [--json OUT]
//
// This is a fidelity measure (no labels are read), which is why it may run on dev.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "stile/io/json_file.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/io/model_cache.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/model/sharded_bert.hpp"

namespace {

std::vector<std::string> read_sentences(const std::filesystem::path& tsv) {
  std::ifstream in(tsv);
  if (!in) throw stile::Error("stile: " + tsv.string() + ": cannot open");
  std::vector<std::string> out;
  std::string line;
  std::getline(in, line);  // header: sentence \t label
  while (std::getline(in, line)) {
    const std::size_t tab = line.find('\t');
    out.push_back(line.substr(0, tab));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path sst2 = std::filesystem::path(STILE_SHARED_DIR) / "data/sst2/dev.tsv";
  std::string json_out;
  stile_cli::Parser cli("quant_fidelity", "[options] STORE [MODEL_DIR]",
                        "Sentence-embedding cosine of the shard store STORE, every shard at k bits, to the fp32 model "
                        "in MODEL_DIR (default: $STILE_MODEL_DIR, else ~/.cache/stile/all-MiniLM-L6-v2), over SST-2 "
                        "dev, for each stored bitwidth k.");
  cli.flag("--sst2", "PATH", "SST-2 dev.tsv (default: <repo>/../shared/data/sst2/dev.tsv)", sst2);
  cli.flag("--json", "OUT", "write the results as JSON", json_out);
  cli.example("quant_fidelity minilm.stile");
  const std::vector<std::string> positional = cli.parse(argc, argv);
  if (positional.empty() || positional.size() > 2) cli.fail("give a shard store (and optionally MODEL_DIR)");
  try {
    const stile::SentenceEncoder fp32 = stile::SentenceEncoder::load(
        positional.size() == 2 ? std::filesystem::path(positional[1]) : stile::default_model_dir());
    const stile::ShardedBert sharded = stile::ShardedBert::open(positional[0]);
    const std::vector<std::string> sentences = read_sentences(sst2);
    const std::size_t n = sentences.size(), d = fp32.dim();
    std::vector<stile::Encoding> encodings;
    for (const auto& s : sentences) encodings.push_back(fp32.tokenizer().encode(s));
    const std::vector<std::vector<float>> reference = fp32.embed_encoded(encodings);

    std::vector<unsigned> bits = sharded.store().bits();
    nlohmann::json results = nlohmann::json::array();
    fmt::print("SST-2 dev: {} sentences; store {}; sentence embedding cosine to the fp32 model\n", n, positional[0]);
    fmt::print("{:>5} {:>12} {:>12} {:>12} {:>12}\n", "bits", "mean cos", "min cos", "p5 cos", "seconds");
    for (unsigned b : bits) {
      const stile::SubmodelPlan plan =
          stile::SubmodelPlan::uniform(sharded.config().num_layers, sharded.shards_per_layer(), b);
      stile::ProgressBar bar(fmt::format("{:>2} bits", b));
      std::vector<double> cos;
      const auto start = std::chrono::steady_clock::now();
      constexpr std::size_t kChunk = 32;  // sentences per encoder run
      for (std::size_t i = 0; i < n; i += kChunk) {
        const std::size_t end = std::min(n, i + kChunk);
        std::vector<float> hidden;
        const std::span<const stile::Encoding> chunk(encodings.data() + i, end - i);
        const std::vector<std::size_t> lengths = sharded.encode(chunk, hidden, plan);
        std::size_t row = 0;
        for (std::size_t j = 0; j < lengths.size(); ++j) {
          std::vector<float> e(d);
          stile::pool_tokens(std::span<const float>(hidden).subspan(row * d, lengths[j] * d), lengths[j], d,
                             stile::Pooling::kMean, e);
          stile::l2_normalize(e);
          cos.push_back(stile::cosine_similarity(e, reference[i + j]));
          row += lengths[j];
        }
        bar.update(end, n);
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double mean = 0;
      for (double c : cos) mean += c;
      mean /= double(cos.size());
      std::vector<double> sorted = cos;
      std::sort(sorted.begin(), sorted.end());
      const double p5 = sorted[sorted.size() / 20];
      fmt::print("{:>5} {:>12.6f} {:>12.6f} {:>12.6f} {:>12.2f}\n", b, mean, sorted.front(), p5, seconds);
      results.push_back({{"bits", b}, {"mean_cosine", mean}, {"min_cosine", sorted.front()}, {"p5_cosine", p5}});
    }
    if (!json_out.empty()) stile::write_file_atomically(json_out, results.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quant_fidelity: %s\n", e.what());
    return 1;
  }
  return 0;
}
