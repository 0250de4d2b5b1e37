#pragma once
// A text cut into pieces by the pre-tokenizers (the reference's PreTokenizedString): a list of
// splits, each a NormalizedString, some already tokenized (the added tokens found before the
// normalizer ran). Pre-tokenizers and the model only touch the splits without tokens.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "stile/text/normalized_string.hpp"

namespace stile::tok {

// A token a model (or the added vocabulary) found in a split: its id and the code points
// [begin, end) of the split's normalized text it covers (end > begin).
struct Token {
  std::int32_t id = 0;
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
};

struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;  // set once tokenized
};

class PreTokenizedString {
 public:
  PreTokenizedString() = default;
  explicit PreTokenizedString(NormalizedString whole) {
    if (!whole.empty()) splits_.push_back({std::move(whole), std::nullopt});
  }

  [[nodiscard]] std::vector<Split>& splits() noexcept { return splits_; }
  [[nodiscard]] const std::vector<Split>& splits() const noexcept { return splits_; }

  // Replaces every split without tokens by the splits split_fn(index, normalized) returns (a
  // std::vector<Split> or std::vector<NormalizedString>); empty pieces are dropped, as the
  // reference does. Tokenized splits stay as they are.
  template <class F>
  void split(F&& split_fn) {
    std::vector<Split> out;
    out.reserve(splits_.size());
    for (std::size_t i = 0; i < splits_.size(); ++i) {
      Split& split = splits_[i];
      if (split.tokens) {
        out.push_back(std::move(split));
        continue;
      }
      for (auto&& piece : split_fn(i, std::move(split.normalized))) append_nonempty(out, std::move(piece));
    }
    splits_ = std::move(out);
  }

  // Applies f(NormalizedString&) to every split without tokens.
  template <class F>
  void normalize(F&& f) {
    for (Split& split : splits_) {
      if (!split.tokens) f(split.normalized);
    }
  }

 private:
  static void append_nonempty(std::vector<Split>& out, Split&& piece) {
    if (!piece.normalized.empty()) out.push_back(std::move(piece));
  }
  static void append_nonempty(std::vector<Split>& out, NormalizedString&& piece) {
    if (!piece.empty()) out.push_back({std::move(piece), std::nullopt});
  }

  std::vector<Split> splits_;
};

}  // namespace stile::tok
