#pragma once
// Sentence embeddings of many texts, in batches of 32 with a progress bar (the SST-2 evaluations).
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/progress_bar.hpp"
#include "stile/core/thread_pool.hpp"
#include "stile/model/sentence_encoder.hpp"

namespace stile::bench {

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
