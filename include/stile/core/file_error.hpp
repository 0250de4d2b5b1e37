#pragma once
// The error every reader of outside files throws: "stile: <file>: <problem>", so a user sees at
// once which file is bad and why.
//
// Messages are assembled by appending parts to one string rather than with `"literal" +
// std::string`: GCC 12 reports false -Wrestrict errors for that pattern under -O3 -Werror
// (GCC bug 105329), and appending is no slower.
#include <concepts>
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

template <class... Parts>
[[noreturn]] void fail_in_file(std::string_view file, const Parts&... parts) {
  throw Error(concat("stile: ", file, ": ", parts...));
}

}  // namespace stile
