#pragma once
// Reading the fields of a JSON document that came from outside (a file's bytes), with errors
// that name the file and the part being read. One kit for every format stile reads: the
// shard-store manifest (store/manifest.hpp), the device profile (plan/device_profile.hpp), the
// heads file (model/heads_file.hpp) and the importance profile (plan/importance.hpp).
//
// Every error is a stile::Error "stile: <file>: <where>: <problem>", or "stile: <file>: <problem>"
// when `where` is empty. `where` names the part of the document ("manifest", "\"split\"",
// "layer 0 shard 3 at 4 bits", "device profile"); `what` names the value in the problem
// ("\"version\"", "\"io_ms\"[2]"). Values quoted in messages are cut short (json_excerpt).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stile/core/file_error.hpp"
#include "stile/io/strict_json.hpp"

namespace stile {

// Throws "stile: <file>: <where>: <parts...>" ("stile: <file>: <parts...>" when where is empty).
template <class... Parts>
[[noreturn]] void json_fail(std::string_view file, std::string_view where, const Parts&... parts) {
  if (where.empty()) fail_in_file(file, parts...);
  fail_in_file(file, where, ": ", parts...);
}

// j[key]; when j has no such key: "missing \"<key>\"".
inline const nlohmann::json& json_member(const nlohmann::json& j, std::string_view key, std::string_view where,
                                         std::string_view file) {
  const auto it = j.find(key);
  if (it == j.end()) json_fail(file, where, "missing \"", key, "\"");
  return *it;
}

// Refuses any key of the object j not in `keys`: "unknown key \"<key>\"" (the first, in j's order).
inline void json_only_keys(const nlohmann::json& j, std::initializer_list<std::string_view> keys,
                           std::string_view where, std::string_view file) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) json_fail(file, where, "unknown key \"", key, "\"");
  }
}

// j[key], a JSON object: "\"<key>\" must be a JSON object, got <value>".
inline const nlohmann::json& json_object_member(const nlohmann::json& j, std::string_view key, std::string_view where,
                                                std::string_view file) {
  const nlohmann::json& v = json_member(j, key, where, file);
  if (!v.is_object()) json_fail(file, where, "\"", key, "\" must be a JSON object, got ", json_excerpt(v));
  return v;
}

// j[key], a JSON array: "\"<key>\" must be a JSON array, got <value>".
inline const nlohmann::json& json_array_member(const nlohmann::json& j, std::string_view key, std::string_view where,
                                               std::string_view file) {
  const nlohmann::json& v = json_member(j, key, where, file);
  if (!v.is_array()) json_fail(file, where, "\"", key, "\" must be a JSON array, got ", json_excerpt(v));
  return v;
}

// j[key], a string: "\"<key>\" must be a string, got <value>".
inline const std::string& json_string_member(const nlohmann::json& j, std::string_view key, std::string_view where,
                                             std::string_view file) {
  const nlohmann::json& v = json_member(j, key, where, file);
  if (!v.is_string()) json_fail(file, where, "\"", key, "\" must be a string, got ", json_excerpt(v));
  return v.get_ref<const std::string&>();
}

// j[key], a string, or `fallback` when the key is absent or null (Hugging Face's "not set").
inline std::string json_optional_string(const nlohmann::json& j, std::string_view key, std::string_view fallback,
                                        std::string_view file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) json_fail(file, "", "\"", key, "\" must be a string, got ", json_excerpt(*it));
  return it->get<std::string>();
}

// j[key], true or false, or `fallback` when the key is absent or null.
inline bool json_optional_bool(const nlohmann::json& j, std::string_view key, bool fallback, std::string_view file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) json_fail(file, "", "\"", key, "\" must be true or false, got ", json_excerpt(*it));
  return it->get<bool>();
}

// A whole number >= 0: "<what> must be a whole number >= 0, got <value>". Parsed text gives
// unsigned numbers; a json built in memory from int literals gives signed ones, also taken.
inline std::uint64_t json_whole(const nlohmann::json& v, std::string_view what, std::string_view where,
                                std::string_view file) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  json_fail(file, where, what, " must be a whole number >= 0, got ", json_excerpt(v));
}

// The stricter reading for formats only ever parsed from text: an unsigned integer as the parser
// gives it ("-0" and in-memory signed values are refused): "<what> must be a non-negative
// integer, got <value>".
inline std::uint64_t json_unsigned(const nlohmann::json& v, std::string_view what, std::string_view where,
                                   std::string_view file) {
  if (!v.is_number_unsigned()) json_fail(file, where, what, " must be a non-negative integer, got ", json_excerpt(v));
  return v.get<std::uint64_t>();
}

