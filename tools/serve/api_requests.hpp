#pragma once
// stile-serve's request bodies: each endpoint's JSON read into a typed request, every field
// checked against the shapes the endpoint's API defines (OpenAI's /v1/embeddings; text-embeddings-
// inference's /embed, /rerank and /predict, served here as /classify) and against the server's
// limits. A body that is not what the API says is an ApiError naming the field; nothing here
// touches a model, so the readers run on the HTTP threads and under the fuzzer.
//
// Contract: every reader takes the raw body (outside bytes, any length the body limit lets in)
// and returns a request whose texts are at least one and at most Limits::max_texts, or throws
// ApiError (status 400 for a malformed body or field, 413 for too many texts). Unknown fields are
// refused by name rather than ignored, so a misspelt option is not a silent default.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/error.hpp"
#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"

namespace stile_serve {

// A request the server refuses: the HTTP status, the message, and the field at fault ("" when the
// body as a whole is).
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
};

struct Limits {
  std::size_t max_texts = 512;  // inputs per request
};

// POST /v1/embeddings (OpenAI) and POST /embed (text-embeddings-inference).
struct EmbedRequest {
  std::vector<std::string> texts;
  bool base64 = false;                     // OpenAI encoding_format "base64": little-endian float32
  std::optional<std::size_t> dimensions;   // keep the first N values (sentence-transformers' truncate_dim)
  std::optional<std::string> prompt_name;  // one of the model's prompts
  std::optional<bool> normalize;           // /embed: L2-normalize (default: as the model's pipeline does)
  std::optional<bool> truncate;            // cut texts over the model's length (default: the server's setting)
  std::optional<double> target_ms;         // the elastic engine's latency target for this request
};

// POST /rerank (text-embeddings-inference): the texts scored against the query.
struct RerankRequest {
  std::string query;
  std::vector<std::string> texts;
  bool raw_scores = false;   // the logits rather than the scores
  bool return_text = false;  // each result carries its text
  std::optional<bool> truncate;
};

// POST /classify (text-embeddings-inference's /predict): texts, or pairs of texts.
struct ClassifyRequest {
  std::vector<std::pair<std::string, std::optional<std::string>>> inputs;
  bool single = false;  // "inputs" was one text (or one pair): the answer is one list, not a list of lists
  bool raw_scores = false;
  std::optional<bool> truncate;
  std::optional<double> target_ms;
};

namespace api_detail {

// Request bodies nest at most a list of pairs inside the object.
constexpr int kMaxDepth = 4;

[[noreturn]] inline void refuse(std::string param, std::string message, int status = 400) {
  throw ApiError{status, std::move(message), std::move(param)};
}

inline nlohmann::json parse_object(std::string_view body, std::string_view endpoint) {
  nlohmann::json doc;
  try {
    doc = stile::parse_strict_json(body, kMaxDepth, "request body", endpoint);
  } catch (const stile::Error& e) {
    refuse("", std::string(stile::without_prefix(e.what())));
  }
  if (!doc.is_object()) refuse("", stile::concat("the request body of ", endpoint, " must be a JSON object"));
  return doc;
}

// Refuses a field the endpoint does not know.
inline void only_fields(const nlohmann::json& doc, std::initializer_list<std::string_view> known,
                        std::string_view endpoint) {
  for (const auto& [key, value] : doc.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || key == k;
    if (!found)
      refuse(key, stile::concat("'", key.substr(0, 64), "' is not a field of ", endpoint, " that stile knows"));
  }
}

inline std::string string_field(const nlohmann::json& v, std::string_view name) {
  if (!v.is_string()) refuse(std::string(name), stile::concat("'", name, "' must be a string"));
  return v.get<std::string>();
}

inline std::optional<bool> optional_bool(const nlohmann::json& doc, std::string_view name) {
  const auto it = doc.find(name);
  if (it == doc.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) refuse(std::string(name), stile::concat("'", name, "' must be true or false"));
  return it->get<bool>();
}

inline std::optional<double> optional_positive(const nlohmann::json& doc, std::string_view name) {
  const auto it = doc.find(name);
  if (it == doc.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || !(it->get<double>() > 0)) {
    refuse(std::string(name), stile::concat("'", name, "' must be a number above 0"));
  }
  return it->get<double>();
}

inline std::optional<std::string> optional_string(const nlohmann::json& doc, std::string_view name) {
  const auto it = doc.find(name);
  if (it == doc.end() || it->is_null()) return std::nullopt;
  return string_field(*it, name);
}

// text-embeddings-inference's truncation_direction: stile cuts on the right only.
inline void right_truncation_only(const nlohmann::json& doc) {
  if (const std::optional<std::string> d = optional_string(doc, "truncation_direction"); d && *d != "Right") {
    refuse("truncation_direction", "'truncation_direction' Left is not supported by stile: texts are cut on the right");
  }
}

inline void check_count(std::size_t n, std::string_view name, const Limits& limits) {
  if (n == 0) refuse(std::string(name), stile::concat("'", name, "' is an empty list: give at least one text"));
  if (n > limits.max_texts) {
    refuse(
        std::string(name),
        stile::concat("'", name, "' has ", n, " texts; this server takes at most ", limits.max_texts, " per request"),
        413);
  }
}

// A text or a list of texts. Token ids (OpenAI's other input forms) are refused by name.
inline std::vector<std::string> texts_field(const nlohmann::json& doc, std::string_view name, const Limits& limits,
                                            bool* was_single = nullptr) {
  const auto it = doc.find(name);
  if (it == doc.end()) refuse(std::string(name), stile::concat("'", name, "' is missing"));
  if (was_single) *was_single = it->is_string();
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array()) refuse(std::string(name), stile::concat("'", name, "' must be a string or a list of strings"));
  check_count(it->size(), name, limits);
  std::vector<std::string> texts;
  texts.reserve(it->size());
  for (const nlohmann::json& t : *it) {
    if (t.is_number_integer() || t.is_array()) {
      refuse(std::string(name), stile::concat("'", name, "' as token ids is not supported by stile: give text"));
    }
    if (!t.is_string()) refuse(std::string(name), stile::concat("'", name, "' must be a string or a list of strings"));
    texts.push_back(t.get<std::string>());
  }
  return texts;
}

}  // namespace api_detail

