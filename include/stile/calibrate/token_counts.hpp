#pragma once
// Token frequencies on a corpus, for ordering the word-embedding table's clusters by frequency
// (quant/lowrank_factorize.hpp). The tools count on SST-2's train.tsv (never dev.tsv).
#include <cstddef>
#include <filesystem>
#include <vector>

#include "stile/calibrate/sst2.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile {

// occurrences of every token id of the tokenizer's vocabulary (vocab_size entries) in `sentences`,
// special tokens included (every request has [CLS] and [SEP]). Any tokenizer of text/ (the
// vocab.txt WordPieceTokenizer, the tokenizer.json Tokenizer).
template <class AnyTokenizer>
std::vector<double> token_counts(const AnyTokenizer& tokenizer, std::size_t vocab_size,
                                        const std::vector<std::string>& sentences) {
  std::vector<double> counts(vocab_size, 0.0);
  for (const std::string& s : sentences) {
    const Encoding e = tokenizer.encode(s);
    for (const std::int32_t id : e.input_ids) {
      if (id >= 0 && static_cast<std::size_t>(id) < vocab_size) counts[static_cast<std::size_t>(id)] += 1.0;
    }
  }
  return counts;
}

// The same over the sentences of a GLUE TSV (SST-2's train.tsv).
template <class AnyTokenizer>
std::vector<double> token_counts(const AnyTokenizer& tokenizer, std::size_t vocab_size,
                                        const std::filesystem::path& glue_tsv) {
  return token_counts(tokenizer, vocab_size, read_glue_tsv(glue_tsv).sentences);
}

}  // namespace stile
