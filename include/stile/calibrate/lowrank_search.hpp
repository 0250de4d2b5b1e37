#pragma once
// The search that picks a clustered low-rank word table under a byte budget against embedding
// fidelity on a calibration set: what replaces MCUBERT's NAS (docs/format.md, "Low-rank word
// embeddings"). Offline; needs Eigen through quant/lowrank_factorize.hpp.
//
// For each token-weight power p in a short list, the greedy rank allocation of
// factorize_word_table (which spends the budget where the frequency-weighted error falls most)
// gives one table; the fp32 model is run with that table on the calibration sentences (SST-2
// train rows of the seeded split's calibration part, never dev), and the table whose sentence
// embeddings have the highest mean cosine to the dense model's is kept. The power decides how
// much the rare tokens, which the token counts barely see, are protected (p = 1 follows the
// corpus, 0 treats every token alike).
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "stile/calibrate/sst2.hpp"
#include "stile/core/error.hpp"
#include "stile/model/bert_weights.hpp"
#include "stile/model/pooling.hpp"
#include "stile/model/sentence_encoder.hpp"
#include "stile/quant/lowrank_factorize.hpp"

namespace stile {

// A corpus cut for the search: the sentences whose token counts order the clusters, and the
// calibration sentences the tables are compared on, kept out of the counts (so that, as on new
// text, some of their tokens are rare or unseen). The calibration sentences are the first `n` of
// the seeded split's calibration part (calibrate/sst2.hpp, split_sst2); the rest is counted.
struct LowRankCorpus {
  std::vector<std::string> counted, calibration;
};
inline LowRankCorpus split_lowrank_corpus(const LabeledSentences& corpus, std::size_t n) {
  const Sst2Parts parts = split_sst2(corpus.size());
  std::vector<bool> held_out(corpus.size(), false);
  LowRankCorpus out;
  for (std::size_t i = 0; i < std::min(n, parts.calibration.size()); ++i) {
    held_out[parts.calibration[i]] = true;
    out.calibration.push_back(corpus.sentences[parts.calibration[i]]);
  }
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    if (!held_out[i]) out.counted.push_back(corpus.sentences[i]);
  }
  return out;
}

struct LowRankSearchResult {
  quant::LowRankWordTable table;
  double weight_power = 1.0;
  double calibration_cosine = 0.0;  // mean over the calibration sentences, of the kept table
  std::vector<std::pair<double, double>> tried;  // (power, mean cosine) for every power
};

// The mean cosine between each sentence's embedding by `encoder` and `reference[i]`.
inline double mean_cosine(const SentenceEncoder& encoder, std::span<const std::string> sentences,
                          const std::vector<std::vector<float>>& reference, ThreadPool* pool = nullptr) {
  require(sentences.size() == reference.size() && !sentences.empty(), "mean_cosine: one reference per sentence");
  double sum = 0;
  constexpr std::size_t kBatch = 32;
  for (std::size_t b = 0; b < sentences.size(); b += kBatch) {
    const std::size_t n = std::min(kBatch, sentences.size() - b);
    const std::vector<std::vector<float>> e = encoder.embed_batch(sentences.subspan(b, n), pool);
    for (std::size_t i = 0; i < n; ++i) sum += cosine_similarity(e[i], reference[b + i]);
  }
  return sum / double(sentences.size());
}

// dense: the model (its word table is the one factorized); model_dir: where it was loaded from
// (each candidate is loaded again from there with its own table); counts: token counts (train);
// calibration: sentences to compare on.
inline LowRankSearchResult search_lowrank_table(const SentenceEncoder& dense, const std::filesystem::path& model_dir,
                                                std::span<const double> counts, std::span<const std::string> calibration,
                                                quant::LowRankOptions options,
                                                std::span<const double> powers = std::vector<double>{1.0, 0.5, 0.25, 0.0},
                                                ThreadPool* pool = nullptr) {
  require(!powers.empty(), "search_lowrank_table: no weight power to try");
  const EncoderConfig& c = dense.model().config();
  const std::span<const float> table = dense.model().weights().word_embeddings;
  std::vector<std::vector<float>> reference;
  constexpr std::size_t kBatch = 32;
  for (std::size_t b = 0; b < calibration.size(); b += kBatch) {
    for (auto& e : dense.embed_batch(calibration.subspan(b, std::min(kBatch, calibration.size() - b)), pool)) {
      reference.push_back(std::move(e));
    }
  }
  LowRankSearchResult best;
  best.calibration_cosine = -std::numeric_limits<double>::infinity();
  for (const double p : powers) {
    options.weight_power = p;
    quant::LowRankWordTable t = quant::factorize_word_table(table, c.vocab_size, c.hidden, counts, options);
    const std::vector<float> rows = t.reconstruct();
    BertWeights w = BertWeights::load(model_dir);
    w.word_embeddings = rows;
    const SentenceEncoder candidate(BertModel(std::move(w)), dense.tokenizer(), dense.config());
    const double cosine = mean_cosine(candidate, calibration, reference, pool);
    best.tried.emplace_back(p, cosine);
    if (cosine > best.calibration_cosine) {
      best.calibration_cosine = cosine;
      best.weight_power = p;
      best.table = std::move(t);
    }
  }
  return best;
}

}  // namespace stile