inline EmbedRequest parse_openai_embeddings(std::string_view body, const Limits& limits) {
  using namespace api_detail;
  const nlohmann::json doc = parse_object(body, "/v1/embeddings");
  only_fields(doc, {"input", "model", "encoding_format", "dimensions", "user", "prompt_name", "truncate", "target_ms"},
              "/v1/embeddings");
  EmbedRequest r;
  r.texts = texts_field(doc, "input", limits);
  // "model" and "user" are read for their type only: the server serves the model it loaded.
  optional_string(doc, "model");
  optional_string(doc, "user");
  if (const std::optional<std::string> format = optional_string(doc, "encoding_format")) {
    if (*format != "float" && *format != "base64")
      refuse("encoding_format", "'encoding_format' must be float or base64");
    r.base64 = *format == "base64";
  }
  if (const auto it = doc.find("dimensions"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_unsigned() || it->get<std::size_t>() == 0) {
      refuse("dimensions", "'dimensions' must be a whole number above 0");
    }
    r.dimensions = it->get<std::size_t>();
  }
  r.prompt_name = optional_string(doc, "prompt_name");
  r.truncate = optional_bool(doc, "truncate");
  r.target_ms = optional_positive(doc, "target_ms");
  return r;
}

inline EmbedRequest parse_tei_embed(std::string_view body, const Limits& limits) {
  using namespace api_detail;
  const nlohmann::json doc = parse_object(body, "/embed");
  only_fields(doc, {"inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "target_ms"}, "/embed");
  EmbedRequest r;
  r.texts = texts_field(doc, "inputs", limits);
  r.normalize = optional_bool(doc, "normalize");
  r.truncate = optional_bool(doc, "truncate");
  right_truncation_only(doc);
  r.prompt_name = optional_string(doc, "prompt_name");
  r.target_ms = optional_positive(doc, "target_ms");
  return r;
}

inline RerankRequest parse_rerank(std::string_view body, const Limits& limits) {
  using namespace api_detail;
  const nlohmann::json doc = parse_object(body, "/rerank");
  only_fields(doc, {"query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction"}, "/rerank");
  RerankRequest r;
  const auto query = doc.find("query");
  if (query == doc.end()) refuse("query", "'query' is missing");
  r.query = string_field(*query, "query");
  const auto texts = doc.find("texts");
  if (texts == doc.end()) refuse("texts", "'texts' is missing");
  if (!texts->is_array()) refuse("texts", "'texts' must be a list of strings");
  r.texts = texts_field(doc, "texts", limits);
  r.raw_scores = optional_bool(doc, "raw_scores").value_or(false);
  r.return_text = optional_bool(doc, "return_text").value_or(false);
  r.truncate = optional_bool(doc, "truncate");
  right_truncation_only(doc);
  return r;
}

inline ClassifyRequest parse_classify(std::string_view body, const Limits& limits) {
  using namespace api_detail;
  const nlohmann::json doc = parse_object(body, "/classify");
  only_fields(doc, {"inputs", "raw_scores", "truncate", "truncation_direction", "target_ms"}, "/classify");
  ClassifyRequest r;
  const auto inputs = doc.find("inputs");
  if (inputs == doc.end()) refuse("inputs", "'inputs' is missing");
  // One input: a string or a pair [a, b]. Many: a list of those. As in text-embeddings-inference,
  // ["a", "b"] is one pair; ["a", "b", "c"] and ["a"] are lists of single texts.
  const auto one = [](const nlohmann::json& v) -> std::pair<std::string, std::optional<std::string>> {
    if (v.is_string()) return {v.get<std::string>(), std::nullopt};
    if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) {
      return {v[0].get<std::string>(), v[1].get<std::string>()};
    }
    refuse("inputs", "'inputs' must be a text, a pair [text, text_pair], or a list of those");
  };
  const bool is_one_pair =
      inputs->is_array() && inputs->size() == 2 && (*inputs)[0].is_string() && (*inputs)[1].is_string();
  if (inputs->is_string() || is_one_pair) {
    r.single = true;
    r.inputs.push_back(one(*inputs));
  } else {
    if (!inputs->is_array()) refuse("inputs", "'inputs' must be a text, a pair [text, text_pair], or a list of those");
    check_count(inputs->size(), "inputs", limits);
    for (const nlohmann::json& v : *inputs) r.inputs.push_back(one(v));
  }
  r.raw_scores = optional_bool(doc, "raw_scores").value_or(false);
  r.truncate = optional_bool(doc, "truncate");
  right_truncation_only(doc);
  r.target_ms = optional_positive(doc, "target_ms");
  return r;
}

}  // namespace stile_serve
