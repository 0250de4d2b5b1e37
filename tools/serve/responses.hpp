#pragma once
// stile-serve's answers: the JSON bodies of each endpoint's API (OpenAI's embeddings list and error
// object; text-embeddings-inference's /embed, /rerank and /predict bodies and error object),
// written directly rather than through a JSON tree so a float prints in its shortest form that
// reads back to the same float (a double's 17 digits would double the bytes on the wire).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "stile/model/task_model.hpp"  // TaskModel::rank: best first, ties in input order

namespace stile_serve {

enum class Api { kOpenAi, kTei };

// A string as a JSON string literal (escaped; invalid UTF-8 replaced).
inline std::string json_string(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Standard base64 (RFC 4648, padded) of bytes.
inline std::string base64(std::span<const std::byte> bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto n = (std::to_integer<std::uint32_t>(bytes[i]) << 16) |
                   (std::to_integer<std::uint32_t>(bytes[i + 1]) << 8) | std::to_integer<std::uint32_t>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(n >> shift) & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t n = std::to_integer<std::uint32_t>(bytes[i]) << 16;
    if (rest == 2) n |= std::to_integer<std::uint32_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// A float vector as OpenAI's base64 encoding_format gives it: the little-endian float32 bytes.
inline std::string base64_floats(std::span<const float> values) {
  static_assert(std::endian::native == std::endian::little, "the wire format is little-endian float32");
  return base64(std::as_bytes(values));
}

inline void append_floats(std::string& out, std::span<const float> values) {
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", values[i]);
  }
  out += ']';
}

// OpenAI's embeddings list.
inline std::string openai_embeddings(std::span<const std::vector<float>> embeddings, bool base64_format,
                                     std::string_view model, std::size_t tokens, std::string_view extra_fields) {
  std::string out = R"({"object":"list","data":[)";
  for (std::size_t i = 0; i < embeddings.size(); ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), R"({{"object":"embedding","index":{},"embedding":)", i);
    if (base64_format) {
      out += '"';
      out += base64_floats(embeddings[i]);
      out += '"';
    } else {
      append_floats(out, embeddings[i]);
    }
    out += '}';
  }
  fmt::format_to(std::back_inserter(out), R"(],"model":{},"usage":{{"prompt_tokens":{},"total_tokens":{}}}{}}})",
                 json_string(model), tokens, tokens, extra_fields);
  return out;
}

// text-embeddings-inference's /embed: a list of float lists.
inline std::string tei_embeddings(std::span<const std::vector<float>> embeddings) {
  std::string out = "[";
  for (std::size_t i = 0; i < embeddings.size(); ++i) {
    if (i > 0) out += ',';
    append_floats(out, embeddings[i]);
  }
  out += ']';
  return out;
}

// text-embeddings-inference's /rerank: {index, score[, text]} by descending score (ties: input order).
inline std::string tei_rerank(std::span<const double> scores, std::span<const std::string> texts, bool return_text) {
  const std::vector<std::size_t> order = stile::TaskModel::rank(scores);
  std::string out = "[";
  for (std::size_t k = 0; k < order.size(); ++k) {
    if (k > 0) out += ',';
    fmt::format_to(std::back_inserter(out), R"({{"index":{},"score":{})", order[k], scores[order[k]]);
    if (return_text) fmt::format_to(std::back_inserter(out), R"(,"text":{})", json_string(texts[order[k]]));
    out += '}';
  }
  out += ']';
  return out;
}

// text-embeddings-inference's /predict, per input: every label with its score, best first.
inline std::string tei_predictions(std::span<const std::vector<double>> scores, std::span<const std::string> labels,
                                   bool single) {
  std::string out = single ? "" : "[";
  for (std::size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) out += ',';
    const std::vector<std::size_t> order = stile::TaskModel::rank(scores[i]);
    out += '[';
    for (std::size_t k = 0; k < order.size(); ++k) {
      if (k > 0) out += ',';
      fmt::format_to(std::back_inserter(out), R"({{"label":{},"score":{}}})", json_string(labels[order[k]]),
                     scores[i][order[k]]);
    }
    out += ']';
  }
  if (!single) out += ']';
  return out;
}

// The error body of each API: OpenAI's {"error": {message, type, param, code}}, text-embeddings-
// inference's {"error", "error_type"}.
inline std::string error_body(Api api, int status, std::string_view message, std::string_view param) {
  if (api == Api::kOpenAi) {
    const char* type = status == 503 ? "server_overloaded" : status >= 500 ? "server_error" : "invalid_request_error";
    return fmt::format(R"({{"error":{{"message":{},"type":"{}","param":{},"code":null}}}})", json_string(message), type,
                       param.empty() ? "null" : json_string(param));
  }
  const char* type = status == 503 ? "Overloaded" : status >= 500 ? "Backend" : "Validation";
  return fmt::format(R"({{"error":{},"error_type":"{}"}})", json_string(message), type);
}

}  // namespace stile_serve
