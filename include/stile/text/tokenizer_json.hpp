#pragma once
// Reads a Hugging Face tokenizer.json (the tokenizers library's serialization, version "1.0")
// into the parts of a pipeline: each part's reader lives with the part (normalizers.hpp,
// pre_tokenizers.hpp, model_reader.hpp, post_processors.hpp, added_vocabulary.hpp); this file
// reads the top level and builds the BERT pipeline that stands for a bare vocab.txt.
//
// Checked here: the document is JSON (strict: no key twice, bounded nesting), its top-level keys
// are the format's, "truncation" (right direction only) and "padding" are well-formed. The
// decoder is not read (stile does not decode ids back to text), only checked to be an object or
// null. Every error is "stile: <file>: <field path>: <problem>".
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"
#include "stile/text/added_vocabulary.hpp"
#include "stile/text/model_reader.hpp"
#include "stile/text/normalizers.hpp"
#include "stile/text/post_processors.hpp"
#include "stile/text/pre_tokenizers.hpp"
#include "stile/text/tokenizer_parts.hpp"
#include "stile/text/truncation.hpp"
#include "stile/text/vocab.hpp"
#include "stile/text/wordpiece.hpp"

namespace stile::tok {

// Everything a tokenizer.json describes that encoding uses.
struct TokenizerParts {
  std::unique_ptr<const Normalizer> normalizer;        // may be null
  std::unique_ptr<const PreTokenizer> pre_tokenizer;   // may be null
  std::unique_ptr<const Model> model;                  // never null
  std::unique_ptr<const PostProcessor> post_processor;  // may be null: the pair is merged as is
  AddedVocabulary added;
  std::optional<Truncation> truncation;  // the file's own; the caller may replace it
  std::optional<std::int32_t> pad_id;    // "padding".pad_id when the file sets padding
};

namespace json_detail {

// tokenizer.json nests a few levels (Sequence in Sequence); a legitimate file stays far below.
inline constexpr int kMaxDepth = 64;

inline std::optional<Truncation> read_truncation(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null()) return std::nullopt;
  if (!j.is_object()) place.fail("must be a JSON object or null, got ", json_excerpt(j));
  json_only_keys(j, {"direction", "max_length", "strategy", "stride"}, place.path, place.file);
  Truncation t;
  if (const auto it = j.find("direction"); it != j.end() && *it != "Right") {
    (place / "direction").fail("only \"Right\" is supported, got ", json_excerpt(*it));
  }
  t.max_length = json_unsigned(json_member(j, "max_length", place.path, place.file), "\"max_length\"",
                               place.path, place.file);
  t.stride = json_unsigned(json_member(j, "stride", place.path, place.file), "\"stride\"", place.path, place.file);
  const nlohmann::json& strategy = json_member(j, "strategy", place.path, place.file);
  if (strategy == "LongestFirst") {
    t.strategy = TruncationStrategy::longest_first;
  } else if (strategy == "OnlyFirst") {
    t.strategy = TruncationStrategy::only_first;
  } else if (strategy == "OnlySecond") {
    t.strategy = TruncationStrategy::only_second;
  } else {
    (place / "strategy").fail("must be \"LongestFirst\", \"OnlyFirst\" or \"OnlySecond\", got ",
                              json_excerpt(strategy));
  }
  return t;
}

inline std::optional<std::int32_t> read_pad_id(const nlohmann::json& j, const JsonPlace& place) {
  if (j.is_null()) return std::nullopt;
  if (!j.is_object()) place.fail("must be a JSON object or null, got ", json_excerpt(j));
  const auto it = j.find("pad_id");
  if (it == j.end()) return std::nullopt;
  constexpr std::uint64_t kMaxId = 0x7FFFFFFF;
  const std::uint64_t id = json_unsigned(*it, "\"pad_id\"", place.path, place.file);
  if (id > kMaxId) (place / "pad_id").fail("must be below 2^31, got ", id);
  return static_cast<std::int32_t>(id);
}

}  // namespace json_detail

