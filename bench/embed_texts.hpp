#pragma once
// What the SST-2 evaluations share: the dev split (or its first rows), and sentence embeddings of
// many texts, in batches of 32 with a progress bar.
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/calibrate/sst2.hpp"
#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/sentence_encoder.hpp"

namespace stile::bench {

// dev.tsv of sst2_dir, only its first `limit` rows when limit is not 0.
inline LabeledSentences read_dev(const std::filesystem::path& sst2_dir, std::size_t limit) {
  LabeledSentences dev = read_glue_tsv(sst2_dir / "dev.tsv");
  if (limit != 0 && limit < dev.size()) {
    dev.sentences.resize(limit);
    dev.labels.resize(limit);
  }
  return dev;
}

inline std::vector<std::vector<float>> embed_all(const SentenceEncoder& encoder, const std::vector<std::string>& texts,
                                                 ThreadPool& pool, const std::string& label) {
  constexpr std::size_t kBatch = 32;
  std::vector<std::vector<float>> out;
  out.reserve(texts.size());
  ProgressBar bar(label);
  for (std::size_t begin = 0; begin < texts.size(); begin += kBatch) {
    const std::size_t end = std::min(texts.size(), begin + kBatch);
    std::vector<std::vector<float>> e =
        encoder.embed_batch(std::span<const std::string>(texts).subspan(begin, end - begin), &pool);
    for (auto& v : e) out.push_back(std::move(v));
    bar.update(end, texts.size());
  }
  return out;
}

}  // namespace stile::bench
