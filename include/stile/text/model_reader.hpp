#pragma once
// read_model: tokenizer.json's "model" -> a Model (wordpiece_model.hpp, wordlevel_model.hpp,
// bpe_model.hpp, unigram_model.hpp), as the reference's ModelWrapper deserializer
// (tokenizers/src/models/mod.rs): by "type" when the object has one; without "type" (files from
// before it existed) the first of BPE, WordPiece, WordLevel, Unigram that reads, in that order, as
// the reference's untagged enum tries them.
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/text/bpe_model.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/unigram_model.hpp"
#include "stile/text/wordlevel_model.hpp"
#include "stile/text/wordpiece_model.hpp"

namespace stile::tok {

namespace model_detail {
inline std::unique_ptr<const Model> read_model_of_type(std::string_view type, const nlohmann::json& j,
                                                       const JsonPlace& place) {
  if (type == "BPE") return std::make_unique<const BpeModel>(BpeModel::from_json(j, place));
  if (type == "WordPiece") return std::make_unique<const WordPieceModel>(WordPieceModel::from_json(j, place));
  if (type == "WordLevel") return std::make_unique<const WordLevelModel>(WordLevelModel::from_json(j, place));
  if (type == "Unigram") return std::make_unique<const UnigramModel>(UnigramModel::from_json(j, place));
  return nullptr;
}
}  // namespace model_detail

// Never null: a model that cannot be read is an error naming place and the field.
inline std::unique_ptr<const Model> read_model(const nlohmann::json& j, const JsonPlace& place) {
  if (!j.is_object()) place.fail("the model must be a JSON object, got ", json_excerpt(j));
  if (const auto it = j.find("type"); it != j.end()) {
    if (!it->is_string()) (place / "type").fail("must be a string, got ", json_excerpt(*it));
    const std::string& type = it->get_ref<const std::string&>();
    if (auto model = model_detail::read_model_of_type(type, j, place)) return model;
    (place / "type")
        .fail("model \"type\" \"", type, "\" is not supported (stile reads BPE, WordPiece, WordLevel, Unigram)");
  }
  // Untagged: the reference's order. When none reads, the error is the one of the kind the
  // fields point at (merges: BPE; a list vocab: Unigram; a subword prefix: WordPiece).
  std::string first_error;
  for (const std::string_view type : {"BPE", "WordPiece", "WordLevel", "Unigram"}) {
    try {
      return model_detail::read_model_of_type(type, j, place);
    } catch (const Error& e) {
      const bool likely = (type == "BPE" && j.contains("merges")) ||
                          (type == "Unigram" && j.contains("vocab") && j["vocab"].is_array()) ||
                          (type == "WordPiece" && j.contains("continuing_subword_prefix"));
      if (first_error.empty() || likely) first_error = e.what();
    }
  }
  throw Error(concat(first_error, " (the model has no \"type\"; read as the kind its fields suggest)"));
}

}  // namespace stile::tok
