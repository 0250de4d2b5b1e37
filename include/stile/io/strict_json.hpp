#pragma once
// JSON from outside bytes (safetensors headers, shard-store manifests), parsed strictly: a key
// twice in one object is refused (nlohmann would silently keep the last, so the meaning would
// depend on the parser), and so is nesting deeper than the document can legitimately be, before
// it costs stack or memory. Errors name the file and the document ("header JSON", "the manifest").
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"

namespace stile {

// A JSON value for an error message, cut short: a hostile file may hold megabytes in one value.
inline std::string json_excerpt(const nlohmann::json& value) {
  constexpr std::size_t kMaxChars = 80;
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) {
    text.resize(kMaxChars);
    text += "...";
  }
  return text;
}

inline nlohmann::json parse_strict_json(std::string_view text, int max_depth, std::string_view file,
                                        std::string_view document) {
  std::vector<std::unordered_set<std::string>> keys_per_object;
  auto check = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= max_depth) fail_in_file(file, document, " nests deeper than ", max_depth, " levels");
        if (event == Event::object_start) keys_per_object.emplace_back();
        break;
      case Event::object_end:
        if (!keys_per_object.empty()) keys_per_object.pop_back();
        break;
      case Event::key:
        if (!keys_per_object.empty() && parsed.is_string() &&
            !keys_per_object.back().insert(parsed.get_ref<const std::string&>()).second) {
          constexpr std::size_t kMaxKeyChars = 100;  // keys come from the file: keep messages short
          std::string key = parsed.get<std::string>();
          if (key.size() > kMaxKeyChars) key = key.substr(0, kMaxKeyChars) + "...";
          fail_in_file(file, document, " has the key '", key, "' twice in one object (duplicate key)");
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), check);
  } catch (const nlohmann::json::exception& e) {
    fail_in_file(file, document, " is not valid JSON: ", e.what());
  }
}

}  // namespace stile
