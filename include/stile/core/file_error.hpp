#pragma once
// The error every reader of outside files throws: "stile: <file>: <problem>", so a user sees at
// once which file is bad and why.
//
// Messages are assembled by appending parts to one string rather than with `"literal" +
// std::string`: GCC 12 reports false -Wrestrict errors for that pattern under -O3 -Werror
// (GCC bug 105329), and appending is no slower.
#include <cmath>
#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>

#include "stile/core/error.hpp"

namespace stile {

inline void append_part(std::string& out, std::string_view part) { out += part; }

// Integers print as numbers (char and bool are excluded: they would print as codes).
template <std::integral T>
requires(!std::same_as<T, char> && !std::same_as<T, bool>) void append_part(std::string& out, T number) {
  out += std::to_string(number);
}

template <class... Parts>
std::string concat(const Parts&... parts) {
  std::string out;
  (append_part(out, parts), ...);
  return out;
}

// A float as a message shows it: all 9 significant digits, "nan", "inf", "-inf".
inline std::string float_text(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// The message of a stile::Error without its "stile: " prefix (to re-throw it naming the file).
inline std::string_view without_prefix(std::string_view what) {
  return what.starts_with("stile: ") ? what.substr(7) : what;
}

template <class... Parts>
[[noreturn]] void fail_in_file(std::string_view file, const Parts&... parts) {
  throw Error(concat("stile: ", file, ": ", parts...));
}

}  // namespace stile
