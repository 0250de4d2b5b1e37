#pragma once
// SST-2 (GLUE) for evaluation: the TSV reader, and the seeded split of train.tsv that every tool
// uses, so that heads, importance profiles and reported accuracies all agree on which sentences
// were fit to and which were held out.
//
// The split (Sst2Split, model/data_split.hpp, fixed unless a tool is told otherwise): one seeded permutation of
// train.tsv's rows; its first `train` rows (8000) train the classification heads, the next
// `calibration` rows (1000) calibrate (the importance profile). dev.tsv is never fit to: it is
// only for reporting accuracy.
//
// Why our own Fisher-Yates over std::mt19937_64: the engine's output sequence is fixed by the
// standard (the 10000th output of a default-seeded one is 9981545732273789042), but
// std::shuffle and std::uniform_int_distribution are not: libstdc++, libc++ and MSVC give
// different permutations from the same engine. The bounded draw below (rejection, then modulo)
// uses only the engine's outputs and integer arithmetic, so a seed means the same split on every
// platform and compiler.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/model/data_split.hpp"

namespace stile {

// Sentences and their class indices, row for row.
struct LabeledSentences {
  std::vector<std::string> sentences;
  std::vector<std::size_t> labels;

  std::size_t size() const noexcept { return sentences.size(); }

  // The rows at `indices`, in that order (each index < size()).
  LabeledSentences subset(std::span<const std::size_t> indices) const {
    LabeledSentences out;
    out.sentences.reserve(indices.size());
    out.labels.reserve(indices.size());
    for (const std::size_t i : indices) {
      require(i < size(), "LabeledSentences::subset: index " + std::to_string(i) + " is outside the " +
                              std::to_string(size()) + " rows");
      out.sentences.push_back(sentences[i]);
      out.labels.push_back(labels[i]);
    }
    return out;
  }
};

// SST-2's class names, in label order (0 = negative, 1 = positive).
inline std::vector<std::string> sst2_label_names() { return {"negative", "positive"}; }

struct GlueTsvOptions {
  std::size_t num_classes = 2;  // labels must be 0..num_classes-1 (SST-2: 0 and 1)
};

// Parses a GLUE single-sentence TSV: the header "sentence<TAB>label", then one row per sentence,
// "text<TAB>label" (a trailing CR is dropped, so CRLF files read the same). A row without exactly
// one tab, with an empty sentence or a label that is not a class index is an Error
// "stile: <file>: line <k>: <problem>" (lines count from 1, the header is line 1). `file` names
// the text in errors.
inline LabeledSentences parse_glue_tsv(std::string_view text, std::string_view file,
                                       const GlueTsvOptions& options = {}) {
  require(options.num_classes >= 1, "parse_glue_tsv: num_classes must be at least 1");
  LabeledSentences out;
  std::size_t line_number = 0, at = 0;
  bool header_seen = false;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!header_seen) {
      if (line != "sentence\tlabel") {
        constexpr std::size_t kShown = 60;  // the line comes from the file: keep messages short
        fail_in_file(file, "line 1: expected the header \"sentence<TAB>label\", got \"", line.substr(0, kShown),
                     line.size() > kShown ? "...\"" : "\"");
      }
      header_seen = true;
      continue;
    }
    const auto where = [&](auto... parts) { fail_in_file(file, "line ", line_number, ": ", parts...); };
    if (line.empty()) where("empty row (expected \"sentence<TAB>label\")");
    const std::size_t tab = line.find('\t');
    if (tab == std::string_view::npos) where("no tab between the sentence and the label");
    if (line.find('\t', tab + 1) != std::string_view::npos) where("more than one tab (expected 2 columns)");
    if (tab == 0) where("empty sentence");
    const std::string_view label = line.substr(tab + 1);
    if (label.empty()) where("empty label");
    std::size_t value = 0;
    for (const char ch : label) {
      if (ch < '0' || ch > '9') where("label \"", label.substr(0, 20), "\" is not a class index");
      value = value * 10 + static_cast<std::size_t>(ch - '0');
      if (value >= options.num_classes) break;  // also stops overflow on a long run of digits
    }
    if (value >= options.num_classes) {
      where("label \"", label.substr(0, 20), "\" is outside 0..", options.num_classes - 1);
    }
    out.sentences.emplace_back(line.substr(0, tab));
    out.labels.push_back(value);
  }
  if (!header_seen) fail_in_file(file, "is empty (expected the header \"sentence<TAB>label\")");
  if (out.size() == 0) fail_in_file(file, "has a header but no rows");
  return out;
}

inline LabeledSentences read_glue_tsv(const std::filesystem::path& path, const GlueTsvOptions& options = {}) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_in_file(file, "cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_in_file(file, "cannot read");
  return parse_glue_tsv(text, file, options);
}

// A uniform draw from [0, bound) using only the engine's outputs: outputs below 2^64 mod bound
// are rejected, so the remaining 2^64 - (2^64 mod bound) values split evenly into `bound` classes.
inline std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound) {
  require(bound > 0, "uniform_below: bound must be positive");
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const std::uint64_t x = engine();
    if (x >= threshold) return x % bound;
  }
}

// A permutation of 0..n-1: Fisher-Yates (for i = n-1 .. 1, swap i with a uniform j in [0, i])
// driven by std::mt19937_64(seed). The same on every platform (see the top of this file).
inline std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> perm(n);
  for (std::size_t i = 0; i < n; ++i) perm[i] = i;
  std::mt19937_64 engine(seed);
  for (std::size_t i = n; i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(engine, i));
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

// Two disjoint index lists covering 0..n-1: the first first_count entries of
// seeded_permutation(n, seed), and the rest (in permutation order).
struct SeededSplit {
  std::vector<std::size_t> first, second;
};

inline SeededSplit split_seeded(std::size_t n, std::uint64_t seed, std::size_t first_count) {
  require(first_count <= n, "split_seeded: " + std::to_string(first_count) + " indices asked of " + std::to_string(n));
  std::vector<std::size_t> perm = seeded_permutation(n, seed);
  SeededSplit out;
  out.first.assign(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(first_count));
  out.second.assign(perm.begin() + static_cast<std::ptrdiff_t>(first_count), perm.end());
  return out;
}

// The parts of an Sst2Split (model/data_split.hpp).
struct Sst2Parts {
  std::vector<std::size_t> train, calibration;  // row indices into train.tsv, disjoint
};

// The parts of a train.tsv with `rows` rows (seeded_permutation(rows, split.seed): its first
// split.train rows, then the next split.calibration).
inline Sst2Parts split_sst2(std::size_t rows, const Sst2Split& split = {}) {
  require(split.train + split.calibration <= rows,
          "SST-2 split: " + std::to_string(split.train) + " training + " + std::to_string(split.calibration) +
              " calibration rows asked of a train set of " + std::to_string(rows));
  SeededSplit s = split_seeded(rows, split.seed, split.train);
  Sst2Parts parts;
  parts.train = std::move(s.first);
  parts.calibration.assign(s.second.begin(), s.second.begin() + static_cast<std::ptrdiff_t>(split.calibration));
  return parts;
}

}  // namespace stile