// The parts described by a tokenizer.json's text; `file` names it in errors.
[[nodiscard]] inline TokenizerParts read_tokenizer_json(std::string_view text, std::string_view file) {
  const nlohmann::json doc = parse_strict_json(text, json_detail::kMaxDepth, file, "the tokenizer JSON");
  const JsonPlace top{file, ""};
  if (!doc.is_object()) top.fail("the tokenizer JSON must be an object, got ", json_excerpt(doc));
  json_only_keys(doc,
                 {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                  "decoder", "model"},
                 "", file);
  if (const auto it = doc.find("version"); it != doc.end() && *it != "1.0") {
    (top / "version").fail("only version \"1.0\" of the format is supported, got ", json_excerpt(*it));
  }
  static const nlohmann::json kNull;
  const auto member_or_null = [&](std::string_view key) -> const nlohmann::json& {
    const auto it = doc.find(key);
    return it == doc.end() ? kNull : *it;
  };
  if (const nlohmann::json& decoder = member_or_null("decoder"); !decoder.is_null() && !decoder.is_object()) {
    (top / "decoder").fail("must be a JSON object or null, got ", json_excerpt(decoder));
  }

  TokenizerParts parts;
  parts.model = read_model(json_member(doc, "model", "", file), top / "model");
  parts.normalizer = read_normalizer(member_or_null("normalizer"), top / "normalizer");
  parts.pre_tokenizer = read_pre_tokenizer(member_or_null("pre_tokenizer"), top / "pre_tokenizer");
  parts.added = AddedVocabulary::read(member_or_null("added_tokens"), top / "added_tokens", *parts.model,
                                      parts.normalizer.get());
  parts.post_processor =
      read_post_processor(member_or_null("post_processor"), top / "post_processor", *parts.model, parts.added);
  parts.truncation = json_detail::read_truncation(member_or_null("truncation"), top / "truncation");
  parts.pad_id = json_detail::read_pad_id(member_or_null("padding"), top / "padding");
  return parts;
}

[[nodiscard]] inline TokenizerParts read_tokenizer_json_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::ifstream stream(path, std::ios::binary);
  if (!stream) fail_in_file(name, "cannot open the tokenizer file");
  const std::string text{std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
  if (stream.bad()) fail_in_file(name, "read error");
  return read_tokenizer_json(text, name);
}

// The tokenizer.json that Hugging Face's converter writes for a BERT vocab.txt (transformers'
// BertConverter): BertNormalizer with the given options, BertPreTokenizer, WordPiece over the
// vocabulary ("##" continuations, [UNK], 100 chars a word), [CLS] A [SEP] (B [SEP]) with type ids
// 0 / 1, and BERT's special tokens present in the vocabulary as special added tokens. `source`
// names the vocabulary in errors.
[[nodiscard]] inline TokenizerParts bert_parts_from_vocab(const Vocab& vocab, const BertNormalizerOptions& normalizer,
                                                          std::size_t max_input_chars_per_word,
                                                          std::string_view source) {
  nlohmann::json model_vocab = nlohmann::json::object();
  for (std::size_t id = 0; id < vocab.size(); ++id) {
    // A token listed twice maps to its last id, as the vocabulary's own lookup does.
    model_vocab[std::string(vocab.token(static_cast<std::int32_t>(id)))] = id;
  }
  nlohmann::json added = nlohmann::json::array();
  for (const std::string_view special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) {
    if (const auto id = vocab.find(special)) {
      added.push_back({{"id", *id},
                       {"content", special},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
  }
  const std::int32_t cls = vocab.id_of("[CLS]");
  const std::int32_t sep = vocab.id_of("[SEP]");
  const nlohmann::json doc = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"},
        {"clean_text", true},
        {"handle_chinese_chars", normalizer.handle_chinese_chars},
        {"strip_accents", normalizer.strip_accents ? nlohmann::json(*normalizer.strip_accents) : nlohmann::json()},
        {"lowercase", normalizer.lowercase}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", nlohmann::json::array({{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                          {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}})},
        {"pair", nlohmann::json::array({{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                        {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
                                        {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{"[CLS]", {{"id", "[CLS]"}, {"ids", {cls}}, {"tokens", {"[CLS]"}}}},
          {"[SEP]", {{"id", "[SEP]"}, {"ids", {sep}}, {"tokens", {"[SEP]"}}}}}}}},
      {"decoder", nullptr},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", max_input_chars_per_word},
        {"vocab", model_vocab}}}};
  return read_tokenizer_json(doc.dump(), source);
}

}  // namespace stile::tok