// A finite number: "<what> must be a finite number, got <value>". JSON has no NaN or infinity:
// nlohmann writes them as null, so null is how they come back.
inline double json_finite(const nlohmann::json& v, std::string_view what, std::string_view where,
                          std::string_view file) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    json_fail(file, where, what, " must be a finite number, got ", json_excerpt(v));
  }
  return v.get<double>();
}

// A finite number >= 0 (a time, a size): "<what> must be a finite number >= 0, got <value>".
inline double json_nonnegative(const nlohmann::json& v, std::string_view what, std::string_view where,
                               std::string_view file) {
  if (!v.is_number()) json_fail(file, where, what, " must be a finite number >= 0, got ", json_excerpt(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) json_fail(file, where, what, " must be a finite number >= 0, got ", json_excerpt(v));
  return x;
}

// An array of exactly `size` entries: "<what> must be an array, got <value>", "<what> has <n>
// entries, expected <size> (<size_reason>)".
inline const nlohmann::json& json_array_of(const nlohmann::json& v, std::size_t size, std::string_view what,
                                           std::string_view size_reason, std::string_view where,
                                           std::string_view file) {
  if (!v.is_array()) json_fail(file, where, what, " must be an array, got ", json_excerpt(v));
  if (v.size() != size) {
    json_fail(file, where, what, " has ", v.size(), " entries, expected ", size, " (", size_reason, ")");
  }
  return v;
}

// An array of exactly `size` numbers, each read by `read` (json_nonnegative or json_finite) and
// named "<what>[i]" in its error (json_array_of's errors for the array).
template <class Read>
std::vector<double> json_numbers(const nlohmann::json& v, std::size_t size, std::string_view what,
                                 std::string_view size_reason, std::string_view where, std::string_view file,
                                 Read read) {
  json_array_of(v, size, what, size_reason, where, file);
  std::vector<double> out;
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(read(v[i], concat(what, "[", i, "]"), where, file));
  return out;
}
// json_numbers of finite numbers >= 0, and of finite numbers of any sign.
inline std::vector<double> json_nonnegatives(const nlohmann::json& v, std::size_t size, std::string_view what,
                                             std::string_view size_reason, std::string_view where,
                                             std::string_view file) {
  return json_numbers(v, size, what, size_reason, where, file, json_nonnegative);
}
inline std::vector<double> json_finites(const nlohmann::json& v, std::size_t size, std::string_view what,
                                        std::string_view size_reason, std::string_view where, std::string_view file) {
  return json_numbers(v, size, what, size_reason, where, file, json_finite);
}

// A non-empty, strictly increasing array of whole numbers in [lo, hi]: "<what> must be a
// non-empty array, got <value>", "<what>[i] = <x> is outside <lo>..<hi>", "<what> must be
// strictly increasing: <value>" (and json_whole's error for an entry that is not one).
inline std::vector<std::uint64_t> json_increasing(const nlohmann::json& v, std::string_view what, std::uint64_t lo,
                                                  std::uint64_t hi, std::string_view where, std::string_view file) {
  if (!v.is_array() || v.empty()) json_fail(file, where, what, " must be a non-empty array, got ", json_excerpt(v));
  std::vector<std::uint64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint64_t x = json_whole(v[i], concat(what, "[", i, "]"), where, file);
    if (x < lo || x > hi) json_fail(file, where, what, "[", i, "] = ", x, " is outside ", lo, "..", hi);
    if (!out.empty() && x <= out.back()) {
      json_fail(file, where, what, " must be strictly increasing: ", json_excerpt(v));
    }
    out.push_back(x);
  }
  return out;
}

// The "format" and "version" members a stile file of its own opens with: "format" must be `name`,
// else "\"format\" is <value>, expected \"<name>\" (not <what>)"; "version" a whole number equal to
// `version`, else "version <v> is not supported (this reader supports version <version><hint>)";
// errors as json_fail(file, where, ...).
inline void json_check_format(const nlohmann::json& j, std::string_view name, std::string_view what,
                              std::uint64_t version, std::string_view version_hint, std::string_view where,
                              std::string_view file) {
  const nlohmann::json& format = json_member(j, "format", where, file);
  if (!format.is_string() || format.get<std::string>() != name) {
    json_fail(file, where, "\"format\" is ", json_excerpt(format), ", expected \"", name, "\" (not ", what, ")");
  }
  const std::uint64_t v = json_whole(json_member(j, "version", where, file), "\"version\"", where, file);
  if (v != version) {
    json_fail(file, where, "version ", v, " is not supported (this reader supports version ", version, version_hint,
              ")");
  }
}

}  // namespace stile
