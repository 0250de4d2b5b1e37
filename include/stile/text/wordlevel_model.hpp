#pragma once
// tokenizer.json's "WordLevel" model (the reference's models/wordlevel/mod.rs and
// serialization.rs): a whole piece is one token, its vocab id or unk_token's.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/text/model_vocab.hpp"
#include "stile/text/tokenizer_parts.hpp"

namespace stile::tok {

class WordLevelModel final : public Model {
 public:
  WordLevelModel(model_detail::TokenVocab vocab, std::string unk_token)
      : vocab_(std::move(vocab)), unk_token_(std::move(unk_token)), unk_id_(vocab_.find(unk_token_)) {}

  // Reads {"type": "WordLevel", "vocab", "unk_token"} (both required, as the reference).
  [[nodiscard]] static WordLevelModel from_json(const nlohmann::json& j, const JsonPlace& place) {
    using namespace model_detail;
    if (!j.is_object()) place.fail("WordLevel model must be a JSON object, got ", json_excerpt(j));
    for (const char* key : {"vocab", "unk_token"}) {
      if (!j.contains(key)) place.fail("WordLevel model: missing \"", key, "\"");
    }
    std::string unk = read_string(j["unk_token"], place / "unk_token");
    return WordLevelModel(read_vocab_object(j["vocab"], place / "vocab"), std::move(unk));
  }

  void tokenize(std::u32string_view piece, std::vector<Token>& out) const override {
    if (piece.empty()) return;
    thread_local std::string bytes;
    bytes.clear();
    model_detail::append_utf8(bytes, piece);
    std::optional<std::int32_t> id = vocab_.find(bytes);
    if (!id) id = unk_id_;
    if (!id) {
      throw Error(
          concat("stile: WordLevel model: unk_token \"", unk_token_, "\" is not in the vocab, and a word needs it"));
    }
    out.push_back({*id, 0, static_cast<std::uint32_t>(piece.size())});
  }

  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view token) const override {
    return vocab_.find(token);
  }
  [[nodiscard]] std::optional<std::string_view> id_to_token(std::int32_t id) const override { return vocab_.token(id); }
  [[nodiscard]] std::size_t vocab_size() const override { return vocab_.size(); }
  [[nodiscard]] std::size_t id_end() const override { return vocab_.id_end(); }
  [[nodiscard]] std::optional<std::int32_t> unk_id() const override { return unk_id_; }
  [[nodiscard]] std::string_view continuing_subword_prefix() const override { return {}; }

 private:
  model_detail::TokenVocab vocab_;
  std::string unk_token_;
  std::optional<std::int32_t> unk_id_;
};

}  // namespace stile::tok
