#pragma once
// Truncation of a tokenized text or pair to a maximum length, with the windows that overflow it:
// Hugging Face tokenizers' truncate_encodings (utils/truncation.rs) and Encoding::truncate
// (tokenizer/encoding.rs).
//
// Where it runs (the reference's post_process): after both texts are tokenized, before the
// post-processor, with max_length less the post-processor's added_tokens(is_pair) when special
// tokens are added. post_processors.hpp's post_process() does exactly that; call it.
//
// No early exit while tokenizing: the Rust sources next to the reference stop tokenizing a text
// once max_length tokens are made (tokenize_with_limit), but the installed reference (tokenizers
// 0.23.3, the one stile matches) does not: BertProcessing, max_length 3, 8 words gives [CLS] w1
// [SEP] and 7 overflowing windows, all 8 words; with the early exit there would be 2. The
// fixtures of test_post_processors (truncation with strides, all windows) pass only without it.
// So the pipeline tokenizes every text whole.
//
// The reference panics where a stride does not fit a window (stride >= the window's length) and
// wraps around where max_length is less than the added tokens (then it does not truncate at all);
// here the first is a stile::Error, the second is kept (no truncation), as the reference gives.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/text/encoding.hpp"

namespace stile::tok {

// stile::Truncation and TruncationStrategy (encoding.hpp) say how much and which text; the
// direction is separate (stile::Truncation has none: right unless a caller asks for left).
enum class TruncationDirection {
  right,  // keep the first tokens; windows go on to the right
  left,   // keep the last tokens; windows go on to the left
};

// The reference's Encoding::truncate on an encoding straight from the model (ids, type ids,
// offsets; the rest empty or parallel): keeps max_length tokens, the others become the windows of
// `overflowing` (each max_length long, `stride` tokens shared with the window before).
inline void truncate_encoding(Encoding& e, std::size_t max_length, std::size_t stride, TruncationDirection direction) {
  const std::size_t n = e.input_ids.size();
  if (max_length >= n) return;
  const auto slice = [&e](std::size_t begin, std::size_t end) {
    Encoding part;
    const auto cut = [begin, end](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if (v.size() < end) return V{};
      return V(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end));
    };
    part.input_ids = cut(e.input_ids);
    part.token_type_ids = cut(e.token_type_ids);
    part.attention_mask = cut(e.attention_mask);
    part.offsets = cut(e.offsets);
    part.special_tokens_mask = cut(e.special_tokens_mask);
    part.sequence_ids = cut(e.sequence_ids);
    return part;
  };
  if (max_length == 0) {
    Encoding whole = std::move(e);
    e = Encoding{};
    e.overflowing.push_back(std::move(whole));
    return;
  }
  if (stride >= max_length) {
    throw Error(concat("stile: truncation: stride ", stride, " must be less than the window's length ", max_length,
                       " (max_length less the special tokens the post-processor adds)"));
  }
  const std::size_t step = max_length - stride;
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  if (direction == TruncationDirection::right) {
    for (std::size_t start = 0; start < n; start += step) {
      const std::size_t stop = std::min(start + max_length, n);
      parts.emplace_back(start, stop);
      if (stop == n) break;
    }
  } else {
    // The reference steps `stop` down from n - 1 by `step`, each window [stop + 1 - max_length, stop + 1).
    for (std::size_t i = 0;; ++i) {
      if (i * step > n - 1) break;
      const std::size_t stop = n - i * step;
      const std::size_t start = stop > max_length ? stop - max_length : 0;
      parts.emplace_back(start, stop);
      if (start == 0) break;
    }
  }
  Encoding first = slice(parts[0].first, parts[0].second);
  for (std::size_t i = 1; i < parts.size(); ++i) first.overflowing.push_back(slice(parts[i].first, parts[i].second));
  e = std::move(first);
}

// The reference's truncate_encodings: `params.max_length` is the length for the texts (already less
// the post-processor's special tokens). Errors as the reference's TruncationError.
inline void truncate_encodings(Encoding& first, Encoding* second, const Truncation& params,
                               TruncationDirection direction = TruncationDirection::right) {
  if (params.max_length == 0) {
    truncate_encoding(first, 0, params.stride, direction);
    if (second != nullptr) truncate_encoding(*second, 0, params.stride, direction);
    return;
  }
  const std::size_t total = first.size() + (second != nullptr ? second->size() : 0);
  if (total <= params.max_length) return;
  const std::size_t to_remove = total - params.max_length;
  switch (params.strategy) {
    case TruncationStrategy::longest_first: {
      if (second == nullptr) {
        truncate_encoding(first, total - to_remove, params.stride, direction);
        return;
      }
      std::size_t n1 = first.size();
      std::size_t n2 = second->size();
      const bool swap = n1 > n2;
      if (swap) std::swap(n1, n2);
      n2 = n1 > params.max_length ? n1 : std::max(n1, params.max_length - n1);
      if (n1 + n2 > params.max_length) {
        n1 = params.max_length / 2;
        n2 = n1 + params.max_length % 2;
      }
      if (swap) std::swap(n1, n2);
      truncate_encoding(first, n1, params.stride, direction);
      truncate_encoding(*second, n2, params.stride, direction);
      return;
    }
    case TruncationStrategy::only_first:
    case TruncationStrategy::only_second: {
      Encoding* target = params.strategy == TruncationStrategy::only_first ? &first : second;
      if (target == nullptr) {
        throw Error("stile: truncation error: strategy only_second needs a second text (a pair), got one text");
      }
      if (target->size() <= to_remove) {
        throw Error(concat("stile: truncation error: the ",
                           params.strategy == TruncationStrategy::only_first ? "first" : "second", " text (",
                           target->size(), " tokens) is too short to remove the ", to_remove,
                           " tokens max_length asks for"));
      }
      truncate_encoding(*target, target->size() - to_remove, params.stride, direction);
      return;
    }
  }
}

}  // namespace stile::tok
